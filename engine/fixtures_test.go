package engine

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// checkSameInterface compares the graph inputs and outputs (names, element types, dims) and
// the opset of two models, and opens the second in ONNX Runtime.
func checkSameInterface(t *testing.T, origPath, gotPath string) {
	t.Helper()
	load := func(path string) *onnxpb.ModelProto {
		var m onnxpb.ModelProto
		if err := proto.Unmarshal(readFile(t, path), &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	a, b := load(origPath), load(gotPath)
	sig := func(vs []*onnxpb.ValueInfoProto) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.GetName()+" "+prototext.Format(v.GetType()))
		}
		return out
	}
	if !slices.Equal(sig(a.GetGraph().GetInput()), sig(b.GetGraph().GetInput())) {
		t.Errorf("inputs changed:\n%v\n%v", sig(a.GetGraph().GetInput()), sig(b.GetGraph().GetInput()))
	}
	if !slices.Equal(sig(a.GetGraph().GetOutput()), sig(b.GetGraph().GetOutput())) {
		t.Errorf("outputs changed:\n%v\n%v", sig(a.GetGraph().GetOutput()), sig(b.GetGraph().GetOutput()))
	}
	if prototext.Format(a.GetOpsetImport()[0]) != prototext.Format(b.GetOpsetImport()[0]) {
		t.Errorf("opset changed: %v → %v", a.GetOpsetImport(), b.GetOpsetImport())
	}
	s, err := onnx.Open(context.Background(), gotPath, onnx.Config{MaxBatch: 1})
	if err != nil {
		t.Fatalf("the written policy does not load in ONNX Runtime: %v", err)
	}
	s.Close()
}

// foreignFixture is the part of testdata/foreign/NAME.json these tests read.
type foreignFixture struct {
	Env           string `json:"env"`
	WeakOf        string `json:"weak_of"`
	PytorchReturn struct {
		Mean float64 `json:"mean"`
	} `json:"pytorch_return"`
}

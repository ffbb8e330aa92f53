package onnxpb

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestGeneratedFromThisProto fails when onnx-ml.proto changed without `go generate`.
func TestGeneratedFromThisProto(t *testing.T) {
	b, err := os.ReadFile("onnx-ml.proto")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != protoSHA256 {
		t.Fatalf("onnx-ml.proto has sha256 %s but onnx-ml.pb.go was generated from %s: run `go generate ./onnx/onnxpb`", got, protoSHA256)
	}
}

// TestDecodePyTorchExport reads a torch.onnx.export file and checks what the exporter wrote.
func TestDecodePyTorchExport(t *testing.T) {
	b, err := os.ReadFile("../../testdata/mlp_tanh.onnx")
	if err != nil {
		t.Fatal(err)
	}
	var m ModelProto
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.GetProducerName() != "pytorch" || m.GetOpsetImport()[0].GetVersion() != 13 {
		t.Errorf("producer %q opset %d", m.GetProducerName(), m.GetOpsetImport()[0].GetVersion())
	}
	g := m.GetGraph()
	if g.GetInput()[0].GetName() != "obs" || g.GetOutput()[0].GetName() != "logits" || g.GetOutput()[1].GetName() != "value" {
		t.Errorf("inputs %v outputs %v", g.GetInput(), g.GetOutput())
	}
	// Two 3-layer trunks: 4·64+64·64+64·2 + 4·64+64·64+64·1 weights, 64+64+2 + 64+64+1 biases.
	// CleanRL's initialisation makes the four hidden biases identical zeros, and torch 1.13's
	// exporter keeps one of them (critic.0.bias) and feeds the other three through Identity.
	var params int
	for _, init := range g.GetInitializer() {
		n := int64(1)
		for _, d := range init.GetDims() {
			n *= d
		}
		params += int(n)
	}
	identities := 0
	for _, n := range g.GetNode() {
		if n.GetOpType() == "Identity" && n.GetInput()[0] == "critic.0.bias" {
			identities++
		}
	}
	weights := 4*64 + 64*64 + 64*2 + 4*64 + 64*64 + 64
	if len(g.GetInitializer()) != 9 || params != weights+64+2+1 || identities != 3 {
		t.Errorf("%d initializers with %d values, %d Identity nodes of critic.0.bias", len(g.GetInitializer()), params, identities)
	}
	meta := map[string]string{}
	for _, p := range m.GetMetadataProps() {
		meta[p.GetKey()] = p.GetValue()
	}
	if meta["towerrl.action_space"] != "discrete:2" {
		t.Errorf("metadata %v", meta)
	}
	again, err := proto.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	var m2 ModelProto
	if err := proto.Unmarshal(again, &m2); err != nil || !proto.Equal(&m, &m2) {
		t.Fatalf("round trip differs (%v)", err)
	}
}

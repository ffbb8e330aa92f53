package edit

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
)

// TestOffAxisBatch: a state input [1, N, 3] is found with its batch on axis 1, its output
// counterpart too; batch-first inputs and a model without such inputs give nothing; BatchFirst
// renames and permutes the named tensors in a copy, and refuses a name the graph lacks.
func TestOffAxisBatch(t *testing.T) {
	m, err := onnx.Parse(newBuilder(13).input("obs", tFloat, -1, 2).input("h", tFloat, 1, -1, 3).
		output("y", tFloat, -1, 2).output("h_out", tFloat, 1, -1, 3).
		node("Neg", []string{"obs"}, []string{"y"}).node("Neg", []string{"h"}, []string{"h_out"}).bytes(t))
	if err != nil {
		t.Fatal(err)
	}
	axes := OffAxisBatch(m)
	if diff := cmp.Diff(map[string]int{"h": 1, "h_out": 1}, axes); diff != "" {
		t.Fatalf("axes (-want +got):\n%s", diff)
	}
	before := proto.Clone(m.Proto())
	edited, renamed, err := BatchFirst(m, axes)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, m.Proto()) {
		t.Error("BatchFirst modified its model")
	}
	if diff := cmp.Diff(map[string]string{"h": "h" + BatchFirstSuffix, "h_out": "h_out" + BatchFirstSuffix}, renamed); diff != "" {
		t.Errorf("renamed (-want +got):\n%s", diff)
	}
	g := edited.Proto().GetGraph()
	if in := g.GetInput()[1]; in.GetName() != "h"+BatchFirstSuffix || in.GetType().GetTensorType().GetShape().GetDim()[0].GetDimParam() != "N" {
		t.Errorf("input %v", in)
	}
	if OffAxisBatch(edited) != nil {
		t.Error("the batch-first model still has inputs batched off axis 0")
	}
	if _, _, err := BatchFirst(m, map[string]int{"nope": 1}); err == nil {
		t.Error("an unknown name accepted")
	}
}

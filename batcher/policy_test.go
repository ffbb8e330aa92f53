package batcher

import (
	"testing"

	"github.com/towerrl/towerrl/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// constPolicy builds a CartPole-shaped ONNX policy that ignores its input: its value output is
// the version, and its logits favour action version%2 by 20 nats. So every sample says which
// policy produced it.
func constPolicy(t testing.TB, version int64) []byte {
	t.Helper()
	tensor := func(name string, dims []int64, vals []float32) *onnxpb.TensorProto {
		return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: vals}
	}
	info := func(name string, width int64) *onnxpb.ValueInfoProto {
		dims := []*onnxpb.TensorShapeProto_Dimension{
			{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}},
			{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: width}},
		}
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: &onnxpb.TensorShapeProto{Dim: dims}}}}}
	}
	gemm := func(in, w, b, out string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String("Gemm"), Input: []string{in, w, b}, Output: []string{out}, Name: proto.String(out)}
	}
	bias := []float32{10, -10}
	if version%2 == 1 {
		bias = []float32{-10, 10}
	}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(13)}},
		Graph: &onnxpb.GraphProto{
			Name:   proto.String("const"),
			Input:  []*onnxpb.ValueInfoProto{info("obs", 4)},
			Output: []*onnxpb.ValueInfoProto{info("logits", 2), info("value", 1)},
			Node:   []*onnxpb.NodeProto{gemm("obs", "w", "b", "logits"), gemm("obs", "wv", "bv", "value")},
			Initializer: []*onnxpb.TensorProto{
				tensor("w", []int64{4, 2}, make([]float32, 8)), tensor("b", []int64{2}, bias),
				tensor("wv", []int64{4, 1}, make([]float32, 4)), tensor("bv", []int64{1}, []float32{float32(version)}),
			},
		},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

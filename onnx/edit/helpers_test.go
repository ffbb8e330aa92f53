package edit

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// builder assembles small ONNX models for tests.
type builder struct {
	m *onnxpb.ModelProto
}

func newBuilder(opset int64) *builder {
	return &builder{m: &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}, {Domain: proto.String("com.microsoft"), Version: proto.Int64(1)}},
		Graph:       &onnxpb.GraphProto{Name: proto.String("test")},
	}}
}

func valueInfo(name string, elem int32, dims ...int64) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if d < 0 {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "N"}
		}
		sh.Dim = append(sh.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(elem), Shape: sh}}}}
}

// input adds a graph input; a negative dimension is dynamic.
func (b *builder) input(name string, elem int32, dims ...int64) *builder {
	b.m.Graph.Input = append(b.m.Graph.Input, valueInfo(name, elem, dims...))
	return b
}

func (b *builder) output(name string, elem int32, dims ...int64) *builder {
	b.m.Graph.Output = append(b.m.Graph.Output, valueInfo(name, elem, dims...))
	return b
}

// floats adds a float initializer.
func (b *builder) floats(name string, dims []int64, vals ...float32) *builder {
	b.m.Graph.Initializer = append(b.m.Graph.Initializer, &onnxpb.TensorProto{
		Name: proto.String(name), Dims: dims, DataType: proto.Int32(tFloat), FloatData: vals})
	return b
}

// ints adds a 1-D int64 initializer.
func (b *builder) ints(name string, vals ...int64) *builder {
	b.m.Graph.Initializer = append(b.m.Graph.Initializer, intTensor(name, tInt64, []int64{int64(len(vals))}, vals))
	return b
}

// node adds a node "op:out" (named after its first output) with the given attributes.
func (b *builder) node(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *builder {
	domain := ""
	if op == "Gelu" || op == "FastGelu" {
		domain = "com.microsoft"
	}
	b.m.Graph.Node = append(b.m.Graph.Node, &onnxpb.NodeProto{
		Name: proto.String(op + ":" + outs[0]), OpType: proto.String(op), Domain: proto.String(domain),
		Input: ins, Output: outs, Attribute: attrs})
	return b
}

func (b *builder) bytes(t testing.TB) []byte {
	t.Helper()
	data, err := proto.Marshal(b.m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func aStr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

func aTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

func ins(names ...string) []string { return names }

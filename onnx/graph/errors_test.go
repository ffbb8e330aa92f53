package graph

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

func TestUnsupportedOp(t *testing.T) {
	tm := testModel{opset: 13, input: []int64{4}, nodes: []*onnxpb.NodeProto{
		mkNode("Tanh", []string{"x"}, []string{"h"}),
		mkNode("LSTM", []string{"h"}, []string{"y"}),
	}}
	tm.outputs, tm.order = map[string][]int64{"y": {4}}, []string{"y"}
	_, err := Parse(tm.bytes(t))
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("error %v, want an *UnsupportedError", err)
	}
	want := `graph: node "y_LSTM" (op LSTM) is not supported; supported: Add, Concat, Constant, Conv, Div, Exp, Expand, Flatten, Gather, Gemm, Identity, LogSoftmax, MatMul, Mul, Neg, Relu, Reshape, Shape, Sigmoid, Softmax, Squeeze, Sub, Tanh, Unsqueeze`
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}
}

// TestBadInput feeds broken models, batches and parameters: each is an error, never a panic.
func TestBadInput(t *testing.T) {
	m := parse(t, "mlp_tanh")
	good, err := proto.Marshal(m.proto)
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(*onnxpb.ModelProto)) []byte {
		mp := proto.Clone(m.proto).(*onnxpb.ModelProto)
		f(mp)
		data, err := proto.Marshal(mp)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrModel},
		{"garbage", []byte("not an onnx model at all"), ErrModel},
		{"truncated", good[:len(good)/2], ErrModel},
		{"no graph", mutate(func(mp *onnxpb.ModelProto) { mp.Graph = nil }), ErrModel},
		{"no opset", mutate(func(mp *onnxpb.ModelProto) { mp.OpsetImport = nil }), ErrModel},
		{"undefined input", mutate(func(mp *onnxpb.ModelProto) { mp.Graph.Node[3].Input[0] = "nowhere" }), ErrModel},
		{"short initializer", mutate(func(mp *onnxpb.ModelProto) { mp.Graph.Initializer[0].RawData = mp.Graph.Initializer[0].RawData[:8] }), ErrModel},
		{"custom domain", mutate(func(mp *onnxpb.ModelProto) { mp.Graph.Node[3].Domain = proto.String("com.microsoft") }), ErrUnsupported},
		{"int input", mutate(func(mp *onnxpb.ModelProto) {
			mp.Graph.Input[0].Type.GetTensorType().ElemType = proto.Int32(int32(onnxpb.TensorProto_INT64))
		}), ErrModel},
		{"missing output", mutate(func(mp *onnxpb.ModelProto) { mp.Graph.Output[0].Name = proto.String("nothing") }), ErrModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.data); !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}

	p := m.NewParams()
	if _, err := m.Build(G.NewGraph(), p, 0); !errors.Is(err, ErrShape) {
		t.Errorf("batch 0: error %v, want ErrShape", err)
	}
	if _, err := m.Build(nil, p, 1); err == nil {
		t.Errorf("nil graph: no error")
	}
	other := parse(t, "gaussian_relu").NewParams()
	if _, err := m.Build(G.NewGraph(), other, 2); !errors.Is(err, ErrParams) {
		t.Errorf("another model's params: error %v, want ErrParams", err)
	}
	if _, err := m.WriteBack(other, WriteOptions{}); !errors.Is(err, ErrParams) {
		t.Errorf("write-back of another model's params: error %v, want ErrParams", err)
	}
	if _, err := m.Build(G.NewGraph(), nil, 2); !errors.Is(err, ErrParams) {
		t.Errorf("nil params: error %v, want ErrParams", err)
	}
	bad := p.Clone()
	bad.vals["actor.0.weight"] = tensor.New(tensor.WithShape(4, 64), tensor.Of(tensor.Float32))
	if _, err := m.Build(G.NewGraph(), bad, 2); !errors.Is(err, ErrParams) {
		t.Errorf("transposed weight: error %v, want ErrParams", err)
	}
	if _, err := p.As(tensor.Int); !errors.Is(err, ErrParams) {
		t.Errorf("As(Int): error %v, want ErrParams", err)
	}

	// Shapes that only fail while building: a Gemm whose weight does not fit its input.
	shapeBad := mutate(func(mp *onnxpb.ModelProto) {
		mp.Graph.Input[0].Type.GetTensorType().Shape.Dim[1].Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: 5}
	})
	m2, err := Parse(shapeBad)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m2.Build(G.NewGraph(), m2.NewParams(), 3)
	if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "Gemm") {
		t.Errorf("mismatched Gemm: error %v, want ErrShape naming the node", err)
	}
}

// TestConvUnsupported covers Conv attributes the importer refuses with a reason.
func TestConvUnsupported(t *testing.T) {
	for name, attrs := range map[string][]*onnxpb.AttributeProto{
		"group":      {aInt("group", 2)},
		"asymmetric": {aInts("pads", 0, 0, 1, 1)},
	} {
		t.Run(name, func(t *testing.T) {
			tm := testModel{opset: 13, input: []int64{2, 6, 6},
				inits: []*onnxpb.TensorProto{floatInit(rand.New(rand.NewPCG(1, 1)), "W", 2, 2, 3, 3)},
				nodes: []*onnxpb.NodeProto{mkNode("Conv", []string{"x", "W"}, []string{"y"}, attrs...)}}
			tm.outputs, tm.order = map[string][]int64{"y": {2, 4, 4}}, []string{"y"}
			m, err := Parse(tm.bytes(t))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Build(G.NewGraph(), m.NewParams(), 1); !errors.Is(err, ErrUnsupported) {
				t.Errorf("error %v, want ErrUnsupported", err)
			}
		})
	}
}

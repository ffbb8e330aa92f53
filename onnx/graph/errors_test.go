package graph

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// TestUnsupportedOps: Parse accepts a graph whose nodes use operators the importer lacks;
// Check and Build list every such node on the path to the tensors asked for, in one error,
// and a tensor before them builds.
func TestUnsupportedOps(t *testing.T) {
	tm := testModel{opset: 13, input: []int64{4}, nodes: []*onnxpb.NodeProto{
		mkNode("Tanh", []string{"x"}, []string{"h"}),
		mkNode("Foo", []string{"h"}, []string{"f1"}),
		mkNode("Foo", []string{"f1"}, []string{"f2"}),
		mkNode("Bar", []string{"h"}, []string{"b"}),
		mkNode("Add", []string{"f2", "b"}, []string{"y"}),
		mkNode("Baz", []string{"x"}, []string{"z"}),
	}}
	tm.nodes[3].Domain = proto.String("com.example")
	tm.outputs, tm.order = map[string][]int64{"y": {4}, "z": {4}}, []string{"y", "z"}
	m, err := Parse(tm.bytes(t))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for _, tc := range []struct {
		outputs []string
		nodes   []UnsupportedNode
	}{
		{nil, []UnsupportedNode{{"f1_Foo", "Foo", ""}, {"f2_Foo", "Foo", ""}, {"b_Bar", "Bar", "com.example"}, {"z_Baz", "Baz", ""}}},
		{[]string{"y"}, []UnsupportedNode{{"f1_Foo", "Foo", ""}, {"f2_Foo", "Foo", ""}, {"b_Bar", "Bar", "com.example"}}},
		{[]string{"b", "z"}, []UnsupportedNode{{"b_Bar", "Bar", "com.example"}, {"z_Baz", "Baz", ""}}},
	} {
		for _, err := range []error{m.Check(tc.outputs...), func() error {
			_, err := m.Build(G.NewGraph(), m.NewParams(), 2, tc.outputs...)
			return err
		}()} {
			var ue *UnsupportedError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("outputs %v: error %v, want an *UnsupportedError", tc.outputs, err)
			}
			if diff := cmp.Diff(tc.nodes, ue.Nodes); diff != "" {
				t.Errorf("outputs %v: unsupported nodes (-want +got):\n%s", tc.outputs, diff)
			}
		}
	}
	err = m.Check()
	for _, want := range []string{`4 nodes use operators the importer lacks, on the path to "y", "z"`,
		`Foo ×2 ("f1_Foo", "f2_Foo")`, `com.example.Bar ×1 ("b_Bar")`, `Baz ×1 ("z_Baz")`,
		"Build's outputs may name any inner tensor", "LSTM", "ReduceLogSumExp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The inner tensor h is computed by supported nodes alone.
	if err := m.Check("h"); err != nil {
		t.Fatalf("Check(h): %v", err)
	}
	gr, err := m.Build(G.NewGraph(), m.NewParams(), 2, "h")
	if err != nil {
		t.Fatal(err)
	}
	x := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float32{-2, -1, 0, 1, 2, 3, 4, 5}))
	got := forward(t, gr, x)
	for k, v := range x.Data().([]float32) {
		if d := math.Abs(got[0][k] - math.Tanh(float64(v))); d > 1e-6 {
			t.Fatalf("h[%d] = %g, want tanh(%g)", k, got[0][k], v)
		}
	}
}

// TestUnknownTensor: asking for a tensor the graph lacks names the nearest ones.
func TestUnknownTensor(t *testing.T) {
	m := parse(t, "mlp_tanh")
	for _, err := range []error{m.Check("logit"), func() error {
		_, err := m.Build(G.NewGraph(), m.NewParams(), 2, "value", "logit")
		return err
	}(), func() error {
		_, err := m.NewParamsFor(TrainOptions{Outputs: []string{"logit"}})
		return err
	}()} {
		if !errors.Is(err, ErrNoTensor) || !strings.Contains(err.Error(), `"logits"`) || !strings.Contains(err.Error(), `"logit"`) {
			t.Errorf("error %v, want ErrNoTensor naming \"logit\" and the nearby \"logits\"", err)
		}
	}
	gr, err := m.Build(G.NewGraph(), m.NewParams(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gr.Output("/actor/actor.0/Gemm_output_0"); !errors.Is(err, ErrNoTensor) || !strings.Contains(err.Error(), "name it in Build's outputs") {
		t.Errorf("Output of a tensor not built: %v", err)
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
		{"string input", mutate(func(mp *onnxpb.ModelProto) {
			mp.Graph.Input[0].Type.GetTensorType().ElemType = proto.Int32(int32(onnxpb.TensorProto_STRING))
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

	custom := mutate(func(mp *onnxpb.ModelProto) { mp.Graph.Node[3].Domain = proto.String("com.microsoft") })
	if mc, err := Parse(custom); err != nil {
		t.Errorf("a node of another domain: Parse error %v; only Check and Build refuse it", err)
	} else if err := mc.Check(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a node of another domain: Check error %v, want ErrUnsupported", err)
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

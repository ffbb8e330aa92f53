package layout

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// ExposedSuffix ends the name of the output Expose adds for an initializer (a log_std
// parameter): an Identity node copies it out, since an output cannot be an initializer itself.
const ExposedSuffix = ".towerrl_exposed"

// Expose returns a copy of m whose graph outputs include every tensor the binding names
// (Params, LogStd, Value, Actions) that is not an output yet, and the binding renamed to
// match. A node's output becomes a graph output under its own name; an initializer is copied
// out by an Identity node to NAME+ExposedSuffix. The original outputs keep their order, the
// added ones follow in the order Params, LogStd, Value, Actions. m is not modified.
func Expose(m *onnxpb.ModelProto, b Binding) (*onnxpb.ModelProto, Binding, error) {
	x, err := newIndex(m, nil)
	if err != nil {
		return nil, b, err
	}
	out := proto.Clone(m).(*onnxpb.ModelProto)
	g := out.GetGraph()
	added := map[string]string{}
	for _, p := range []*string{&b.Params, &b.LogStd, &b.Value, &b.Actions} {
		name := *p
		if name == "" {
			continue
		}
		if n, ok := added[name]; ok {
			*p = n
			continue
		}
		t := x.tensor(name)
		switch {
		case t == nil:
			return nil, b, fmt.Errorf("%w: the graph has no tensor %q to expose", ErrNotRecognised, name)
		case t.output:
			continue
		case t.input:
			return nil, b, fmt.Errorf("%w: %q is a graph input; only computed tensors and initializers can be bound", ErrNotRecognised, name)
		}
		exposed := name
		if t.init {
			exposed = name + ExposedSuffix
			if x.tensor(exposed) != nil {
				return nil, b, fmt.Errorf("%w: cannot expose %q: the graph already has a tensor %q", ErrModel, name, exposed)
			}
			g.Node = append(g.Node, &onnxpb.NodeProto{
				Name: proto.String("towerrl/expose/" + name), OpType: proto.String("Identity"),
				Input: []string{name}, Output: []string{exposed},
			})
		}
		g.Output = append(g.Output, valueInfo(exposed, t))
		added[name], *p = exposed, exposed
	}
	return out, b, nil
}

// valueInfo declares t as an output: its element type, and its shape when known (a
// dynamic dimension as the symbol "batch" when it is the first, else unnamed).
func valueInfo(name string, t *tensor) *onnxpb.ValueInfoProto {
	elem := map[head.DType]onnxpb.TensorProto_DataType{
		head.Float32: onnxpb.TensorProto_FLOAT, head.Float64: onnxpb.TensorProto_DOUBLE,
		head.Int32: onnxpb.TensorProto_INT32, head.Int64: onnxpb.TensorProto_INT64, head.Uint8: onnxpb.TensorProto_UINT8,
	}[t.dtype]
	if elem == 0 {
		elem = onnxpb.TensorProto_FLOAT
	}
	tt := &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(elem))}
	if t.known() && !slices.Contains(t.shape[min(1, len(t.shape)):], -1) {
		tt.Shape = &onnxpb.TensorShapeProto{}
		for i, d := range t.shape {
			dim := &onnxpb.TensorShapeProto_Dimension{}
			switch {
			case d >= 0:
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}
			case i == 0:
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
			}
			tt.Shape.Dim = append(tt.Shape.Dim, dim)
		}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}}}
}

package edit

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Expose returns the model with the named tensors appended to the graph's outputs, after the
// existing outputs (which keep their order). A name that already is a graph output is left as
// it is. Each new output takes its type from the graph's value_info when it has an entry, else
// the element type the propagation over the nodes gives it. A name the graph does not compute
// is an error wrapping [ErrNoTensor] that names the closest tensors; a tensor whose element
// type cannot be told is an error wrapping [ErrNoType].
func Expose(model []byte, names ...string) ([]byte, error) {
	m, err := parse(model)
	if err != nil {
		return nil, err
	}
	if err := expose(m, newIndex(m), names); err != nil {
		return nil, err
	}
	return marshal(m)
}

// expose appends names to m's outputs (m is modified).
func expose(m *onnxpb.ModelProto, ix *graphIndex, names []string) error {
	g := m.GetGraph()
	outputs := map[string]bool{}
	for _, vi := range g.GetOutput() {
		outputs[vi.GetName()] = true
	}
	infos := map[string]*onnxpb.ValueInfoProto{}
	for _, vi := range g.GetValueInfo() {
		if vi.GetType().GetTensorType().GetElemType() != tUnknown {
			infos[vi.GetName()] = vi
		}
	}
	var types map[string]int32
	for _, name := range names {
		if outputs[name] {
			continue
		}
		if ix.producer[name] == nil {
			return unknownTensor(ix, name)
		}
		vi := &onnxpb.ValueInfoProto{Name: proto.String(name)}
		if decl, ok := infos[name]; ok {
			vi.Type = proto.Clone(decl.GetType()).(*onnxpb.TypeProto)
		} else {
			if types == nil {
				types = inferTypes(ix)
			}
			t, ok := types[name]
			if !ok || t == tUnknown {
				p := ix.producer[name]
				return fmt.Errorf("%w: tensor %q (output of %s): the graph declares no value_info for it and its element type cannot be propagated through the nodes; expose a tensor downstream of it instead",
					ErrNoType, name, nodeRef(p))
			}
			vi.Type = &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(t)}}}
		}
		g.Output = append(g.Output, vi)
		outputs[name] = true
	}
	return nil
}

func unknownTensor(ix *graphIndex, name string) error {
	why := "the graph computes no tensor of that name"
	if _, ok := ix.inits[name]; ok {
		why = "it is an initializer (a weight), not a computed tensor"
	} else {
		for _, vi := range ix.inputs {
			if vi.GetName() == name {
				why = "it is a graph input, not a computed tensor"
			}
		}
	}
	if len(ix.computed) == 0 {
		return fmt.Errorf("%w: %q: %s, and the graph has no nodes", ErrNoTensor, name, why)
	}
	return fmt.Errorf("%w: %q: %s; the closest computed tensors are %s (Tensors lists them all)",
		ErrNoTensor, name, why, quoteAll(closest(name, ix.computed)))
}

// Tensors describes every tensor the graph computes that a Session can return (element types
// float32, float64, int32, int64, uint8; rank 1 or more): the graph's outputs first, then the
// inner tensors in node order, with shapes from running the model on a zero batch (see
// [onnx.Session.Outputs]: Batched says whether dimension 0 follows the batch). Tensors of
// other types or of rank 0, and those whose batch dimension is not dimension 0 (a recurrent
// layer's sequence output), are left out. For a fixed-batch model dimension 0 counts as batched
// when it equals the fixed batch. cfg.MaxBatch is not used.
func Tensors(ctx context.Context, model []byte, cfg onnx.Config) ([]onnx.TensorInfo, error) {
	m, err := parse(model)
	if err != nil {
		return nil, err
	}
	ix := newIndex(m)
	axes := map[string]int{}
	n := []int64{0} // fixed batch: run as declared
	if _, dynamic, err := fixedBatch(ix, nil); err == nil && dynamic {
		for _, vi := range ix.inputs {
			if d := dims(vi); len(d) > 0 && d[0] < 0 {
				axes[vi.GetName()] = 0
			}
		}
		n = []int64{1, 2}
	}
	var shapes []map[string][]int64
	for _, b := range n {
		s, err := observe(ctx, m, ix, axes, b, cfg)
		if err != nil {
			return nil, fmt.Errorf("edit: listing the model's tensors: %w", err)
		}
		shapes = append(shapes, s)
	}
	keep := func(name string) bool {
		a, ok := shapes[0][name]
		if !ok || len(a) == 0 {
			return false
		}
		if len(shapes) == 2 {
			b := shapes[1][name]
			same := slices.Equal(a, b)
			follows := len(a) == len(b) && a[0] == 1 && b[0] == 2 && slices.Equal(a[1:], b[1:])
			return same || follows
		}
		return true
	}
	types := inferTypes(ix)
	g := m.GetGraph()
	g.Output = slices.DeleteFunc(g.Output, func(vi *onnxpb.ValueInfoProto) bool {
		return sessionDType(types[vi.GetName()]) == onnx.Unsupported || !keep(vi.GetName())
	})
	var names []string
	for _, name := range ix.computed {
		if sessionDType(types[name]) != onnx.Unsupported && keep(name) {
			names = append(names, name)
		}
	}
	if err := expose(m, ix, names); err != nil {
		return nil, err
	}
	data, err := marshal(m)
	if err != nil {
		return nil, err
	}
	cfg.MaxBatch = 1 // the session only describes; buffers for one row of every tensor suffice
	s, err := onnx.New(ctx, data, cfg)
	if err != nil {
		return nil, fmt.Errorf("edit: listing the model's tensors: %w", err)
	}
	defer s.Close()
	return s.Outputs(), nil
}

// observe runs m with its batched inputs (axes) given n rows (n = 0: as declared) and returns
// the concrete shape of every tensor a node computes. It exposes each tensor's shape rather
// than the tensor, so tensors of any element type and rank are measured.
func observe(ctx context.Context, m *onnxpb.ModelProto, ix *graphIndex, axes map[string]int, n int64, cfg onnx.Config) (map[string][]int64, error) {
	sm := proto.Clone(m).(*onnxpb.ModelProto)
	six := newIndex(sm)
	g := sm.GetGraph()
	g.Output = nil
	one := six.fresh("edit/one")
	g.Node = append(g.Node, &onnxpb.NodeProto{
		Name: proto.String(six.fresh(one + "/Constant")), OpType: proto.String("Constant"), Output: []string{one},
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(),
			T: intTensor(one, tInt64, []int64{1}, []int64{1})}},
	})
	types := inferTypes(six)
	shapeOf := map[string]string{}
	for _, name := range six.computed {
		if p := six.producer[name]; types[name] == tUnknown && untypedOps[p.GetOpType()] {
			continue // a sequence or optional, maybe
		}
		sh, out := six.fresh(name+"/shape"), six.fresh(name+"/shape1")
		g.Node = append(g.Node,
			&onnxpb.NodeProto{Name: proto.String(six.fresh(sh + "/Shape")), OpType: proto.String("Shape"), Input: []string{name}, Output: []string{sh}},
			&onnxpb.NodeProto{Name: proto.String(six.fresh(out + "/Concat")), OpType: proto.String("Concat"), Input: []string{one, sh}, Output: []string{out},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}}})
		g.Output = append(g.Output, &onnxpb.ValueInfoProto{Name: proto.String(out),
			Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(tInt64)}}}})
		shapeOf[out] = name
	}
	if len(g.Output) == 0 {
		return map[string][]int64{}, nil
	}
	r, err := openRunner(ctx, sm, six, axes, n, cfg)
	if err != nil {
		return nil, err
	}
	defer r.close()
	feeds := map[string]*tensor{}
	for _, info := range r.inputs {
		feeds[info.Name] = zeroTensor(info.DType, r.shapes[info.Name])
	}
	res, err := r.run(feeds)
	if err != nil {
		return nil, err
	}
	shapes := make(map[string][]int64, len(res))
	for out, t := range res {
		if name, ok := shapeOf[out]; ok && len(t.i) > 0 {
			shapes[name] = t.i[1:]
		}
	}
	return shapes, nil
}

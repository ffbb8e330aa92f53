package edit

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// BatchFirstSuffix ends the names BatchFirst gives the graph inputs and outputs it makes
// batch-first.
const BatchFirstSuffix = ".towerrl_batch_first"

// OffAxisBatch finds the graph inputs whose batch is not on axis 0, as a recurrent state
// exported as torch lays it out ([layers, batch, hidden], SB3-contrib RecurrentPPO's
// [1, batch, 256]) declares it: dimension 0 a fixed number and exactly one other dimension
// dynamic, which a session would refuse (it batches on axis 0 only). When it finds any, the
// graph outputs declared the same way are taken as their counterparts. It returns the axis
// each is batched on, by name; nil when there are none.
func OffAxisBatch(m *onnx.Model) map[string]int {
	g := m.Proto().GetGraph()
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	axes := map[string]int{}
	for _, in := range g.GetInput() {
		if ax, ok := offAxis(in); ok && !inits[in.GetName()] {
			axes[in.GetName()] = ax
		}
	}
	if len(axes) == 0 {
		return nil
	}
	for _, out := range g.GetOutput() {
		if ax, ok := offAxis(out); ok {
			axes[out.GetName()] = ax
		}
	}
	return axes
}

// offAxis reports the one dynamic dimension of a tensor declared with a fixed dimension 0.
func offAxis(v *onnxpb.ValueInfoProto) (int, bool) {
	dims := v.GetType().GetTensorType().GetShape().GetDim()
	if len(dims) < 2 || dims[0].GetDimValue() < 1 {
		return 0, false
	}
	axis := -1
	for k, d := range dims[1:] {
		if d.GetDimValue() < 1 {
			if axis >= 0 {
				return 0, false
			}
			axis = k + 1
		}
	}
	return axis, axis > 0
}

// BatchFirst rewrites m so that each graph input and output named in axes, whose batch is on
// axis axes[name], is fed and returned with its batch on axis 0: the input NAME becomes
// NAME+BatchFirstSuffix, transposed back to NAME by a new first node, and the output OUT is
// replaced by OUT+BatchFirstSuffix, its transpose. The graph computes the same; only its edge
// changes. It returns the new model and the new name of each tensor in axes. m is not
// modified.
func BatchFirst(m *onnx.Model, axes map[string]int) (*onnx.Model, map[string]string, error) {
	out := proto.Clone(m.Proto()).(*onnxpb.ModelProto)
	g := out.GetGraph()
	renamed := map[string]string{}
	var head []*onnxpb.NodeProto
	for _, name := range slices.Sorted(maps.Keys(axes)) {
		ax := axes[name]
		in, isIn := find(g.GetInput(), name), true
		v := in
		if v == nil {
			v, isIn = find(g.GetOutput(), name), false
		}
		if v == nil {
			return nil, nil, fmt.Errorf("edit: BatchFirst names %q, which is not a graph input or output", name)
		}
		rank := len(v.GetType().GetTensorType().GetShape().GetDim())
		if ax < 0 || ax >= rank {
			return nil, nil, fmt.Errorf("edit: BatchFirst puts %q's batch on axis %d of %d", name, ax, rank)
		}
		if ax == 0 {
			continue
		}
		order := []int64{int64(ax)} // the original axes in batch-first order
		for a := range rank {
			if a != ax {
				order = append(order, int64(a))
			}
		}
		inverse := make([]int64, rank)
		for j, a := range order {
			inverse[a] = int64(j)
		}
		first := name + BatchFirstSuffix
		sh := v.GetType().GetTensorType().GetShape()
		dims := sh.Dim
		sh.Dim = make([]*onnxpb.TensorShapeProto_Dimension, rank)
		for j, a := range order {
			sh.Dim[j] = dims[a]
		}
		v.Name = proto.String(first)
		if isIn {
			head = append(head, transposeNode("towerrl/batch_first/"+name, first, name, inverse))
		} else {
			g.Node = append(g.Node, transposeNode("towerrl/batch_first/"+name, name, first, order))
		}
		renamed[name] = first
	}
	g.Node = append(head, g.Node...)
	data, err := marshal(out)
	if err != nil {
		return nil, nil, err
	}
	edited, err := onnx.Parse(data)
	if err != nil {
		return nil, nil, err
	}
	return edited, renamed, nil
}

func find(list []*onnxpb.ValueInfoProto, name string) *onnxpb.ValueInfoProto {
	for _, v := range list {
		if v.GetName() == name {
			return v
		}
	}
	return nil
}

func transposeNode(name, in, out string, perm []int64) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{
		Name: proto.String(name), OpType: proto.String("Transpose"), Input: []string{in}, Output: []string{out},
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("perm"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: perm}},
	}
}

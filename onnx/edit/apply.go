package edit

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// DimParam is the symbolic name DynamicBatch gives the batch dimension it frees.
const DimParam = "batch"

// apply returns a copy of m with the plan's edits made, and one line per edit.
func apply(m *onnxpb.ModelProto, p *plan) (*onnxpb.ModelProto, []string) {
	out := proto.Clone(m).(*onnxpb.ModelProto)
	g := out.GetGraph()
	ix := newIndex(out)
	// The plan points at m's nodes; out's are at the same positions.
	at := map[*onnxpb.NodeProto]*onnxpb.NodeProto{}
	for k, n := range m.GetGraph().GetNode() {
		at[n] = g.GetNode()[k]
	}
	var notes []string
	for _, vi := range g.GetInput() {
		if ax, ok := p.inputs[vi.GetName()]; ok {
			if was, ok := setBatchDim(vi, ax); ok {
				notes = append(notes, fmt.Sprintf("input %q: dimension %d (%d) → %s", vi.GetName(), ax, was, DimParam))
			}
		}
	}
	for _, vi := range g.GetOutput() {
		if p.ranks {
			if tt := vi.GetType().GetTensorType(); tt != nil {
				tt.Shape = nil
			}
			continue
		}
		if ax, ok := p.axes[vi.GetName()]; ok && ax != none {
			if was, ok := setBatchDim(vi, ax); ok {
				notes = append(notes, fmt.Sprintf("output %q: dimension %d (%d) → %s", vi.GetName(), ax, was, DimParam))
			}
		}
	}
	cleared := 0
	for _, vi := range g.GetValueInfo() {
		tt := vi.GetType().GetTensorType()
		if tt.GetShape() == nil {
			continue
		}
		ax, ok := p.axes[vi.GetName()]
		switch {
		case p.ranks:
			tt.Shape = nil
			cleared++
		case ok && ax == none:
		case ok && ax < len(tt.GetShape().GetDim()):
			setBatchDim(vi, ax)
			cleared++
		default:
			tt.Shape = nil
			cleared++
		}
	}
	if p.ranks {
		notes = append(notes, fmt.Sprintf("outputs and value_info: shapes removed (ranks change), element types kept"))
	} else if cleared > 0 {
		notes = append(notes, fmt.Sprintf("value_info: the batch dimension of %d entries → %s", cleared, DimParam))
	}

	before := map[*onnxpb.NodeProto][]*onnxpb.NodeProto{} // nodes to insert before a node
	insert := func(n *onnxpb.NodeProto, nodes ...*onnxpb.NodeProto) { before[n] = append(before[n], nodes...) }
	constant := func(base string, dt int32, vals []int64) (*onnxpb.NodeProto, string) {
		name := ix.fresh(base)
		t := intTensor(name, dt, []int64{int64(len(vals))}, vals)
		return &onnxpb.NodeProto{
			Name: proto.String(ix.fresh(name + "/Constant")), OpType: proto.String("Constant"), Output: []string{name},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}},
		}, name
	}
	for _, e := range p.edits {
		n := at[e.node]
		src := input(n, e.input)
		if e.input < len(n.GetInput()) && ix.uses[src] == 1 && editInPlace(ix, src, e.dtype, e.vals) {
			notes = append(notes, e.note)
			continue
		}
		base := src
		if base == "" {
			base = nodeName(n) + "_input"
		}
		c, name := constant(base+"_dynbatch", e.dtype, e.vals)
		insert(n, c)
		if e.input < len(n.GetInput()) {
			n.Input[e.input] = name
		} else {
			for len(n.Input) < e.input {
				n.Input = append(n.Input, "")
			}
			n.Input = append(n.Input, name)
		}
		notes = append(notes, e.note)
	}
	for _, e := range p.attrs {
		n := at[e.node]
		if a := attr(n, e.name); a != nil {
			a.Ints = slices.Clone(e.ints)
		} else {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String(e.name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: slices.Clone(e.ints)})
		}
		notes = append(notes, e.note)
	}

	// Tensors that must follow the batch: gather their first row, expand it to the batch.
	var head []*onnxpb.NodeProto
	batchSize := ""
	for _, f := range p.fixes {
		n := at[f.node]
		cur := input(n, f.input)
		var chain []*onnxpb.NodeProto
		if f.gather {
			c, zero := constant("dynbatch/row0", tInt64, []int64{0})
			row := ix.fresh(cur + "_row0")
			chain = append(chain, c, &onnxpb.NodeProto{
				Name: proto.String(ix.fresh(row + "/Gather")), OpType: proto.String("Gather"),
				Input: []string{cur, zero}, Output: []string{row},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(f.axis))}},
			})
			cur = row
		}
		if f.expand {
			if batchSize == "" {
				head, batchSize = batchSizeNodes(ix, p)
			}
			parts := []string{}
			if f.axis > 0 {
				c, ones := constant("dynbatch/ones", tInt64, slices.Repeat([]int64{1}, f.axis))
				chain, parts = append(chain, c), append(parts, ones)
			}
			parts = append(parts, batchSize)
			if rest := f.rank - f.axis - 1; rest > 0 {
				c, ones := constant("dynbatch/ones", tInt64, slices.Repeat([]int64{1}, rest))
				chain, parts = append(chain, c), append(parts, ones)
			}
			shape := ix.fresh(input(n, f.input) + "_batch_shape")
			expanded := ix.fresh(input(n, f.input) + "_batch")
			chain = append(chain,
				&onnxpb.NodeProto{
					Name: proto.String(ix.fresh(shape + "/Concat")), OpType: proto.String("Concat"), Input: parts, Output: []string{shape},
					Attribute: []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}},
				},
				&onnxpb.NodeProto{
					Name: proto.String(ix.fresh(expanded + "/Expand")), OpType: proto.String("Expand"),
					Input: []string{cur, shape}, Output: []string{expanded},
				})
			cur = expanded
		}
		what := "its first row kept"
		if f.expand {
			what = "repeated to the batch at run time"
			if f.gather {
				what = "its first row repeated to the batch at run time"
			}
		}
		notes = append(notes, fmt.Sprintf("%s: input %q (the same for every row, batch on axis %d) %s", nodeRef(n), input(n, f.input), f.axis, what))
		n.Input[f.input] = cur
		insert(n, chain...)
	}
	if len(before) > 0 || len(head) > 0 {
		nodes := slices.Clone(head)
		for _, n := range g.GetNode() {
			nodes = append(nodes, before[n]...)
			nodes = append(nodes, n)
		}
		g.Node = nodes
	}
	return out, notes
}

// setBatchDim makes dimension ax of vi's shape the symbolic batch and returns what it was.
func setBatchDim(vi *onnxpb.ValueInfoProto, ax int) (int64, bool) {
	sh := vi.GetType().GetTensorType().GetShape()
	if sh == nil || ax < 0 || ax >= len(sh.GetDim()) {
		return 0, false
	}
	d := sh.Dim[ax]
	was := d.GetDimValue()
	if _, fixed := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); !fixed {
		return 0, false
	}
	d.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: DimParam}
	return was, true
}

// editInPlace rewrites the integer constant src (an initializer or a Constant node's value,
// used once) to vals, and reports whether it could.
func editInPlace(ix *graphIndex, src string, dt int32, vals []int64) bool {
	for _, vi := range ix.g.GetInput() {
		if vi.GetName() == src {
			return false // an overridable initializer
		}
	}
	for _, vi := range ix.g.GetOutput() {
		if vi.GetName() == src {
			return false
		}
	}
	var t *onnxpb.TensorProto
	if init := ix.inits[src]; init != nil {
		t = init
	} else if p := ix.producer[src]; p != nil && p.GetOpType() == "Constant" {
		if a := attr(p, "value"); a != nil {
			t = a.GetT()
		}
	}
	if t == nil || t.GetDataType() != dt || len(t.GetDims()) > 1 {
		return false
	}
	nt := intTensor(t.GetName(), dt, []int64{int64(len(vals))}, vals)
	t.Dims, t.RawData, t.Int64Data, t.Int32Data = nt.Dims, nt.RawData, nil, nil
	return true
}

// batchSizeNodes computes the run-time batch size as a 1-D int64 tensor of one element, from
// the first batched graph input, and returns the nodes and the tensor's name.
func batchSizeNodes(ix *graphIndex, p *plan) ([]*onnxpb.NodeProto, string) {
	var src string
	var axis int
	for _, vi := range ix.inputs {
		if ax, ok := p.inputs[vi.GetName()]; ok {
			src, axis = vi.GetName(), ax
			break
		}
	}
	shape := ix.fresh("dynbatch/input_shape")
	idxName := ix.fresh("dynbatch/batch_axis")
	size := ix.fresh("dynbatch/batch_size")
	idx := intTensor(idxName, tInt64, []int64{1}, []int64{int64(axis)})
	return []*onnxpb.NodeProto{
		{Name: proto.String(ix.fresh(shape + "/Shape")), OpType: proto.String("Shape"), Input: []string{src}, Output: []string{shape}},
		{Name: proto.String(ix.fresh(idxName + "/Constant")), OpType: proto.String("Constant"), Output: []string{idxName},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: idx}}},
		{Name: proto.String(ix.fresh(size + "/Gather")), OpType: proto.String("Gather"), Input: []string{shape, idxName}, Output: []string{size},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)}}},
	}, size
}

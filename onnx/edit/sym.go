package edit

import (
	"slices"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Shape arithmetic: the values of small integer tensors (shapes, axes, indices) followed
// through the graph, each element a constant or the batch size (dyn).

// symOf computes the values of n's first output when they follow from its inputs' (shape
// arithmetic); nil when they do not.
func (a *analysis) symOf(n *onnxpb.NodeProto, ins []*tinfo) []sval {
	sym := func(k int) []sval {
		if k < len(ins) && ins[k] != nil {
			return ins[k].sym
		}
		return nil
	}
	switch op := n.GetOpType(); op {
	case "Constant":
		if t := constValue(n); t != nil && isIntType(t.GetDataType()) {
			if v, ok := intsOf(t); ok {
				return constSym(v)
			}
		}
	case "Identity", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten":
		return sym(0)
	case "Shape":
		x := in(ins, 0)
		if x == nil || !x.known {
			return nil
		}
		s := make([]sval, len(x.shape))
		for k, d := range x.shape {
			s[k] = sval{v: d, dyn: k == x.axis}
		}
		r := int64(len(s))
		lo, hi := attrInt(n, "start", 0), attrInt(n, "end", r)
		lo, hi = clampIndex(lo, r), clampIndex(hi, r)
		if lo >= hi {
			return []sval{}
		}
		return s[lo:hi]
	case "Size":
		if x := in(ins, 0); x != nil && x.known {
			return []sval{{v: prod(x.shape), dyn: x.axis != none}}
		}
	case "ConstantOfShape":
		shape, ok := in(ins, 0).consts()
		if !ok || prod(shape) > maxConstElems || prod(shape) < 0 {
			return nil
		}
		val := int64(0)
		if at := attr(n, "value"); at != nil {
			if !isIntType(at.GetT().GetDataType()) {
				return nil
			}
			v, ok := intsOf(at.GetT())
			if !ok || len(v) != 1 {
				return nil
			}
			val = v[0]
		}
		out := make([]sval, prod(shape))
		for k := range out {
			out[k] = sval{v: val}
		}
		return out
	case "Neg", "Not":
		s := sym(0)
		if s == nil {
			return nil
		}
		out := make([]sval, len(s))
		for k, v := range s {
			out[k] = sval{v: -v.v, dyn: v.dyn}
			if op == "Not" {
				out[k].v = 1 - v.v
			}
		}
		return out
	case "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual":
		return zipSym(sym(0), sym(1), func(x, y int64) (int64, bool) { return arith(op, x, y) })
	case "Where":
		c, x, y := sym(0), sym(1), sym(2)
		if c == nil || x == nil || y == nil {
			return nil
		}
		n := max(len(c), len(x), len(y))
		for _, s := range [][]sval{c, x, y} {
			if len(s) != n && len(s) != 1 {
				return nil
			}
		}
		at := func(s []sval, k int) sval { return s[min(k, len(s)-1)] }
		out := make([]sval, n)
		for k := range out {
			switch cv := at(c, k); {
			case cv.dyn:
				out[k] = sval{dyn: true}
			case cv.v != 0:
				out[k] = at(x, k)
			default:
				out[k] = at(y, k)
			}
		}
		return out
	case "Concat":
		var out []sval
		for k := range ins {
			s := sym(k)
			if s == nil {
				return nil
			}
			out = append(out, s...)
		}
		return out
	case "Gather":
		data, idx := sym(0), sym(1)
		if data == nil || idx == nil || in(ins, 0).rank() > 1 {
			return nil
		}
		out := make([]sval, len(idx))
		for k, i := range idx {
			if i.dyn {
				return nil
			}
			j := i.v
			if j < 0 {
				j += int64(len(data))
			}
			if j < 0 || j >= int64(len(data)) {
				return nil
			}
			out[k] = data[j]
		}
		return out
	case "Slice":
		return a.sliceSym(n, ins)
	case "ReduceProd", "ReduceSum":
		s := sym(0)
		if s == nil || in(ins, 0).rank() > 1 {
			return nil
		}
		acc := sval{v: 1}
		if op == "ReduceSum" {
			acc.v = 0
		}
		for _, v := range s {
			acc.dyn = acc.dyn || v.dyn
			if op == "ReduceSum" {
				acc.v += v.v
			} else {
				acc.v *= v.v
			}
		}
		return []sval{acc}
	}
	return nil
}

func (a *analysis) sliceSym(n *onnxpb.NodeProto, ins []*tinfo) []sval {
	x := in(ins, 0)
	if x == nil || x.sym == nil || x.rank() > 1 {
		return nil
	}
	data := x.sym
	sp := a.sliceParams(n, ins)
	if !sp.known || !sp.axesKnown {
		return nil
	}
	starts, ends, axes, steps := sp.starts, sp.ends, sp.axes, sp.steps
	if len(starts) != 1 || len(ends) != 1 || (len(axes) == 1 && axes[0] != 0 && axes[0] != -1) {
		return nil
	}
	step := int64(1)
	if len(steps) == 1 {
		step = steps[0]
	}
	if step != 1 {
		return nil
	}
	r := int64(len(data))
	lo, hi := clampIndex(starts[0], r), clampIndex(ends[0], r)
	if lo >= hi {
		return []sval{}
	}
	return slices.Clone(data[lo:hi])
}

// sliceParams are a Slice's starts, ends, axes and steps: attributes before opset 10, inputs
// after. known is false when the starts, ends or steps are computed at run time, axesKnown when
// the axes are.
type sliceParams struct {
	starts, ends, axes, steps []int64
	known, axesKnown          bool
}

func (a *analysis) sliceParams(n *onnxpb.NodeProto, ins []*tinfo) sliceParams {
	if a.ix.opset < 10 {
		return sliceParams{starts: attr(n, "starts").GetInts(), ends: attr(n, "ends").GetInts(),
			axes: attr(n, "axes").GetInts(), known: true, axesKnown: true}
	}
	var sp sliceParams
	var ok1, ok2, ok4 bool
	sp.starts, ok1 = optConsts(ins, 1)
	sp.ends, ok2 = optConsts(ins, 2)
	sp.axes, sp.axesKnown = optConsts(ins, 3)
	sp.steps, ok4 = optConsts(ins, 4)
	sp.known = ok1 && ok2 && ok4
	return sp
}

// optConsts returns the constant values of optional input k (nil, true when absent).
func optConsts(ins []*tinfo, k int) ([]int64, bool) {
	t := in(ins, k)
	if t == nil {
		return nil, true
	}
	return t.consts()
}

func clampIndex(i, r int64) int64 {
	if i < 0 {
		i += r
	}
	return min(max(i, 0), r)
}

// zipSym applies f element by element, a length-1 operand broadcasting.
func zipSym(x, y []sval, f func(a, b int64) (int64, bool)) []sval {
	if x == nil || y == nil || (len(x) != len(y) && len(x) != 1 && len(y) != 1) {
		return nil
	}
	out := make([]sval, max(len(x), len(y)))
	for k := range out {
		p, q := x[min(k, len(x)-1)], y[min(k, len(y)-1)]
		if p.dyn || q.dyn {
			out[k] = sval{dyn: true}
			continue
		}
		v, ok := f(p.v, q.v)
		if !ok {
			return nil
		}
		out[k] = sval{v: v}
	}
	return out
}

func arith(op string, x, y int64) (int64, bool) {
	b := func(c bool) (int64, bool) {
		if c {
			return 1, true
		}
		return 0, true
	}
	switch op {
	case "Add":
		return x + y, true
	case "Sub":
		return x - y, true
	case "Mul":
		return x * y, true
	case "Div":
		if y == 0 {
			return 0, false
		}
		return x / y, true
	case "Mod":
		if y == 0 {
			return 0, false
		}
		return x % y, true
	case "Max":
		return max(x, y), true
	case "Min":
		return min(x, y), true
	case "Equal":
		return b(x == y)
	case "Less":
		return b(x < y)
	case "Greater":
		return b(x > y)
	case "LessOrEqual":
		return b(x <= y)
	case "GreaterOrEqual":
		return b(x >= y)
	}
	return 0, false
}

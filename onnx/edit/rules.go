package edit

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// The batch rules of the operators: each sets its outputs' batch axes from its inputs' and
// records the edits that free the batch, or refuses saying why the batch cannot be freed.

// broadcast handles numpy-broadcasting operators.
func (a *analysis) broadcast(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	r := 0
	allKnown := true
	for _, t := range ins {
		if t == nil {
			continue
		}
		if !t.known {
			allKnown = false
			continue
		}
		r = max(r, len(t.shape))
	}
	if allKnown {
		shape, ok := broadcastShapes(ins)
		if ok {
			for _, t := range outs {
				t.shape, t.known = shape, true
			}
		}
	}
	axis := none
	for _, t := range ins {
		if t == nil || t.axis == none {
			continue
		}
		if !t.known {
			return a.refuse(n, "the rank of a batched input is unknown")
		}
		pa := t.axis + r - len(t.shape)
		if axis != none && pa != axis {
			return a.refuse(n, "its inputs carry the batch on different axes")
		}
		axis = pa
	}
	if axis == none {
		return nil
	}
	if a.batch > 1 {
		// A constant with the fixed batch's size on the batch axis cannot broadcast to
		// another batch: keep its first row (verification checks the rows were equal).
		for k, t := range ins {
			if t == nil || t.axis != none || !t.known {
				continue
			}
			q := axis - (r - len(t.shape))
			if q >= 0 && t.shape[q] == a.batch {
				a.p.fixes = append(a.p.fixes, fix{node: n, input: k, axis: q, rank: len(t.shape), gather: true})
			}
		}
	}
	allAxes(outs, axis)
	return nil
}

func broadcastShapes(ins []*tinfo) ([]int64, bool) {
	r := 0
	for _, t := range ins {
		if t != nil {
			r = max(r, len(t.shape))
		}
	}
	out := make([]int64, r)
	for k := range out {
		out[k] = 1
	}
	for _, t := range ins {
		if t == nil {
			continue
		}
		off := r - len(t.shape)
		for k, d := range t.shape {
			switch {
			case d == 1:
			case out[off+k] == 1:
				out[off+k] = d
			case out[off+k] != d:
				return nil, false
			}
		}
	}
	return out, true
}

// reduce handles Reduce* and ArgMax/ArgMin.
func (a *analysis) reduce(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x := ins[0]
	if x.axis == none {
		return a.refuse(n, "an input other than the data carries the batch")
	}
	var axes []int64
	switch op := n.GetOpType(); {
	case op == "ArgMax" || op == "ArgMin":
		axes = []int64{attrInt(n, "axis", 0)}
	case attr(n, "axes") != nil:
		axes = attr(n, "axes").GetInts()
	case in(ins, 1) != nil:
		v, ok := ins[1].consts()
		if !ok {
			return a.refuse(n, "its axes are computed at run time")
		}
		axes = v
	}
	if len(axes) == 0 {
		if attrInt(n, "noop_with_empty_axes", 0) == 1 {
			allAxes(outs, x.axis)
			return nil
		}
		return a.refuse(n, "reduces over every axis, the batch included")
	}
	if a.hasAxis(axes, x) {
		return a.refuse(n, "reduces over the batch axis %d", x.axis)
	}
	out := x.axis
	if attrInt(n, "keepdims", 1) == 0 {
		for _, ax := range axes {
			if v, ok := normAxis(ax, x.rank()); ok && v < x.axis {
				out--
			}
		}
	}
	allAxes(outs, out)
	return nil
}

// sameRows makes the first count inputs of n carry the batch on axis: one that is a constant
// with the fixed batch there (a row shared by all rows of the batch) is expanded to the batch.
func (a *analysis) sameRows(n *onnxpb.NodeProto, ins []*tinfo, count, axis int) error {
	for k := range min(count, len(ins)) {
		if err := a.sameRow(n, ins, k, axis); err != nil {
			return err
		}
	}
	return nil
}

// sameRow is sameRows for input k alone.
func (a *analysis) sameRow(n *onnxpb.NodeProto, ins []*tinfo, k, axis int) error {
	t := in(ins, k)
	if t == nil || t.axis == axis {
		return nil
	}
	if t.axis != none {
		return a.refuse(n, "input %d carries the batch on axis %d, needs it on %d", k, t.axis, axis)
	}
	if !t.known || axis >= len(t.shape) || t.shape[axis] != a.batch {
		return a.refuse(n, "input %d (shape %v) cannot be given the batch on axis %d", k, t.shape, axis)
	}
	a.p.fixes = append(a.p.fixes, fix{node: n, input: k, axis: axis, rank: len(t.shape), gather: a.batch > 1, expand: true})
	return nil
}

func (a *analysis) gemm(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	out := none
	if A := ins[0]; A != nil && A.axis != none {
		if A.axis != int(attrInt(n, "transA", 0)) {
			return a.refuse(n, "contracts over the batch of A")
		}
		out = 0
	}
	if B := in(ins, 1); B != nil && B.axis != none {
		if out != none || B.axis == int(attrInt(n, "transB", 0)) {
			return a.refuse(n, "contracts over the batch of B")
		}
		out = 1
	}
	if C := in(ins, 2); C != nil {
		switch {
		case C.axis != none:
			if out == none || C.axis+2-C.rank() != out {
				return a.refuse(n, "its bias C carries the batch")
			}
		case out != none && a.batch > 1 && C.known:
			if q := out - (2 - len(C.shape)); q >= 0 && C.shape[q] == a.batch {
				a.p.fixes = append(a.p.fixes, fix{node: n, input: 2, axis: q, rank: len(C.shape), gather: true})
			}
		}
	}
	if out == none {
		return a.refuse(n, "only its bias C carries the batch")
	}
	allAxes(outs, out)
	return nil
}

func (a *analysis) matmul(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	ia, ib := 0, 1
	if n.GetOpType() == "QLinearMatMul" {
		ib = 3
	}
	A, B := in(ins, ia), in(ins, ib)
	if A == nil || B == nil {
		return a.refuse(n, "missing operands")
	}
	ra, rb := A.rank(), B.rank()
	if ra < 1 || rb < 1 {
		return a.refuse(n, "operand ranks unknown")
	}
	r := max(ra, rb)
	out := none
	if A.axis != none {
		switch {
		case ra == 1 || A.axis == ra-1:
			return a.refuse(n, "contracts over the batch")
		case A.axis == ra-2:
			out = r - 2
			if rb == 1 {
				out = ra - 2
			}
		default:
			out = A.axis + r - ra
		}
	}
	if B.axis != none {
		o := none
		switch {
		case rb == 1 || B.axis == rb-2:
			return a.refuse(n, "contracts over the batch")
		case B.axis == rb-1:
			o = r - 1
			if ra == 1 {
				o = rb - 2
			}
		default:
			o = B.axis + r - rb
		}
		if out != none && o != out {
			return a.refuse(n, "both operands carry the batch on different axes")
		}
		out = o
	}
	if out == none {
		return a.refuse(n, "an input other than its operands carries the batch")
	}
	allAxes(outs, out)
	return nil
}

// einsum follows the batch's label through the equation.
func (a *analysis) einsum(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	eq := strings.ReplaceAll(string(attr(n, "equation").GetS()), " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(ins) || strings.Contains(eq, "...") {
		return a.lenient(n, ins, outs)
	}
	label := rune(0)
	for k, t := range ins {
		if t == nil || t.axis == none {
			continue
		}
		rs := []rune(terms[k])
		if t.axis >= len(rs) {
			return a.refuse(n, "equation %q does not match its inputs", eq)
		}
		if label != 0 && rs[t.axis] != label {
			return a.refuse(n, "operands carry the batch under different labels")
		}
		label = rs[t.axis]
	}
	if !explicit {
		count := map[rune]int{}
		for _, c := range lhs {
			count[c]++
		}
		var labels []rune
		for c, k := range count {
			if k == 1 && c != ',' {
				labels = append(labels, c)
			}
		}
		slices.Sort(labels)
		rhs = string(labels)
	}
	idx := slices.Index([]rune(rhs), label)
	if idx < 0 {
		return a.refuse(n, "sums over the batch (label %q)", label)
	}
	allAxes(outs, idx)
	return nil
}

// reshape finds the dimension of the output that carries the batch and makes the target say so
// (-1, or 0 to copy the input's batch dimension).
func (a *analysis) reshape(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x, tgt := ins[0], in(ins, 1)
	if x.axis == none {
		return a.refuse(n, "its target shape carries the batch while its data does not")
	}
	if len(outs) == 0 {
		return a.refuse(n, "no output")
	}
	sout, ok := a.observed[n.GetOutput()[0]]
	if !x.known || !ok {
		return a.refuse(n, "shapes unknown")
	}
	if tgt == nil || tgt.sym == nil || len(tgt.sym) != len(sout) {
		return a.refuse(n, "its target shape is computed at run time in a way the analysis does not follow")
	}
	allowZero := attrInt(n, "allowzero", 0) == 1
	sin := x.shape
	before := prod(sin[:x.axis])
	after := prod(sin[x.axis+1:])
	var free, edit []int // candidates whose entry needs no change, and those that do
	for p := range sout {
		if sout[p] != a.batch || prod(sout[:p]) != before || prod(sout[p+1:]) != after {
			continue
		}
		e := tgt.sym[p]
		switch {
		case e.dyn, e.v == -1:
			free = append(free, p)
		case e.v == 0 && !allowZero:
			if p == x.axis {
				free = append(free, p)
			}
		default:
			edit = append(edit, p)
		}
	}
	for k, e := range tgt.sym {
		if !e.dyn && e.v == 0 && !allowZero && k == x.axis {
			// A 0 copying the input's batch dimension pins the output's batch there.
			free = slices.DeleteFunc(free, func(p int) bool { return p != k })
			edit = nil
		}
	}
	cands := append(free, edit...)
	if len(cands) == 0 {
		return a.refuse(n, "folds the batch into other dimensions (%v → %v)", sin, sout)
	}
	p := cands[a.pick(len(cands))]
	allAxes(outs, p)
	if slices.Contains(free, p) {
		return nil
	}
	vals, ok := tgt.consts()
	if !ok {
		return a.refuse(n, "its target shape mixes run-time and fixed sizes")
	}
	was := slices.Clone(vals)
	switch q := slices.Index(vals, -1); {
	case q < 0:
		vals[p] = -1
	case p == x.axis && !allowZero:
		vals[p] = 0
	default:
		vals[q], vals[p] = sout[q], -1
	}
	a.p.edits = append(a.p.edits, inputEdit{node: n, input: 1, dtype: tInt64, vals: vals,
		note: fmt.Sprintf("%s: target shape %v → %v", nodeRef(n), was, vals)})
	return nil
}

func prod(s []int64) int64 {
	p := int64(1)
	for _, d := range s {
		p *= d
	}
	return p
}

func (a *analysis) flatten(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x := ins[0]
	r := x.rank()
	if r < 0 {
		return a.refuse(n, "rank unknown")
	}
	k := int(attrInt(n, "axis", 1))
	if k < 0 {
		k += r
	}
	lo, hi, out := 0, k, 0
	if x.axis >= k {
		lo, hi, out = k, r, 1
	}
	for i := lo; i < hi && i < r; i++ {
		if i != x.axis && x.shape[i] != 1 {
			return a.refuse(n, "folds the batch into other dimensions (axis %d of %v)", k, x.shape)
		}
	}
	allAxes(outs, out)
	return nil
}

// axesOf reads a node's axes from its attribute (before opset 13) or from input k.
func (a *analysis) axesOf(n *onnxpb.NodeProto, ins []*tinfo, k int) ([]int64, bool, error) {
	if at := attr(n, "axes"); at != nil {
		return at.GetInts(), true, nil
	}
	if k < len(ins) && ins[k] != nil {
		v, ok := ins[k].consts()
		if !ok {
			return nil, false, a.refuse(n, "its axes are computed at run time")
		}
		return v, true, nil
	}
	return nil, false, nil
}

func (a *analysis) squeeze(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x := ins[0]
	axes, given, err := a.axesOf(n, ins, 1)
	if err != nil {
		return err
	}
	if !given {
		if !x.known {
			return a.refuse(n, "squeezes every dimension of 1 of a tensor of unknown shape")
		}
		for k, d := range x.shape {
			if d == 1 && k != x.axis {
				axes = append(axes, int64(k))
			}
		}
		if x.shape[x.axis] == 1 {
			if len(axes) == 0 {
				return a.refuse(n, "squeezes the batch away")
			}
			for _, t := range outs {
				t.squeezed = true
			}
			note := fmt.Sprintf("%s: squeezes axes %v, not the batch axis %d (tensors after it keep the batch dimension)", nodeRef(n), axes, x.axis)
			a.p.ranks = true
			if a.ix.opset < 13 {
				a.p.attrs = append(a.p.attrs, attrEdit{node: n, name: "axes", ints: axes, note: note})
			} else {
				a.p.edits = append(a.p.edits, inputEdit{node: n, input: 1, dtype: tInt64, vals: axes, note: note})
			}
		}
	}
	if a.hasAxis(axes, x) {
		return a.refuse(n, "squeezes the batch away")
	}
	out := x.axis
	for _, ax := range axes {
		if v, ok := normAxis(ax, x.rank()); ok && v < x.axis {
			out--
		}
	}
	allAxes(outs, out)
	return nil
}

func (a *analysis) unsqueeze(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x := ins[0]
	axes, given, err := a.axesOf(n, ins, 1)
	if err != nil {
		return err
	}
	if !given || x.rank() < 0 {
		return a.refuse(n, "its axes or its input's rank are unknown")
	}
	ro := x.rank() + len(axes)
	inserted := make([]bool, ro)
	for _, ax := range axes {
		v, ok := normAxis(ax, ro)
		if !ok {
			return a.refuse(n, "axis %d out of range", ax)
		}
		inserted[v] = true
	}
	j := 0
	for k := range inserted {
		if inserted[k] {
			continue
		}
		if j == x.axis {
			allAxes(outs, k)
			return nil
		}
		j++
	}
	return a.refuse(n, "axes %v do not fit its input", axes)
}

func (a *analysis) expand(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x, shape := ins[0], in(ins, 1)
	if x.axis == none {
		return a.unbatched(n, ins, outs)
	}
	if shape == nil || shape.sym == nil || !x.known {
		return a.refuse(n, "its shape is computed at run time in a way the analysis does not follow")
	}
	r := len(shape.sym)
	ro := max(r, x.rank())
	pa := x.axis + ro - x.rank()
	allAxes(outs, pa)
	q := pa - (ro - r)
	if q < 0 {
		return nil
	}
	switch e := shape.sym[q]; {
	case e.dyn || e.v == 1:
		return nil
	case e.v == a.batch:
		vals, ok := shape.consts()
		if !ok {
			return a.refuse(n, "its shape mixes run-time and fixed sizes")
		}
		was := slices.Clone(vals)
		vals[q] = 1
		a.p.edits = append(a.p.edits, inputEdit{node: n, input: 1, dtype: tInt64, vals: vals,
			note: fmt.Sprintf("%s: shape %v → %v", nodeRef(n), was, vals)})
		return nil
	default:
		return a.refuse(n, "expands the batch to %d", e.v)
	}
}

func (a *analysis) concat(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	axis, r := none, -1
	for _, t := range ins {
		if t == nil || t.axis == none {
			continue
		}
		if axis != none && t.axis != axis {
			return a.refuse(n, "its inputs carry the batch on different axes")
		}
		axis, r = t.axis, t.rank()
	}
	cat, ok := normAxis(attrInt(n, "axis", 0), r)
	if !ok {
		return a.refuse(n, "axis out of range")
	}
	if cat == axis {
		return a.refuse(n, "concatenates along the batch")
	}
	if err := a.sameRows(n, ins, len(ins), axis); err != nil {
		return err
	}
	allAxes(outs, axis)
	return nil
}

func (a *analysis) slice(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x := ins[0]
	if x.axis == none {
		return a.refuse(n, "its bounds carry the batch")
	}
	allAxes(outs, x.axis)
	fromAttrs := a.ix.opset < 10
	sp := a.sliceParams(n, ins)
	starts, ends, axes, steps := sp.starts, sp.ends, sp.axes, sp.steps
	if !sp.axesKnown {
		return a.refuse(n, "its axes are computed at run time")
	}
	if !sp.known {
		if axes == nil || a.hasAxis(axes, x) {
			return a.refuse(n, "slices the batch with bounds computed at run time")
		}
		return nil
	}
	if axes == nil {
		for k := range starts {
			axes = append(axes, int64(k))
		}
	}
	for k, ax := range axes {
		if v, ok := normAxis(ax, x.rank()); !ok || v != x.axis || k >= len(starts) || k >= len(ends) {
			continue
		}
		step := int64(1)
		if k < len(steps) {
			step = steps[k]
		}
		fromFirst := starts[k] == 0 || starts[k] <= math.MinInt32
		if step != 1 || !fromFirst || ends[k] < a.batch {
			return a.refuse(n, "slices the batch (start %d, end %d, step %d)", starts[k], ends[k], step)
		}
		if ends[k] >= math.MaxInt32 {
			return nil
		}
		vals := slices.Clone(ends)
		vals[k] = math.MaxInt64
		note := fmt.Sprintf("%s: end %d on the batch axis → %d", nodeRef(n), ends[k], int64(math.MaxInt64))
		if fromAttrs {
			a.p.attrs = append(a.p.attrs, attrEdit{node: n, name: "ends", ints: vals, note: note})
		} else {
			dt := tInt64
			if src := a.ix.inits[input(n, 2)]; src != nil {
				dt = src.GetDataType()
			}
			if dt == tInt32 {
				vals[k] = math.MaxInt32
			}
			a.p.edits = append(a.p.edits, inputEdit{node: n, input: 2, dtype: dt, vals: vals, note: note})
		}
		return nil
	}
	return nil
}

func (a *analysis) gather(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	data, idx := ins[0], in(ins, 1)
	if idx == nil {
		return a.refuse(n, "missing inputs")
	}
	ax, ok := normAxis(attrInt(n, "axis", 0), data.rank())
	if !ok {
		return a.refuse(n, "axis or rank unknown")
	}
	switch {
	case data.axis != none && idx.axis != none:
		return a.refuse(n, "both its data and its indices carry the batch")
	case data.axis == ax:
		return a.refuse(n, "selects rows of the batch")
	case data.axis != none:
		if idx.rank() < 0 {
			return a.refuse(n, "rank of the indices unknown")
		}
		out := data.axis
		if out > ax {
			out += idx.rank() - 1
		}
		allAxes(outs, out)
	default:
		allAxes(outs, ax+idx.axis)
	}
	return nil
}

// elements handles GatherElements and the Scatter family: data, indices (and updates) share
// their shape, batch included.
func (a *analysis) elements(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	axis := none
	for _, t := range ins {
		if t != nil && t.axis != none {
			if axis != none && t.axis != axis {
				return a.refuse(n, "its inputs carry the batch on different axes")
			}
			axis = t.axis
		}
	}
	if n.GetOpType() != "ScatterND" && a.hasAxis([]int64{attrInt(n, "axis", 0)}, &tinfo{axis: axis, known: ins[0].known, shape: ins[0].shape}) {
		return a.refuse(n, "works along the batch axis")
	}
	k := len(ins)
	if n.GetOpType() == "ScatterND" {
		k = 1 // indices and updates of ScatterND have their own layout
		if axis != ins[0].axis {
			return a.refuse(n, "only its data may carry the batch")
		}
	}
	if err := a.sameRows(n, ins, k, axis); err != nil {
		return err
	}
	allAxes(outs, axis)
	return nil
}

func (a *analysis) pad(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	x := ins[0]
	if x.axis == none {
		return a.refuse(n, "its pads carry the batch")
	}
	pads := attr(n, "pads").GetInts()
	if a.ix.opset >= 11 {
		pads, _ = in(ins, 1).consts()
	}
	r := x.rank()
	if in(ins, 3) != nil {
		pads = nil // pads for chosen axes: checked by verification
	}
	if len(pads) == 2*r && (pads[x.axis] != 0 || pads[x.axis+r] != 0) {
		return a.refuse(n, "pads the batch")
	}
	allAxes(outs, x.axis)
	return nil
}

// recurrent handles RNN, GRU and LSTM: X is [seq, batch, input] (layout 0) or [batch, seq,
// input]; the initial states [dirs, batch, hidden] or [batch, dirs, hidden].
func (a *analysis) recurrent(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	layout := attrInt(n, "layout", 0)
	xb, hb, yb := 1, 1, 2
	if layout == 1 {
		xb, hb, yb = 0, 0, 0
	}
	if ins[0].axis != xb {
		return a.refuse(n, "needs the batch on axis %d of X", xb)
	}
	if err := a.sameRow(n, ins, 4, 0); err != nil { // sequence_lens
		return err
	}
	for _, k := range []int{5, 6} { // initial_h, initial_c
		if err := a.sameRow(n, ins, k, hb); err != nil {
			return err
		}
	}
	for k, t := range outs {
		t.axis = hb
		if k == 0 {
			t.axis = yb
		}
	}
	return nil
}

package graph

import (
	"fmt"
	"math"
	"slices"
)

// Operators that move elements (Slice, Transpose, Split, Tile, Gather and GatherElements on
// computed tensors) are index maps: out[i] = x[idx[i]], computed once when the graph is built
// when the indices are constants, with the gradient dx[idx[i]] += dy[i].

// indexMap applies a fixed index map to x.
func (b *builder) indexMap(desc string, x value, out []int, idx []int) (value, error) {
	spec := fnSpec{desc: desc, shape: out, intOut: x.c != nil && x.c.isInt,
		fwd: func(in [][]float64, y []float64) error {
			for i, j := range idx {
				y[i] = in[0][j]
			}
			return nil
		},
		grads: []gradFn{func(_ [][]float64, _, dy, dx []float64) {
			for i, j := range idx {
				dx[j] += dy[i]
			}
		}},
	}
	if x.c != nil && x.c.isInt { // keep integer constants exact (shape arithmetic)
		c := &constant{shape: slices.Clone(out), isInt: true, i: make([]int64, len(idx))}
		for i, j := range idx {
			c.i[i] = x.c.i[j]
		}
		return value{c: c}, nil
	}
	return b.fn(spec, x)
}

// stridedIndex lists, in row-major order of the result, the flat index into a tensor of
// shape in of each element picked by choosing positions pick[d] along each axis d.
func stridedIndex(in []int, pick [][]int) []int {
	strides := rowStrides(in)
	out := make([]int, len(in))
	for d := range pick {
		out[d] = len(pick[d])
	}
	idx := make([]int, 0, product(out))
	if product(out) == 0 {
		return idx
	}
	pos := make([]int, len(in))
	for {
		src := 0
		for d := range pos {
			src += pick[d][pos[d]] * strides[d]
		}
		idx = append(idx, src)
		if !advance(pos, out) {
			return idx
		}
	}
}

func allOf(n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = k
	}
	return out
}

func buildTranspose(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	perm, _ := n.attrInts("perm")
	v, err := b.transpose(n.in[0], perm)
	if err != nil {
		return nil, err
	}
	return []value{v}, nil
}

// transpose permutes x's axes (reversed when perm is nil).
func (b *builder) transpose(x value, perm []int64) (value, error) {
	in := x.shape()
	if perm == nil {
		for d := len(in) - 1; d >= 0; d-- {
			perm = append(perm, int64(d))
		}
	}
	if len(perm) != len(in) {
		return value{}, fmt.Errorf("%w: Transpose perm %v for rank %d", ErrModel, perm, len(in))
	}
	out, idx, err := permuteIndex(in, perm)
	if err != nil {
		return value{}, err
	}
	return b.indexMap(fmt.Sprintf("Transpose%v", perm), x, out, idx)
}

// permuteIndex returns the shape and the index map of a tensor of shape in with its axes
// permuted.
func permuteIndex(in []int, perm []int64) (out, idx []int, err error) {
	seen := make([]bool, len(in))
	out = make([]int, len(in))
	strides := rowStrides(in)
	permuted := make([]int, len(in))
	for k, p := range perm {
		if p < 0 || p >= int64(len(in)) || seen[p] {
			return nil, nil, fmt.Errorf("%w: Transpose perm %v is not a permutation of 0..%d", ErrModel, perm, len(in)-1)
		}
		seen[p] = true
		out[k], permuted[k] = in[p], strides[p]
	}
	return out, affineIndex(out, permuted), nil
}

// sliceAxis returns the positions a Slice picks along an axis of size dim (ONNX's clamping
// rules for starts and ends, any non-zero step).
func sliceAxis(dim int, start, end, step int64) ([]int, error) {
	if step == 0 {
		return nil, fmt.Errorf("%w: Slice with step 0", ErrModel)
	}
	d := int64(dim)
	norm := func(v int64) int64 {
		if v < 0 {
			v += d
		}
		return v
	}
	start, end = norm(start), norm(end)
	var pos []int
	if step > 0 {
		start, end = min(max(start, 0), d), min(max(end, 0), d)
		for i := start; i < end; i += step {
			pos = append(pos, int(i))
		}
	} else {
		start, end = min(max(start, 0), d-1), min(max(end, -1), d-1)
		for i := start; i > end; i += step {
			pos = append(pos, int(i))
		}
	}
	return pos, nil
}

func buildSlice(b *builder, n *onode) ([]value, error) {
	var starts, ends, axes, steps []int64
	if b.m.opset < 10 {
		if err := arity(n, 1, 1); err != nil {
			return nil, err
		}
		starts, _ = n.attrInts("starts")
		ends, _ = n.attrInts("ends")
		axes, _ = n.attrInts("axes")
	} else {
		if err := arity(n, 3, 5); err != nil {
			return nil, err
		}
		var err error
		if starts, err = constInput(n, 1, "starts"); err != nil {
			return nil, err
		}
		if ends, err = constInput(n, 2, "ends"); err != nil {
			return nil, err
		}
		if n.has(3) {
			if axes, err = constInput(n, 3, "axes"); err != nil {
				return nil, err
			}
		}
		if n.has(4) {
			if steps, err = constInput(n, 4, "steps"); err != nil {
				return nil, err
			}
		}
	}
	in := n.in[0].shape()
	if len(ends) != len(starts) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, fmt.Errorf("%w: Slice with %d starts, %d ends, %d axes, %d steps", ErrModel, len(starts), len(ends), len(axes), len(steps))
	}
	pick := make([][]int, len(in))
	for d := range in {
		pick[d] = allOf(in[d])
	}
	for k := range starts {
		a := int64(k)
		if axes != nil {
			a = axes[k]
		}
		ax, err := axis(a, len(in))
		if err != nil {
			return nil, err
		}
		step := int64(1)
		if steps != nil {
			step = steps[k]
		}
		if pick[ax], err = sliceAxis(in[ax], starts[k], ends[k], step); err != nil {
			return nil, err
		}
	}
	return b.pick(fmt.Sprintf("Slice%v%v%v%v", starts, ends, axes, steps), n.in[0], pick)
}

// pick takes the positions pick[d] along each axis d of x.
func (b *builder) pick(desc string, x value, pick [][]int) ([]value, error) {
	in := x.shape()
	out := make([]int, len(in))
	same := true
	for d := range pick {
		out[d] = len(pick[d])
		same = same && slices.Equal(pick[d], allOf(in[d]))
	}
	if same {
		return []value{x}, nil
	}
	if product(out) == 0 {
		return nil, fmt.Errorf("%w: an empty slice (shape %v) of %v", ErrShape, out, in)
	}
	if err := checkShape(out); err != nil {
		return nil, err
	}
	v, err := b.indexMap(desc, x, out, stridedIndex(in, pick))
	return []value{v}, err
}

func buildSplit(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 2); err != nil {
		return nil, err
	}
	in := n.in[0].shape()
	ax, err := axis(n.attrInt("axis", 0), len(in))
	if err != nil {
		return nil, err
	}
	var sizes []int64
	if b.m.opset < 13 {
		sizes, _ = n.attrInts("split")
	} else if n.has(1) {
		if sizes, err = constInput(n, 1, "split"); err != nil {
			return nil, err
		}
	}
	outs := len(n.GetOutput())
	if sizes == nil {
		parts := int(n.attrInt("num_outputs", int64(outs)))
		if parts <= 0 {
			return nil, fmt.Errorf("%w: Split into %d parts", ErrModel, parts)
		}
		each := (in[ax] + parts - 1) / parts // the last part may be smaller (opset 18)
		for left := in[ax]; left > 0; left -= each {
			sizes = append(sizes, int64(min(each, left)))
		}
	}
	total := int64(0)
	for _, s := range sizes {
		if s < 0 {
			return nil, fmt.Errorf("%w: Split sizes %v", ErrModel, sizes)
		}
		total += s
	}
	if total != int64(in[ax]) || len(sizes) != outs {
		return nil, fmt.Errorf("%w: Split of %v along axis %d into %v for %d outputs", ErrShape, in, ax, sizes, outs)
	}
	var res []value
	start := 0
	for _, s := range sizes {
		pick := make([][]int, len(in))
		for d := range in {
			pick[d] = allOf(in[d])
		}
		pick[ax] = pick[ax][start : start+int(s)]
		v, err := b.pick(fmt.Sprintf("Split{%d,%d:%d}", ax, start, start+int(s)), n.in[0], pick)
		if err != nil {
			return nil, err
		}
		res = append(res, v[0])
		start += int(s)
	}
	return res, nil
}

func buildTile(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 2); err != nil {
		return nil, err
	}
	reps, err := constInput(n, 1, "repeats")
	if err != nil {
		return nil, err
	}
	in := n.in[0].shape()
	if len(reps) != len(in) {
		return nil, fmt.Errorf("%w: Tile repeats %v for rank %d", ErrModel, reps, len(in))
	}
	pick := make([][]int, len(in))
	for d, r := range reps {
		if r < 0 {
			return nil, fmt.Errorf("%w: Tile repeats %v", ErrModel, reps)
		}
		for range r {
			pick[d] = append(pick[d], allOf(in[d])...)
		}
	}
	return b.pick(fmt.Sprintf("Tile%v", reps), n.in[0], pick)
}

// gatherIndices checks and normalises index values against a dimension of size dim.
func gatherIndex(v float64, dim int) (int, error) {
	i := int(v)
	if v != math.Trunc(v) || math.IsNaN(v) {
		return 0, fmt.Errorf("%w: index %g is not an integer", ErrShape, v)
	}
	if i < 0 {
		i += dim
	}
	if i < 0 || i >= dim {
		return 0, fmt.Errorf("%w: index %g out of range for a dimension of %d", ErrShape, v, dim)
	}
	return i, nil
}

// buildGather gathers slices of data along axis at indices. On constants it is shape
// arithmetic, folded exactly; on computed data (embedding look-ups, x[:, 0]) the gradient goes
// to data.
func buildGather(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 2); err != nil {
		return nil, err
	}
	ds, is := n.in[0].shape(), n.in[1].shape()
	ax, err := axis(n.attrInt("axis", 0), len(ds))
	if err != nil {
		return nil, err
	}
	if n.in[0].c != nil && n.in[1].c != nil {
		return gatherConst(n.in[0].c, n.in[1].c, ax)
	}
	dim := ds[ax]
	outer, inner := product(ds[:ax]), product(ds[ax+1:])
	out := append(append(slices.Clone(ds[:ax]), is...), ds[ax+1:]...)
	if err := checkShape(out); err != nil {
		return nil, err
	}
	nIdx := product(is)
	walk := func(in [][]float64, f func(dst, src int)) error {
		for o := range outer {
			for k, v := range in[1][:nIdx] {
				i, err := gatherIndex(v, dim)
				if err != nil {
					return err
				}
				for j := range inner {
					f((o*nIdx+k)*inner+j, (o*dim+i)*inner+j)
				}
			}
		}
		return nil
	}
	return b.fnOne(gatherSpec(fmt.Sprintf("Gather{%d}", ax), out, walk, false), n.in[0], n.in[1])
}

// gatherSpec is the fnSpec of a gather whose walk calls f(dst, src) for each output element
// dst and the data element src it takes: y[dst] = data[src], dx[src] += dy[dst].
func gatherSpec(desc string, shape []int, walk func(in [][]float64, f func(dst, src int)) error, intOut bool) fnSpec {
	return fnSpec{desc: desc, shape: shape, intOut: intOut,
		fwd: func(in [][]float64, y []float64) error {
			return walk(in, func(dst, src int) { y[dst] = in[0][src] })
		},
		grads: []gradFn{func(in [][]float64, _, dy, dx []float64) {
			_ = walk(in, func(dst, src int) { dx[src] += dy[dst] })
		}},
	}
}

func gatherConst(data, idx *constant, ax int) ([]value, error) {
	if err := checkShape(append(append(slices.Clone(data.shape[:ax]), idx.shape...), data.shape[ax+1:]...)); err != nil {
		return nil, err
	}
	dim := data.shape[ax]
	outer, inner := product(data.shape[:ax]), product(data.shape[ax+1:])
	out := &constant{isInt: data.isInt}
	out.shape = append(append(slices.Clone(data.shape[:ax]), idx.shape...), data.shape[ax+1:]...)
	for o := range outer {
		for _, i := range idx.ints() {
			if i < 0 {
				i += int64(dim)
			}
			if i < 0 || i >= int64(dim) {
				return nil, fmt.Errorf("%w: Gather index %d out of range for dimension %d", ErrShape, i, dim)
			}
			base := (o*dim + int(i)) * inner
			if data.isInt {
				out.i = append(out.i, data.i[base:base+inner]...)
			} else {
				out.f = append(out.f, data.f[base:base+inner]...)
			}
		}
	}
	return []value{{c: out}}, nil
}

// buildGatherElements picks, for every position of indices, the element of data at that
// position with the axis coordinate replaced by the index (torch.gather). The gradient goes to
// data; indices (constant or computed, e.g. an ArgMax) get none.
func buildGatherElements(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 2); err != nil {
		return nil, err
	}
	ds, is := n.in[0].shape(), n.in[1].shape()
	ax, err := axis(n.attrInt("axis", 0), len(ds))
	if err != nil {
		return nil, err
	}
	if len(is) != len(ds) {
		return nil, fmt.Errorf("%w: GatherElements of data %v by indices %v (ranks differ)", ErrShape, ds, is)
	}
	for d := range ds {
		if d != ax && is[d] > ds[d] {
			return nil, fmt.Errorf("%w: GatherElements indices %v exceed data %v on axis %d", ErrShape, is, ds, d)
		}
	}
	// src(i, v): the data index of output element i (at position pos in indices) for index v.
	dStrides := rowStrides(ds)
	baseStrides := slices.Clone(dStrides)
	baseStrides[ax] = 0
	base := affineIndex(is, baseStrides) // data index of each output with the axis coordinate at 0
	walk := func(in [][]float64, f func(dst, src int)) error {
		for i, v := range in[1][:len(base)] {
			k, err := gatherIndex(v, ds[ax])
			if err != nil {
				return err
			}
			f(i, base[i]+k*dStrides[ax])
		}
		return nil
	}
	spec := gatherSpec(fmt.Sprintf("GatherElements{%d}", ax), slices.Clone(is), walk, n.in[0].c != nil && n.in[0].c.isInt)
	return b.fnOne(spec, n.in[0], n.in[1])
}

// buildConstantOfShape makes a constant of the (constant) shape given, filled with the value
// attribute (a one-element tensor; float 0 by default).
func buildConstantOfShape(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	dims, err := constInput(n, 0, "shape")
	if err != nil {
		return nil, err
	}
	shape := make([]int, len(dims))
	for k, d := range dims {
		if d < 0 || d > math.MaxInt32 {
			return nil, fmt.Errorf("%w: ConstantOfShape of %v", ErrShape, dims)
		}
		shape[k] = int(d)
	}
	if err := checkShape(shape); err != nil {
		return nil, err
	}
	fill := &constant{f: []float64{0}}
	if a := n.attr("value"); a != nil {
		if fill, err = decodeTensor(a.GetT()); err != nil {
			return nil, err
		}
		if fill.size() != 1 {
			return nil, fmt.Errorf("%w: ConstantOfShape value of shape %v; want one element", ErrModel, fill.shape)
		}
	}
	c := &constant{shape: shape, isInt: fill.isInt}
	for range product(shape) {
		if fill.isInt {
			c.i = append(c.i, fill.i[0])
		} else {
			c.f = append(c.f, fill.f[0])
		}
	}
	return []value{{c: c}}, nil
}

// buildRange makes start, start+delta, ... up to limit (excluded), from constant inputs.
func buildRange(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 3, 3); err != nil {
		return nil, err
	}
	var v [3]*constant
	for k := range v {
		if n.in[k].c == nil || n.in[k].c.size() != 1 {
			return nil, fmt.Errorf("%w: Range input %d is computed at run time or not a scalar; only constant ranges are supported", ErrUnsupported, k)
		}
		v[k] = n.in[k].c
	}
	start, limit, delta := v[0].floats()[0], v[1].floats()[0], v[2].floats()[0]
	if delta == 0 {
		return nil, fmt.Errorf("%w: Range with delta 0", ErrModel)
	}
	if n := (limit - start) / delta; !(n <= maxElements) {
		return nil, fmt.Errorf("%w: a Range from %g to %g by %g is too large", ErrShape, start, limit, delta)
	}
	count := max(int(math.Ceil((limit-start)/delta)), 0)
	c := &constant{shape: []int{count}, isInt: v[0].isInt}
	for k := range count {
		if c.isInt {
			c.i = append(c.i, v[0].i[0]+int64(k)*v[2].ints()[0])
		} else {
			c.f = append(c.f, start+float64(k)*delta)
		}
	}
	return []value{{c: c}}, nil
}

package graph

import (
	"fmt"
	"hash"
	"hash/fnv"
	"slices"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The operators gorgonia lacks (element-wise maps such as Elu or Erf, reductions over any
// axes, index maps such as Slice or GatherElements, selections) are fnOps: custom gorgonia
// ops whose forward pass and gradients are Go functions over float64 slices. Each gradient is
// itself an fnOp over (inputs..., output, output gradient), so gorgonia's symbolic
// differentiation chains them like its own ops. All shapes are fixed when the graph is
// built; an fnOp keeps its output tensor and scratch buffers between runs, so it allocates
// nothing in steady state.

// fnSpec describes one computation.
type fnSpec struct {
	// desc names the computation with every parameter that changes its result: gorgonia
	// merges nodes whose op hashes and inputs are equal.
	desc  string
	shape []int // output shape
	// fwd computes out from the inputs (each in row-major order of its shape).
	fwd func(in [][]float64, out []float64) error
	// grads[k] computes the gradient dx of input k from the inputs, the output y and its
	// gradient dy; nil (or a short slice) marks input k as not differentiable.
	grads []gradFn
	// intOut marks an integer result (ArgMax, Equal...): a folded constant is integer.
	intOut bool
}

type gradFn func(in [][]float64, y, dy, dx []float64)

// fnOp is the gorgonia op of an fnSpec applied to inputs of the given shapes.
type fnOp struct {
	spec   fnSpec
	shapes [][]int // input shapes
	bufs   [][]float64
	res    []float64
	out    *tensor.Dense
}

func rankType(r int) hm.Type {
	if r == 0 {
		return hm.TypeVariable('a')
	}
	return G.TensorType{Dims: r, Of: hm.TypeVariable('a')}
}

func (op *fnOp) Arity() int { return len(op.shapes) }
func (op *fnOp) Type() hm.Type {
	ts := make([]hm.Type, 0, len(op.shapes)+1)
	for _, s := range op.shapes {
		ts = append(ts, rankType(len(s)))
	}
	return hm.NewFnType(append(ts, rankType(len(op.spec.shape)))...)
}
func (op *fnOp) ReturnsPtr() bool     { return true }
func (op *fnOp) CallsExtern() bool    { return false }
func (op *fnOp) OverwritesInput() int { return -1 }
func (op *fnOp) String() string       { return op.spec.desc }
func (op *fnOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.graph.%s%v->%v", op.spec.desc, op.shapes, op.spec.shape)
}
func (op *fnOp) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *fnOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != len(op.shapes) {
		return nil, fmt.Errorf("%w: %s takes %d inputs, got %d", ErrShape, op.spec.desc, len(op.shapes), len(in))
	}
	return tensor.Shape(slices.Clone(op.spec.shape)), nil
}

func (op *fnOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != len(op.shapes) {
		return nil, fmt.Errorf("%w: %s takes %d inputs, got %d", ErrShape, op.spec.desc, len(op.shapes), len(in))
	}
	if op.bufs == nil {
		op.bufs = make([][]float64, len(in))
		op.res = make([]float64, product(op.spec.shape))
	}
	var dt tensor.Dtype
	for k, v := range in {
		var err error
		if op.bufs[k], dt, err = readValue(op.bufs[k], v, product(op.shapes[k])); err != nil {
			return nil, fmt.Errorf("%s input %d: %w", op.spec.desc, k, err)
		}
	}
	if err := op.spec.fwd(op.bufs, op.res); err != nil {
		return nil, err
	}
	if len(op.spec.shape) == 0 {
		if dt == tensor.Float64 {
			return G.NewF64(op.res[0]), nil
		}
		return G.NewF32(float32(op.res[0])), nil
	}
	if op.out == nil || op.out.Dtype() != dt || !op.out.Shape().Eq(tensor.Shape(op.spec.shape)) || op.out.IsMaterializable() {
		op.out = tensor.New(tensor.WithShape(op.spec.shape...), tensor.Of(dt))
	}
	switch data := op.out.Data().(type) {
	case []float32:
		for k, v := range op.res {
			data[k] = float32(v)
		}
	case []float64:
		copy(data, op.res)
	}
	return op.out, nil
}

// readValue copies a float32 or float64 value of n elements into buf as float64.
func readValue(buf []float64, v G.Value, n int) ([]float64, tensor.Dtype, error) {
	if cap(buf) < n {
		buf = make([]float64, n)
	}
	buf = buf[:n]
	switch x := v.(type) {
	case *G.F32:
		if n != 1 {
			return nil, tensor.Dtype{}, fmt.Errorf("%w: a scalar where %d values are expected", ErrShape, n)
		}
		buf[0] = float64(*x)
		return buf, tensor.Float32, nil
	case *G.F64:
		if n != 1 {
			return nil, tensor.Dtype{}, fmt.Errorf("%w: a scalar where %d values are expected", ErrShape, n)
		}
		buf[0] = float64(*x)
		return buf, tensor.Float64, nil
	case *tensor.Dense:
		if x.RequiresIterator() || x.IsView() {
			x = x.Materialize().(*tensor.Dense)
		}
		if x.Shape().TotalSize() != n {
			return nil, tensor.Dtype{}, fmt.Errorf("%w: %v where %d values are expected", ErrShape, x.Shape(), n)
		}
		switch data := x.Data().(type) {
		case []float32:
			for k, f := range data[:n] {
				buf[k] = float64(f)
			}
			return buf, tensor.Float32, nil
		case []float64:
			copy(buf, data[:n])
			return buf, tensor.Float64, nil
		case float32:
			buf[0] = float64(data)
			return buf, tensor.Float32, nil
		case float64:
			buf[0] = data
			return buf, tensor.Float64, nil
		}
	}
	return nil, tensor.Dtype{}, fmt.Errorf("%w: a value of type %T", ErrShape, v)
}

func (op *fnOp) DiffWRT(inputs int) []bool {
	out := make([]bool, inputs)
	for k := range out {
		out[k] = k < len(op.spec.grads) && op.spec.grads[k] != nil
	}
	return out
}

// SymDiff returns, for each differentiable input k, the fnOp computing its gradient from
// (inputs..., y, dy).
func (op *fnOp) SymDiff(in G.Nodes, y, dy *G.Node) (G.Nodes, error) {
	out := make(G.Nodes, len(in))
	args := append(slices.Clone(in), y, dy)
	shapes := append(slices.Clone(op.shapes), op.spec.shape, op.spec.shape)
	n := len(in)
	for k, g := range op.spec.grads {
		if g == nil || k >= n {
			continue
		}
		gop := &fnOp{spec: fnSpec{
			desc:  fmt.Sprintf("%s/grad%d", op.spec.desc, k),
			shape: op.shapes[k],
			fwd: func(in [][]float64, dx []float64) error {
				clear(dx)
				g(in[:n], in[n], in[n+1], dx)
				return nil
			},
		}, shapes: shapes}
		var err error
		if out[k], err = G.ApplyOp(gop, args...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fn applies spec to the inputs: folded into a constant when they all are, else an fnOp
// node.
func (b *builder) fn(spec fnSpec, in ...value) (value, error) {
	allConst := true
	for _, v := range in {
		if v.n == nil && v.c == nil {
			return value{}, fmt.Errorf("%w: a required input is missing", ErrModel)
		}
		allConst = allConst && v.c != nil
	}
	if allConst {
		args := make([][]float64, len(in))
		for k, v := range in {
			args[k] = v.c.floats()
		}
		res := make([]float64, product(spec.shape))
		if err := spec.fwd(args, res); err != nil {
			return value{}, err
		}
		c := &constant{shape: slices.Clone(spec.shape), isInt: spec.intOut}
		if spec.intOut {
			c.i = make([]int64, len(res))
			for k, v := range res {
				c.i[k] = int64(v)
			}
		} else {
			c.f = res
		}
		return value{c: c}, nil
	}
	nodes := make([]*G.Node, len(in))
	shapes := make([][]int, len(in))
	for k, v := range in {
		var err error
		if nodes[k], err = b.toNode(v); err != nil {
			return value{}, err
		}
		shapes[k] = []int(nodes[k].Shape())
		if nodes[k].IsScalar() {
			shapes[k] = nil
		}
		if product(shapes[k]) != product(v.shape()) {
			return value{}, fmt.Errorf("%w: %s: input %d has shape %v, want %v", ErrShape, spec.desc, k, shapes[k], v.shape())
		}
	}
	n, err := G.ApplyOp(&fnOp{spec: spec, shapes: shapes}, nodes...)
	if err != nil {
		return value{}, err
	}
	return value{n: n}, nil
}

// fnOne is fn for a builder op's single output.
func (b *builder) fnOne(spec fnSpec, in ...value) ([]value, error) {
	v, err := b.fn(spec, in...)
	if err != nil {
		return nil, err
	}
	return []value{v}, nil
}

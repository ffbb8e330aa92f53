package graph

import (
	"fmt"
	"math"
	"slices"
)

// Reductions over any set of axes (ReduceSum, ReduceMean, ReduceMax, ReduceLogSumExp...) and
// ArgMax/ArgMin, as fnOps. A reduction computes its keepdims shape (1 on each reduced axis);
// keepdims=0 reshapes that.

type reduceKind struct {
	// init is the accumulator's start, step folds one element in, done finishes it (count is
	// the number of elements reduced into one output).
	init float64
	step func(acc, x float64) float64
	done func(acc float64, count int) float64
	// deriv is ∂y/∂x for an element x reduced into y (max and min handled apart).
	deriv func(x, y float64, count int) float64
}

var reduceKinds = map[string]reduceKind{
	"ReduceSum": {0, func(a, x float64) float64 { return a + x }, func(a float64, _ int) float64 { return a },
		func(_, _ float64, _ int) float64 { return 1 }},
	"ReduceMean": {0, func(a, x float64) float64 { return a + x }, func(a float64, n int) float64 { return a / float64(n) },
		func(_, _ float64, n int) float64 { return 1 / float64(n) }},
	"ReduceSumSquare": {0, func(a, x float64) float64 { return a + x*x }, func(a float64, _ int) float64 { return a },
		func(x, _ float64, _ int) float64 { return 2 * x }},
	"ReduceL1": {0, func(a, x float64) float64 { return a + math.Abs(x) }, func(a float64, _ int) float64 { return a },
		func(x, _ float64, _ int) float64 { return sign(x) }},
	"ReduceL2": {0, func(a, x float64) float64 { return a + x*x }, func(a float64, _ int) float64 { return math.Sqrt(a) },
		func(x, y float64, _ int) float64 {
			if y == 0 {
				return 0
			}
			return x / y
		}},
	"ReduceLogSum": {0, func(a, x float64) float64 { return a + x }, func(a float64, _ int) float64 { return math.Log(a) },
		func(_, y float64, _ int) float64 { return math.Exp(-y) }},
	"ReduceMax": {math.Inf(-1), math.Max, func(a float64, _ int) float64 { return a }, nil},
	"ReduceMin": {math.Inf(1), math.Min, func(a float64, _ int) float64 { return a }, nil},
	// ReduceLogSumExp is computed stably in fwd (max-shifted); step and done are unused.
	"ReduceLogSumExp": {deriv: func(x, y float64, _ int) float64 { return math.Exp(x - y) }},
}

// reduceAxes reads a reduction's axes: the attribute before the opset that moved them to
// input 1 (13 for ReduceSum, 18 for the others), the input from then on.
func reduceAxes(b *builder, n *onode) ([]int64, bool, error) {
	inputFrom := int64(18)
	if n.GetOpType() == "ReduceSum" {
		inputFrom = 13
	}
	if b.m.opset < inputFrom {
		v, ok := n.attrInts("axes")
		return v, ok && len(v) > 0, nil
	}
	if !n.has(1) {
		return nil, false, nil
	}
	v, err := constInput(n, 1, "axes")
	return v, len(v) > 0, err
}

func buildReduce(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 2); err != nil {
		return nil, err
	}
	name := n.GetOpType()
	kind := reduceKinds[name]
	axes, ok, err := reduceAxes(b, n)
	if err != nil {
		return nil, err
	}
	in := n.in[0].shape()
	reduced := make([]bool, len(in))
	switch {
	case ok:
		for _, a := range axes {
			ax, err := axis(a, len(in))
			if err != nil {
				return nil, err
			}
			reduced[ax] = true
		}
	case n.attrInt("noop_with_empty_axes", 0) != 0:
		return n.in[:1], nil
	default:
		for k := range reduced {
			reduced[k] = true
		}
	}
	keep := make([]int, len(in))
	var squeezed []int
	for k, d := range in {
		keep[k] = d
		if reduced[k] {
			keep[k] = 1
		} else {
			squeezed = append(squeezed, d)
		}
	}
	idx := broadcastIndex(keep, in) // input element → output element
	at := func(i int) int {
		if idx == nil {
			return i
		}
		return idx[i]
	}
	count := product(in) / max(product(keep), 1)
	spec := fnSpec{desc: fmt.Sprintf("%s%v", name, reduced), shape: keep}
	if name == "ReduceLogSumExp" {
		spec.fwd = func(x [][]float64, y []float64) error {
			m := make([]float64, len(y))
			for j := range m {
				m[j] = math.Inf(-1)
			}
			for i, v := range x[0] {
				m[at(i)] = math.Max(m[at(i)], v)
			}
			clear(y)
			for i, v := range x[0] {
				if j := at(i); !math.IsInf(m[j], 0) {
					y[j] += math.Exp(v - m[j])
				}
			}
			for j := range y {
				if math.IsInf(m[j], 0) {
					y[j] = m[j]
				} else {
					y[j] = m[j] + math.Log(y[j])
				}
			}
			return nil
		}
	} else {
		spec.fwd = func(x [][]float64, y []float64) error {
			for j := range y {
				y[j] = kind.init
			}
			for i, v := range x[0] {
				y[at(i)] = kind.step(y[at(i)], v)
			}
			for j := range y {
				y[j] = kind.done(y[j], count)
			}
			return nil
		}
	}
	if kind.deriv != nil {
		spec.grads = []gradFn{func(x [][]float64, y, dy, dx []float64) {
			for i, v := range x[0] {
				j := at(i)
				dx[i] = dy[j] * kind.deriv(v, y[j], count)
			}
		}}
	} else { // max, min: the first element equal to the result takes the gradient
		spec.grads = []gradFn{func(x [][]float64, y, dy, dx []float64) {
			taken := make([]bool, len(y))
			for i, v := range x[0] {
				if j := at(i); !taken[j] && v == y[j] {
					taken[j] = true
					dx[i] = dy[j]
				}
			}
		}}
	}
	if n.in[0].c != nil {
		spec.grads = nil
	}
	v, err := b.fn(spec, n.in[0])
	if err != nil {
		return nil, err
	}
	if n.attrInt("keepdims", 1) != 0 {
		return []value{v}, nil
	}
	return reshapeValue(v, squeezed)
}

// buildArg is ArgMax or ArgMin: the index along axis of the first (or, with
// select_last_index, the last) extreme element, as an integer tensor; no gradient.
func buildArg(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	in := n.in[0].shape()
	ax, err := axis(n.attrInt("axis", 0), len(in))
	if err != nil {
		return nil, err
	}
	isMax := n.GetOpType() == "ArgMax"
	last := n.attrInt("select_last_index", 0) != 0
	keep := slices.Clone(in)
	keep[ax] = 1
	outer, dim, inner := product(in[:ax]), in[ax], product(in[ax+1:])
	if dim == 0 {
		return nil, fmt.Errorf("%w: %s along an empty axis of %v", ErrShape, n.GetOpType(), in)
	}
	spec := fnSpec{desc: fmt.Sprintf("%s{%d,%t}", n.GetOpType(), ax, last), shape: keep, intOut: true,
		fwd: func(x [][]float64, y []float64) error {
			for o := range outer {
				for i := range inner {
					best := 0
					for d := 1; d < dim; d++ {
						v, w := x[0][(o*dim+d)*inner+i], x[0][(o*dim+best)*inner+i]
						better := (isMax && v > w) || (!isMax && v < w) || (last && v == w)
						if better || math.IsNaN(v) && !math.IsNaN(w) {
							best = d
						}
					}
					y[o*inner+i] = float64(best)
				}
			}
			return nil
		}}
	v, err := b.fn(spec, n.in[0])
	if err != nil {
		return nil, err
	}
	if n.attrInt("keepdims", 1) != 0 {
		return []value{v}, nil
	}
	return reshapeValue(v, append(slices.Clone(in[:ax]), in[ax+1:]...))
}

package graph

import (
	"fmt"
	"math"
	"slices"
)

// Element-wise operators gorgonia lacks, as fnOps (see fnop.go): one function of the
// operands' elements, with numpy broadcasting of any rank, and per operand the partial
// derivative (nil when the op is not differentiable in it).

// elemFn computes one output element from the operands' elements a.
type elemFn func(a []float64) float64

// elemDeriv is ∂y/∂a[k] at the operands' elements a and output y.
type elemDeriv func(a []float64, y float64) float64

// broadcastIndex maps each element of a tensor of shape out to the element of a tensor of
// shape in (numpy broadcasting) it reads; nil when the shapes are equal.
func broadcastIndex(in, out []int) []int {
	if slices.Equal(in, out) {
		return nil
	}
	strides := rowStrides(padShape(in, len(out)))
	for d, n := range padShape(in, len(out)) {
		if n == 1 {
			strides[d] = 0
		}
	}
	return affineIndex(out, strides)
}

// elementwise builds the fnSpec of an element-wise op over operands of the given shapes.
func elementwiseSpec(desc string, shapes [][]int, f elemFn, derivs []elemDeriv, intOut bool) (fnSpec, error) {
	out := []int{}
	for _, s := range shapes {
		var err error
		if out, err = broadcastShape(out, s); err != nil {
			return fnSpec{}, err
		}
	}
	n := product(out)
	idx := make([][]int, len(shapes))
	for k, s := range shapes {
		idx[k] = broadcastIndex(s, out)
	}
	at := func(k, i int) int {
		if idx[k] == nil {
			return i
		}
		return idx[k][i]
	}
	spec := fnSpec{desc: desc, shape: out, intOut: intOut}
	spec.fwd = func(in [][]float64, y []float64) error {
		a := make([]float64, len(in))
		for i := range n {
			for k := range in {
				a[k] = in[k][at(k, i)]
			}
			y[i] = f(a)
		}
		return nil
	}
	for k := range derivs {
		if derivs[k] == nil {
			spec.grads = append(spec.grads, nil)
			continue
		}
		df := derivs[k]
		spec.grads = append(spec.grads, func(in [][]float64, y, dy, dx []float64) {
			a := make([]float64, len(in))
			for i := range n {
				for j := range in {
					a[j] = in[j][at(j, i)]
				}
				dx[at(k, i)] += dy[i] * df(a, y[i])
			}
		})
	}
	return spec, nil
}

// applyElementwise applies an element-wise function to values.
func (b *builder) applyElementwise(desc string, in []value, f elemFn, derivs []elemDeriv, intOut bool) ([]value, error) {
	shapes := make([][]int, len(in))
	for k, v := range in {
		if v.n == nil && v.c == nil {
			return nil, fmt.Errorf("%w: input %d is missing", ErrModel, k)
		}
		shapes[k] = v.shape()
		if v.c != nil && k < len(derivs) { // constants need no gradient
			derivs = slices.Clone(derivs)
			derivs[k] = nil
		}
	}
	spec, err := elementwiseSpec(desc, shapes, f, derivs, intOut)
	if err != nil {
		return nil, err
	}
	return b.fnOne(spec, in...)
}

// mapOp is a unary element-wise operator: y = f(x), dy/dx = df(x, y) (nil: none).
func mapOp(name string, f func(x float64) float64, df func(x, y float64) float64) func(*builder, *onode) ([]value, error) {
	return func(b *builder, n *onode) ([]value, error) {
		if err := arity(n, 1, 1); err != nil {
			return nil, err
		}
		return b.mapValue(name, n.in[0], f, df)
	}
}

func (b *builder) mapValue(desc string, x value, f func(x float64) float64, df func(x, y float64) float64) ([]value, error) {
	var derivs []elemDeriv
	if df != nil {
		derivs = []elemDeriv{func(a []float64, y float64) float64 { return df(a[0], y) }}
	}
	return b.applyElementwise(desc, []value{x}, func(a []float64) float64 { return f(a[0]) }, derivs, false)
}

// attrOp is a unary element-wise operator whose function depends on the node's attributes.
func attrOp(make func(n *onode) (desc string, f func(x float64) float64, df func(x, y float64) float64)) func(*builder, *onode) ([]value, error) {
	return func(b *builder, n *onode) ([]value, error) {
		if err := arity(n, 1, 1); err != nil {
			return nil, err
		}
		desc, f, df := make(n)
		return b.mapValue(desc, n.in[0], f, df)
	}
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func softplus(x float64) float64 { return math.Max(x, 0) + math.Log1p(math.Exp(-math.Abs(x))) }

func sign(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

func boolOf(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

var unaryOps = map[string]func(*builder, *onode) ([]value, error){
	"Log":        mapOp("Log", math.Log, func(x, _ float64) float64 { return 1 / x }),
	"Sqrt":       mapOp("Sqrt", math.Sqrt, func(_, y float64) float64 { return 0.5 / y }),
	"Reciprocal": mapOp("Reciprocal", func(x float64) float64 { return 1 / x }, func(_, y float64) float64 { return -y * y }),
	"Abs":        mapOp("Abs", math.Abs, func(x, _ float64) float64 { return sign(x) }),
	"Erf": mapOp("Erf", math.Erf, func(x, _ float64) float64 {
		return 2 / math.Sqrt(math.Pi) * math.Exp(-x*x)
	}),
	"Softplus": mapOp("Softplus", softplus, func(x, _ float64) float64 { return sigmoid(x) }),
	"Softsign": mapOp("Softsign", func(x float64) float64 { return x / (1 + math.Abs(x)) }, func(x, _ float64) float64 {
		d := 1 + math.Abs(x)
		return 1 / (d * d)
	}),
	"Sign":  mapOp("Sign", sign, func(float64, float64) float64 { return 0 }),
	"Floor": mapOp("Floor", math.Floor, func(float64, float64) float64 { return 0 }),
	"Ceil":  mapOp("Ceil", math.Ceil, func(float64, float64) float64 { return 0 }),
	"Round": mapOp("Round", math.RoundToEven, func(float64, float64) float64 { return 0 }),
	"Not":   mapOp("Not", func(x float64) float64 { return boolOf(x == 0) }, nil),
	"HardSwish": mapOp("HardSwish", func(x float64) float64 { return x * math.Max(0, math.Min(1, x/6+0.5)) }, func(x, _ float64) float64 {
		switch {
		case x < -3:
			return 0
		case x > 3:
			return 1
		}
		return x/3 + 0.5
	}),
	"Elu": attrOp(func(n *onode) (string, func(float64) float64, func(float64, float64) float64) {
		alpha := float64(n.attrFloat("alpha", 1))
		return fmt.Sprintf("Elu{%g}", alpha), func(x float64) float64 {
				if x > 0 {
					return x
				}
				return alpha * math.Expm1(x)
			}, func(x, y float64) float64 {
				if x > 0 {
					return 1
				}
				return y + alpha
			}
	}),
	"Selu": attrOp(func(n *onode) (string, func(float64) float64, func(float64, float64) float64) {
		alpha := float64(n.attrFloat("alpha", 1.67326319217681884765625))
		gamma := float64(n.attrFloat("gamma", 1.05070102214813232421875))
		return fmt.Sprintf("Selu{%g,%g}", alpha, gamma), func(x float64) float64 {
				if x > 0 {
					return gamma * x
				}
				return gamma * alpha * math.Expm1(x)
			}, func(x, _ float64) float64 {
				if x > 0 {
					return gamma
				}
				return gamma * alpha * math.Exp(x)
			}
	}),
	"LeakyRelu": attrOp(func(n *onode) (string, func(float64) float64, func(float64, float64) float64) {
		alpha := float64(n.attrFloat("alpha", 0.01))
		return fmt.Sprintf("LeakyRelu{%g}", alpha), func(x float64) float64 {
				if x >= 0 {
					return x
				}
				return alpha * x
			}, func(x, _ float64) float64 {
				if x >= 0 {
					return 1
				}
				return alpha
			}
	}),
	"HardSigmoid": attrOp(func(n *onode) (string, func(float64) float64, func(float64, float64) float64) {
		alpha, beta := float64(n.attrFloat("alpha", 0.2)), float64(n.attrFloat("beta", 0.5))
		return fmt.Sprintf("HardSigmoid{%g,%g}", alpha, beta), func(x float64) float64 {
				return math.Max(0, math.Min(1, alpha*x+beta))
			}, func(x, _ float64) float64 {
				if v := alpha*x + beta; v > 0 && v < 1 {
					return alpha
				}
				return 0
			}
	}),
}

// binaryOps are element-wise operators of two operands with broadcasting, beyond the four
// arithmetic ones gorgonia provides.
var binaryOps = map[string]struct {
	f      elemFn
	derivs []elemDeriv
	intOut bool
}{
	"Pow": {func(a []float64) float64 { return math.Pow(a[0], a[1]) }, []elemDeriv{
		func(a []float64, _ float64) float64 {
			if a[1] == 0 {
				return 0
			}
			return a[1] * math.Pow(a[0], a[1]-1)
		},
		func(a []float64, y float64) float64 {
			if a[0] <= 0 {
				return 0
			}
			return y * math.Log(a[0])
		},
	}, false},
	"Equal":          {func(a []float64) float64 { return boolOf(a[0] == a[1]) }, nil, true},
	"Greater":        {func(a []float64) float64 { return boolOf(a[0] > a[1]) }, nil, true},
	"GreaterOrEqual": {func(a []float64) float64 { return boolOf(a[0] >= a[1]) }, nil, true},
	"Less":           {func(a []float64) float64 { return boolOf(a[0] < a[1]) }, nil, true},
	"LessOrEqual":    {func(a []float64) float64 { return boolOf(a[0] <= a[1]) }, nil, true},
	"And":            {func(a []float64) float64 { return boolOf(a[0] != 0 && a[1] != 0) }, nil, true},
	"Or":             {func(a []float64) float64 { return boolOf(a[0] != 0 || a[1] != 0) }, nil, true},
	"Xor":            {func(a []float64) float64 { return boolOf((a[0] != 0) != (a[1] != 0)) }, nil, true},
}

func buildBinary(name string) func(*builder, *onode) ([]value, error) {
	op := binaryOps[name]
	return func(b *builder, n *onode) ([]value, error) {
		if err := arity(n, 2, 2); err != nil {
			return nil, err
		}
		return b.applyElementwise(name, n.in[:2], op.f, op.derivs, op.intOut)
	}
}

// buildMinMax is the variadic element-wise Min or Max (Sum and Mean too), with broadcasting.
// The gradient of Min and Max goes to the first operand holding the extreme value.
func buildVariadic(name string) func(*builder, *onode) ([]value, error) {
	return func(b *builder, n *onode) ([]value, error) {
		if len(n.in) == 0 {
			return nil, fmt.Errorf("%w: %s without inputs", ErrModel, name)
		}
		for k := range n.in {
			if !n.has(k) {
				return nil, fmt.Errorf("%w: %s input %d is missing", ErrModel, name, k)
			}
		}
		if len(n.in) == 1 {
			return n.in[:1], nil
		}
		pick := func(a []float64) int {
			best := 0
			for k, v := range a {
				if (name == "Max" && v > a[best]) || (name == "Min" && v < a[best]) || math.IsNaN(v) && !math.IsNaN(a[best]) {
					best = k
				}
			}
			return best
		}
		derivs := make([]elemDeriv, len(n.in))
		for k := range derivs {
			switch name {
			case "Sum":
				derivs[k] = func([]float64, float64) float64 { return 1 }
			case "Mean":
				derivs[k] = func(a []float64, _ float64) float64 { return 1 / float64(len(a)) }
			default:
				derivs[k] = func(a []float64, _ float64) float64 { return boolOf(pick(a) == k) }
			}
		}
		f := func(a []float64) float64 { return a[pick(a)] }
		switch name {
		case "Sum", "Mean":
			f = func(a []float64) float64 {
				s := 0.0
				for _, v := range a {
					s += v
				}
				if name == "Mean" {
					s /= float64(len(a))
				}
				return s
			}
		}
		return b.applyElementwise(fmt.Sprintf("%s%d", name, len(n.in)), n.in, f, derivs, false)
	}
}

// buildClip clamps to [min, max]: attributes before opset 11, optional inputs 1 and 2 from
// 11 on (constants or computed). The gradient passes where min ≤ x ≤ max.
func buildClip(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 3); err != nil {
		return nil, err
	}
	if b.m.opset < 11 {
		lo := float64(n.attrFloat("min", -math.MaxFloat32))
		hi := float64(n.attrFloat("max", math.MaxFloat32))
		return b.mapValue(fmt.Sprintf("Clip{%g,%g}", lo, hi), n.in[0], func(x float64) float64 {
			return math.Min(math.Max(x, lo), hi)
		}, func(x, _ float64) float64 { return boolOf(x >= lo && x <= hi) })
	}
	in := []value{n.in[0]}
	for k := 1; k <= 2; k++ {
		if n.has(k) {
			if s := n.in[k].shape(); product(s) != 1 {
				return nil, fmt.Errorf("%w: Clip bound %d of shape %v; ONNX wants a scalar", ErrShape, k, s)
			}
			in = append(in, n.in[k])
		} else {
			bound := math.Inf(2*k - 3) // -Inf, +Inf
			in = append(in, value{c: &constant{f: []float64{bound}}})
		}
	}
	return b.applyElementwise("Clip", in, func(a []float64) float64 {
		return math.Min(math.Max(a[0], a[1]), a[2])
	}, []elemDeriv{
		func(a []float64, _ float64) float64 { return boolOf(a[0] >= a[1] && a[0] <= a[2]) },
		func(a []float64, _ float64) float64 { return boolOf(a[0] < a[1]) },
		func(a []float64, _ float64) float64 { return boolOf(a[0] > a[2] && a[0] >= a[1]) },
	}, false)
}

// buildWhere selects x where the condition holds, else y (broadcasting all three). The
// condition gets no gradient.
func buildWhere(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 3, 3); err != nil {
		return nil, err
	}
	return b.applyElementwise("Where", n.in[:3], func(a []float64) float64 {
		if a[0] != 0 {
			return a[1]
		}
		return a[2]
	}, []elemDeriv{nil,
		func(a []float64, _ float64) float64 { return boolOf(a[0] != 0) },
		func(a []float64, _ float64) float64 { return boolOf(a[0] == 0) },
	}, false)
}

// buildCast converts between element types. The graph computes every tensor in one float
// type, so a cast to a float type is the identity (float16 and bfloat16 included: the values
// keep the graph's precision); a cast to an integer type truncates towards zero, to bool
// tests for non-zero, both without gradient; constants are converted exactly.
func buildCast(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	to := n.attrInt("to", 0)
	x := n.in[0]
	switch {
	case isFloatType(int32(to)) || to == 10 || to == 16: // FLOAT16, BFLOAT16
		if x.c != nil && x.c.isInt {
			return []value{{c: &constant{shape: slices.Clone(x.c.shape), f: x.c.floats()}}}, nil
		}
		return []value{x}, nil
	case to == 9: // BOOL
		out, err := b.mapValue("CastBool", x, func(v float64) float64 { return boolOf(v != 0) }, nil)
		if err == nil && out[0].c != nil {
			out[0].c = toIntConst(out[0].c)
		}
		return out, err
	case isIntType(int32(to)) || to == 4 || to == 12 || to == 13: // UINT16, UINT32, UINT64
		if x.c != nil && x.c.isInt {
			return []value{x}, nil
		}
		out, err := b.mapValue("CastInt", x, math.Trunc, nil)
		if err == nil && out[0].c != nil {
			out[0].c = toIntConst(out[0].c)
		}
		return out, err
	}
	return nil, fmt.Errorf("%w: Cast to element type %d", ErrUnsupported, to)
}

func toIntConst(c *constant) *constant {
	out := &constant{shape: c.shape, isInt: true, i: make([]int64, len(c.f))}
	for k, v := range c.f {
		out.i[k] = int64(v)
	}
	return out
}

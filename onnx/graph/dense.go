package graph

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"slices"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Dense layers are fused: a Gemm (alpha = 1, beta = 1, no transA) or a 2-D MatMul followed by
// an Add of a bias row, then a Tanh or Relu, becomes one op y = act(x·op(W) + b) over
// internal/kernels (the matrix kernels the native policies use) with an analytic gradient,
// instead of gorgonia's product, broadcast, add and activation. float64 graphs (the
// finite-difference checks) run the same ops through plain loops. A layer is fused only where
// nothing else reads its intermediate tensors (and none is asked for); where the shapes do
// not fit (an N-D MatMul, a bias that is not a row), its nodes are built one by one.

// dense is one fusable layer: the nodes it replaces, by index in Model.nodes.
type dense struct {
	add, act int // the Add of a MatMul's bias and the activation, or -1
	kind     kernels.Act
	transB   bool
	x, w     string // the product's inputs
	bias     string // the bias, or ""
	out      string // the tensor the fused op computes: the last node's output
}

func attrInt(n *onnxpb.NodeProto, name string, def int64) int64 {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a.GetI()
		}
	}
	return def
}

func attrFloat(n *onnxpb.NodeProto, name string, def float32) float32 {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a.GetF()
		}
	}
	return def
}

// planDense finds the fusable layers among the needed nodes, by the index of their product.
func (m *Model) planDense(need []bool, outputs []string) map[int]*dense {
	readers := map[string][]int{} // tensor → the needed nodes reading it (-1: asked for)
	for _, o := range outputs {
		readers[o] = append(readers[o], -1)
	}
	for k, n := range m.nodes {
		if need[k] {
			for _, in := range slices.Concat(n.GetInput(), m.outer[k]) {
				readers[in] = append(readers[in], k)
			}
		}
	}
	// sole returns the node reading t when it is its only reader, a default-domain node with
	// one output.
	sole := func(t string) (*onnxpb.NodeProto, int, bool) {
		r := readers[t]
		if len(r) != 1 || r[0] < 0 {
			return nil, 0, false
		}
		n := m.nodes[r[0]]
		return n, r[0], (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") && len(n.GetOutput()) == 1
	}
	plans := map[int]*dense{}
	for k, n := range m.nodes {
		if !need[k] || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") || len(n.GetOutput()) != 1 {
			continue
		}
		in := n.GetInput()
		d := &dense{add: -1, act: -1, out: n.GetOutput()[0]}
		switch n.GetOpType() {
		case "Gemm":
			if len(in) < 2 || attrInt(n, "transA", 0) != 0 || attrFloat(n, "alpha", 1) != 1 ||
				(len(in) > 2 && in[2] != "" && attrFloat(n, "beta", 1) != 1) {
				continue
			}
			d.x, d.w, d.transB = in[0], in[1], attrInt(n, "transB", 0) != 0
			if len(in) > 2 {
				d.bias = in[2]
			}
		case "MatMul":
			if len(in) != 2 {
				continue
			}
			d.x, d.w = in[0], in[1]
			if a, j, ok := sole(d.out); ok && a.GetOpType() == "Add" && len(a.GetInput()) == 2 {
				bias := a.GetInput()[1]
				if bias == d.out {
					bias = a.GetInput()[0]
				}
				if bias != d.out {
					d.add, d.bias, d.out = j, bias, a.GetOutput()[0]
				}
			}
		default:
			continue
		}
		if a, j, ok := sole(d.out); ok {
			switch a.GetOpType() {
			case "Tanh":
				d.act, d.kind, d.out = j, kernels.Tanh, a.GetOutput()[0]
			case "Relu":
				d.act, d.kind, d.out = j, kernels.ReLU, a.GetOutput()[0]
			}
		}
		plans[k] = d
	}
	return plans
}

// buildDense builds a planned layer as one op, or reports false when the shapes do not fit.
func (b *builder) buildDense(d *dense) (bool, error) {
	xv, wv := b.env[d.x], b.env[d.w]
	if (xv.n == nil && xv.c == nil) || (wv.n == nil && wv.c == nil) {
		return false, nil
	}
	xs, ws := xv.shape(), wv.shape()
	if len(xs) != 2 || len(ws) != 2 || xv.c != nil {
		return false, nil
	}
	m, k := xs[0], xs[1]
	kw, n := ws[0], ws[1]
	if d.transB {
		n, kw = ws[0], ws[1]
	}
	if kw != k || m == 0 || n == 0 || k == 0 {
		return false, nil
	}
	args := []value{xv, wv}
	if d.bias != "" {
		bv := b.env[d.bias]
		if bv.n == nil && bv.c == nil {
			return false, nil
		}
		if s := bv.shape(); !slices.Equal(s, []int{n}) && !slices.Equal(s, []int{1, n}) {
			return false, nil
		}
		args = append(args, bv)
	}
	nodes := make([]*G.Node, len(args))
	for i, v := range args {
		var err error
		if nodes[i], err = b.toNode(v); err != nil {
			return false, err
		}
	}
	op := &denseOp{act: d.kind, transB: d.transB, m: m, n: n, k: k}
	for _, x := range nodes {
		op.ranks = append(op.ranks, x.Dims())
	}
	y, err := G.ApplyOp(op, nodes...)
	if err != nil {
		return false, err
	}
	b.env[d.out] = value{n: y}
	return true, nil
}

// denseOp is y = act(x·op(W) + b) for x [m, k], W [k, n] (or [n, k] with transB) and b [n]
// or [1, n] (optional).
type denseOp struct {
	act     kernels.Act
	transB  bool
	m, n, k int
	ranks   []int
	out     buffer
}

func (op *denseOp) Arity() int { return len(op.ranks) }
func (op *denseOp) Type() hm.Type {
	ts := make([]hm.Type, 0, len(op.ranks)+1)
	for _, r := range op.ranks {
		ts = append(ts, rankType(r))
	}
	return hm.NewFnType(append(ts, rankType(2))...)
}
func (op *denseOp) ReturnsPtr() bool     { return true }
func (op *denseOp) CallsExtern() bool    { return false }
func (op *denseOp) OverwritesInput() int { return -1 }
func (op *denseOp) String() string {
	return fmt.Sprintf("Dense{act=%d,transB=%t,bias=%t,%dx%dx%d}", op.act, op.transB, len(op.ranks) == 3, op.m, op.k, op.n)
}
func (op *denseOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.graph.", op.String()) }
func (op *denseOp) Hashcode() uint32      { return hashOf(op) }
func (op *denseOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.m, op.n}, nil
}

func (op *denseOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != len(op.ranks) {
		return nil, fmt.Errorf("%w: %s takes %d inputs, got %d", ErrShape, op, len(op.ranks), len(in))
	}
	ldb := op.n
	if op.transB {
		ldb = op.k
	}
	switch x := in[0].(type) {
	case *tensor.Dense:
		if x.Dtype() == tensor.Float64 {
			v, err := denseValues[float64](in, []int{op.m * op.k, op.n * op.k, op.n})
			if err != nil {
				return nil, err
			}
			t, y := getOut[float64](&op.out, op.m, op.n)
			var bias []float64
			if len(v) == 3 {
				bias = v[2]
			}
			gemm64(false, op.transB, op.m, op.n, op.k, v[0], op.k, v[1], ldb, y, bias, false)
			for i := range y {
				y[i] = act64(op.act, y[i])
			}
			return t, nil
		}
	}
	v, err := denseValues[float32](in, []int{op.m * op.k, op.n * op.k, op.n})
	if err != nil {
		return nil, err
	}
	t, y := getOut[float32](&op.out, op.m, op.n)
	var bias []float32
	if len(v) == 3 {
		bias = v[2]
	}
	kernels.Gemm(false, op.transB, op.m, op.n, op.k, v[0], op.k, v[1], ldb, y, op.n, false, bias, op.act)
	return t, nil
}

func (op *denseOp) DiffWRT(inputs int) []bool {
	out := make([]bool, inputs)
	for k := range out {
		out[k] = true
	}
	return out
}

// SymDiff: dz = dy·act'(y); dx = dz·op(W)ᵀ; dW = xᵀ·dz (dzᵀ·x with transB); db = Σ_rows dz.
func (op *denseOp) SymDiff(in G.Nodes, y, dy *G.Node) (G.Nodes, error) {
	dz := dy
	var err error
	if op.act != kernels.None {
		if dz, err = G.ApplyOp(&actGradOp{act: op.act, m: op.m, n: op.n}, y, dy); err != nil {
			return nil, err
		}
	}
	out := make(G.Nodes, len(in))
	// dx [m, k] = dz [m, n] · op(W)ᵀ: W [n, k] with transB, else W [k, n] transposed.
	if out[0], err = G.ApplyOp(&matOp{transB: !op.transB, m: op.m, n: op.k, k: op.n, ranks: [2]int{2, op.ranks[1]}}, dz, in[1]); err != nil {
		return nil, err
	}
	if op.transB { // dW [n, k] = dzᵀ · x
		out[1], err = G.ApplyOp(&matOp{transA: true, m: op.n, n: op.k, k: op.m, ranks: [2]int{2, op.ranks[0]}}, dz, in[0])
	} else { // dW [k, n] = xᵀ · dz
		out[1], err = G.ApplyOp(&matOp{transA: true, m: op.k, n: op.n, k: op.m, ranks: [2]int{op.ranks[0], 2}}, in[0], dz)
	}
	if err != nil {
		return nil, err
	}
	if len(in) == 3 {
		if out[2], err = G.ApplyOp(&colSumOp{m: op.m, n: op.n, rank: op.ranks[2]}, dz); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// matOp is C [m, n] = op(A)·op(B) (a dense layer's gradient products).
type matOp struct {
	transA, transB bool
	m, n, k        int
	ranks          [2]int
	out            buffer
}

func (op *matOp) Arity() int { return 2 }
func (op *matOp) Type() hm.Type {
	return hm.NewFnType(rankType(op.ranks[0]), rankType(op.ranks[1]), rankType(2))
}
func (op *matOp) ReturnsPtr() bool     { return true }
func (op *matOp) CallsExtern() bool    { return false }
func (op *matOp) OverwritesInput() int { return -1 }
func (op *matOp) String() string {
	return fmt.Sprintf("MatMul{transA=%t,transB=%t,%dx%dx%d}", op.transA, op.transB, op.m, op.k, op.n)
}
func (op *matOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.graph.", op.String()) }
func (op *matOp) Hashcode() uint32      { return hashOf(op) }
func (op *matOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.m, op.n}, nil
}
func (op *matOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *matOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrUnsupported, op)
}

func (op *matOp) Do(in ...G.Value) (G.Value, error) {
	lda, ldb := op.k, op.n
	if op.transA {
		lda = op.m
	}
	if op.transB {
		ldb = op.k
	}
	if isFloat64(in[0]) {
		v, err := denseValues[float64](in, []int{op.m * op.k, op.k * op.n})
		if err != nil {
			return nil, err
		}
		t, c := getOut[float64](&op.out, op.m, op.n)
		gemm64(op.transA, op.transB, op.m, op.n, op.k, v[0], lda, v[1], ldb, c, nil, false)
		return t, nil
	}
	v, err := denseValues[float32](in, []int{op.m * op.k, op.k * op.n})
	if err != nil {
		return nil, err
	}
	t, c := getOut[float32](&op.out, op.m, op.n)
	kernels.Gemm(op.transA, op.transB, op.m, op.n, op.k, v[0], lda, v[1], ldb, c, op.n, false, nil, kernels.None)
	return t, nil
}

// actGradOp is dz = dy·act'(x) from y = act(x): (y, dy) → dz.
type actGradOp struct {
	act  kernels.Act
	m, n int
	out  buffer
}

func (op *actGradOp) Arity() int            { return 2 }
func (op *actGradOp) Type() hm.Type         { return hm.NewFnType(rankType(2), rankType(2), rankType(2)) }
func (op *actGradOp) ReturnsPtr() bool      { return true }
func (op *actGradOp) CallsExtern() bool     { return false }
func (op *actGradOp) OverwritesInput() int  { return -1 }
func (op *actGradOp) String() string        { return fmt.Sprintf("ActGrad{%d,%dx%d}", op.act, op.m, op.n) }
func (op *actGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.graph.", op.String()) }
func (op *actGradOp) Hashcode() uint32      { return hashOf(op) }
func (op *actGradOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.m, op.n}, nil
}
func (op *actGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *actGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrUnsupported, op)
}

func (op *actGradOp) Do(in ...G.Value) (G.Value, error) {
	size := op.m * op.n
	if isFloat64(in[0]) {
		v, err := denseValues[float64](in, []int{size, size})
		if err != nil {
			return nil, err
		}
		t, dz := getOut[float64](&op.out, op.m, op.n)
		for i, y := range v[0] {
			switch op.act {
			case kernels.Tanh:
				dz[i] = v[1][i] * (1 - y*y)
			case kernels.ReLU:
				dz[i] = 0
				if y > 0 {
					dz[i] = v[1][i]
				}
			default:
				dz[i] = v[1][i]
			}
		}
		return t, nil
	}
	v, err := denseValues[float32](in, []int{size, size})
	if err != nil {
		return nil, err
	}
	t, dz := getOut[float32](&op.out, op.m, op.n)
	kernels.ActGrad(op.act, v[0], v[1], dz)
	return t, nil
}

// colSumOp sums a matrix's rows: [m, n] → [n] or [1, n] (a bias's gradient).
type colSumOp struct {
	m, n, rank int
	out        buffer
}

func (op *colSumOp) Arity() int            { return 1 }
func (op *colSumOp) Type() hm.Type         { return hm.NewFnType(rankType(2), rankType(op.rank)) }
func (op *colSumOp) ReturnsPtr() bool      { return true }
func (op *colSumOp) CallsExtern() bool     { return false }
func (op *colSumOp) OverwritesInput() int  { return -1 }
func (op *colSumOp) String() string        { return fmt.Sprintf("ColSum{%dx%d,%d}", op.m, op.n, op.rank) }
func (op *colSumOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.graph.", op.String()) }
func (op *colSumOp) Hashcode() uint32      { return hashOf(op) }
func (op *colSumOp) shape() []int {
	if op.rank == 1 {
		return []int{op.n}
	}
	return []int{1, op.n}
}
func (op *colSumOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(op.shape()), nil
}
func (op *colSumOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *colSumOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrUnsupported, op)
}

func (op *colSumOp) Do(in ...G.Value) (G.Value, error) {
	if isFloat64(in[0]) {
		v, err := denseValues[float64](in, []int{op.m * op.n})
		if err != nil {
			return nil, err
		}
		t, dst := getOut[float64](&op.out, op.shape()...)
		clear(dst)
		for i, x := range v[0] {
			dst[i%op.n] += x
		}
		return t, nil
	}
	v, err := denseValues[float32](in, []int{op.m * op.n})
	if err != nil {
		return nil, err
	}
	t, dst := getOut[float32](&op.out, op.shape()...)
	kernels.ColSum(op.m, op.n, v[0], dst, false)
	return t, nil
}

// buffer is an op's own output tensor, kept between runs: allocated on the first run (or
// when the element type changes), reset to its shape if a later op of the run reshaped it in
// place. The tape machine may reuse its memory for other nodes' values later in the same run,
// which is harmless because the op rewrites it whenever it runs.
type buffer struct{ t *tensor.Dense }

func getOut[T float32 | float64](o *buffer, shape ...int) (*tensor.Dense, []T) {
	var zero T
	dt := tensor.Float32
	if _, ok := any(zero).(float64); ok {
		dt = tensor.Float64
	}
	switch {
	case o.t == nil || o.t.Dtype() != dt:
		o.t = tensor.New(tensor.WithShape(shape...), tensor.Of(dt))
	case !o.t.Shape().Eq(tensor.Shape(shape)) || o.t.IsMaterializable():
		o.t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(o.t.Data().([]T)[:product(shape)]))
	}
	return o.t, o.t.Data().([]T)
}

func isFloat64(v G.Value) bool {
	d, ok := v.(tensor.Tensor)
	return ok && d.Dtype() == tensor.Float64
}

// denseValues returns the inputs' contiguous data, checking each holds size[k] values.
func denseValues[T float32 | float64](in []G.Value, sizes []int) ([][]T, error) {
	out := make([][]T, len(in))
	for k, v := range in {
		d, ok := v.(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%w: dense layer input %d is %T", ErrShape, k, v)
		}
		if d.RequiresIterator() || d.IsView() {
			d = d.Materialize().(*tensor.Dense)
		}
		data, ok := d.Data().([]T)
		if !ok || k < len(sizes) && len(data) < sizes[k] {
			return nil, fmt.Errorf("%w: dense layer input %d holds %v (%v)", ErrShape, k, d.Shape(), d.Dtype())
		}
		out[k] = data
	}
	return out, nil
}

// gemm64 is C = op(A)·op(B) (+ bias per column), in float64 loops.
func gemm64(transA, transB bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c, bias []float64, acc bool) {
	for i := range m {
		for j := range n {
			s := 0.0
			if bias != nil {
				s = bias[j]
			}
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if transA {
					ai = p*lda + i
				}
				if transB {
					bi = j*ldb + p
				}
				s += a[ai] * b[bi]
			}
			if acc {
				s += c[i*n+j]
			}
			c[i*n+j] = s
		}
	}
}

func act64(a kernels.Act, x float64) float64 {
	switch a {
	case kernels.Tanh:
		return math.Tanh(x)
	case kernels.ReLU:
		return math.Max(x, 0)
	}
	return x
}

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

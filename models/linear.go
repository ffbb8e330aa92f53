package models

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/kernels"
)

// The dense layers of the policy graphs are custom gorgonia ops over internal/kernels: one
// fused op for y = act(x·W + b) and, for its gradient, the activation's derivative, the two
// products and the bias's column sum. Each op belongs to one node of one graph and keeps its
// output tensor between runs, so the tape machine allocates nothing for them; the tape machine
// may reuse that memory for other nodes' values later in the same run, as it does with its own
// registers, which is harmless because every op rewrites its output when it runs.

// output is an op's own result tensor: allocated on the first run (in the memory given to
// writeInto, if any), reset to its shape if a later op of the run reshaped it in place.
type output struct {
	t   *tensor.Dense
	dst []float32 // the memory to write the result into (writeInto), or nil: the op's own
}

func (o *output) get(shape ...int) (*tensor.Dense, []float32) {
	if o.t == nil {
		if o.dst != nil && len(o.dst) == product(shape) {
			o.t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(o.dst))
		} else {
			o.t = tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
		}
	} else if s := o.t.Shape(); len(s) != len(shape) || o.t.IsMaterializable() || !s.Eq(tensor.Shape(shape)) {
		o.t = tensor.New(tensor.WithShape(shape...), tensor.WithBacking(o.t.Float32s()[:product(shape)]))
	}
	return o.t, o.t.Float32s()
}

// writeInto makes the op write its result, of n values, into dst from the next run on: a
// parameter's gradient straight into the policy's flat gradient buffer (see Policy.Backward).
func (o *output) writeInto(dst []float32) {
	o.t, o.dst = nil, dst
}

// writer is an op whose result can be written into memory of the caller's (output.writeInto).
type writer interface{ outputOf() *output }

func (op *gemmOp) outputOf() *output   { return &op.out }
func (op *colSumOp) outputOf() *output { return &op.out }

// matrix returns v's values as a contiguous row-major float32 matrix of the given shape.
func matrix(v G.Value, rows, cols int, what string) ([]float32, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 {
		return nil, fmt.Errorf("%w: %s is %T, want a float32 tensor", ErrShape, what, v)
	}
	if s := d.Shape(); s.TotalSize() != rows*cols || (len(s) == 2 && (s[0] != rows || s[1] != cols)) {
		return nil, fmt.Errorf("%w: %s has shape %v, want [%d %d]", ErrShape, what, s, rows, cols)
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d.Float32s()[:rows*cols], nil
}

func matrixType(arity int) hm.Type {
	t := G.TensorType{Dims: 2, Of: hm.TypeVariable('a')}
	ts := make([]hm.Type, arity+1)
	for i := range ts {
		ts[i] = t
	}
	return hm.NewFnType(ts...)
}

func shape2(d G.DimSizer, what string) (rows, cols int, err error) {
	s, ok := d.(tensor.Shape)
	if !ok || len(s) != 2 {
		return 0, 0, fmt.Errorf("%w: %s has shape %v, want a matrix", ErrShape, what, d)
	}
	return s[0], s[1], nil
}

// linearOp is y = act(x·W + b) for x [batch, in], W [in, out], b [1, out].
type linearOp struct {
	act kernels.Act
	// data marks an input that is data (the observations): no gradient is made for it.
	data bool
	out  output
	// Set by fuseActGrads before differentiation, for a layer whose input x is the output of
	// another Linear with an activation that nothing else reads: this layer's input gradient
	// is made already multiplied by that activation's derivative (dxAct, one product kernel
	// instead of a product and a pass of ActGrad), and the other layer (dyFused) takes the
	// gradient it receives as its dz.
	dxFused bool
	dxAct   kernels.Act
	dyFused bool
}

// linear adds act(x·w + b) to x's graph; data says x is the observations (or a reshaping of
// them), which need no gradient.
func linear(x, w, b *G.Node, act Activation, data bool) (*G.Node, error) {
	op := &linearOp{data: data}
	switch act {
	case Tanh:
		op.act = kernels.Tanh
	case ReLU:
		op.act = kernels.ReLU
	case "":
	default:
		return nil, fmt.Errorf("%w: activation %q", ErrConfig, string(act))
	}
	return G.ApplyOp(op, x, w, b)
}

func (op *linearOp) Arity() int        { return 3 }
func (op *linearOp) Type() hm.Type     { return matrixType(3) }
func (op *linearOp) ReturnsPtr() bool  { return true }
func (op *linearOp) CallsExtern() bool { return false }
func (op *linearOp) OverwritesInput() int {
	return -1
}
func (op *linearOp) String() string {
	return fmt.Sprintf("Linear{act=%d,data=%t}", op.act, op.data)
}
func (op *linearOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.", op.String()) }
func (op *linearOp) Hashcode() uint32      { return hashOf(op) }

func (op *linearOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("%w: Linear takes 3 inputs, got %d", ErrShape, len(in))
	}
	m, k, err := shape2(in[0], "Linear input")
	if err != nil {
		return nil, err
	}
	k2, n, err := shape2(in[1], "Linear weight")
	if err != nil {
		return nil, err
	}
	one, n2, err := shape2(in[2], "Linear bias")
	if err != nil {
		return nil, err
	}
	if k2 != k || one != 1 || n2 != n {
		return nil, fmt.Errorf("%w: Linear of %v by %v plus %v", ErrShape, in[0], in[1], in[2])
	}
	return tensor.Shape{m, n}, nil
}

func (op *linearOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("%w: Linear takes 3 inputs, got %d", ErrShape, len(in))
	}
	s := in[0].Shape()
	ws := in[1].Shape()
	if len(s) != 2 || len(ws) != 2 {
		return nil, fmt.Errorf("%w: Linear of %v by %v", ErrShape, s, ws)
	}
	m, k, n := s[0], s[1], ws[1]
	x, err := matrix(in[0], m, k, "Linear input")
	if err != nil {
		return nil, err
	}
	w, err := matrix(in[1], k, n, "Linear weight")
	if err != nil {
		return nil, err
	}
	b, err := matrix(in[2], 1, n, "Linear bias")
	if err != nil {
		return nil, err
	}
	t, y := op.out.get(m, n)
	kernels.Linear(m, n, k, x, w, b, y, op.act)
	return t, nil
}

func (op *linearOp) DiffWRT(inputs int) []bool { return []bool{!op.data, true, true} }

// SymDiff: dz = dy·act'(y); dW = xᵀ·dz; db = Σ_rows dz; dx = dz·Wᵀ (none for data).
func (op *linearOp) SymDiff(in G.Nodes, y, dy *G.Node) (G.Nodes, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("%w: Linear takes 3 inputs, got %d", ErrShape, len(in))
	}
	x, w := in[0], in[1]
	dz := dy
	var err error
	switch {
	case op.act == kernels.None:
	case op.dyFused:
		// dy is the next layer's input gradient, made with act'(y) applied (fuseActGrads).
		if g, ok := dy.Op().(*gemmOp); !ok || !g.withY || g.dact != op.act || nthChild(dy, 2) != y {
			return nil, fmt.Errorf("%w: the gradient of %s's output is %v, not the next layer's product with act'", ErrGraph, op, dy.Op())
		}
	default:
		if dz, err = G.ApplyOp(&actGradOp{act: op.act}, y, dy); err != nil {
			return nil, err
		}
	}
	dw, err := G.ApplyOp(&gemmOp{transA: true}, x, dz)
	if err != nil {
		return nil, err
	}
	db, err := G.ApplyOp(&colSumOp{}, dz)
	if err != nil {
		return nil, err
	}
	var dx *G.Node
	switch {
	case op.data:
	case op.dxFused:
		if dx, err = G.ApplyOp(&gemmOp{transB: true, withY: true, dact: op.dxAct}, dz, w, x); err != nil {
			return nil, err
		}
	default:
		if dx, err = G.ApplyOp(&gemmOp{transB: true}, dz, w); err != nil {
			return nil, err
		}
	}
	return G.Nodes{dx, dw, db}, nil
}

// nthChild is node n's input i, or nil.
func nthChild(n *G.Node, i int) *G.Node {
	it := n.Graph().From(n.ID())
	for k := 0; it.Next(); k++ {
		if k == i {
			return it.Node().(*G.Node)
		}
	}
	return nil
}

// fuseActGrads prepares the differentiation of g's dense layers: for each Linear with an
// activation whose output only one node reads, a Linear taking it as its input x (not data),
// the reader's input gradient will be made with the activation's derivative applied by the
// product kernel (kernels.GemmActGrad), and the first layer will take it as its dz, saving
// ActGrad's pass and buffer. The values are the bits of the separate ops. Call it before G.Grad.
func fuseActGrads(g *G.ExprGraph) {
	for _, n := range g.AllNodes() {
		op, ok := n.Op().(*linearOp)
		if !ok || op.act == kernels.None {
			continue
		}
		readers := g.To(n.ID())
		if readers.Len() != 1 || !readers.Next() {
			continue
		}
		r := readers.Node().(*G.Node)
		rop, ok := r.Op().(*linearOp)
		if !ok || rop.data || nthChild(r, 0) != n || nthChild(r, 1) == n || nthChild(r, 2) == n {
			continue
		}
		rop.dxFused, rop.dxAct, op.dyFused = true, op.act, true
	}
}

// gemmOp is op(A)·op(B) (the products of a Linear's gradient); withY, it takes a third input
// Y, an activation's output of the product's shape, and multiplies the product by dact'(Y)
// (kernels.GemmActGrad).
type gemmOp struct {
	transA, transB bool
	withY          bool
	dact           kernels.Act
	out            output
}

func (op *gemmOp) Arity() int {
	if op.withY {
		return 3
	}
	return 2
}
func (op *gemmOp) Type() hm.Type        { return matrixType(op.Arity()) }
func (op *gemmOp) ReturnsPtr() bool     { return true }
func (op *gemmOp) CallsExtern() bool    { return false }
func (op *gemmOp) OverwritesInput() int { return -1 }
func (op *gemmOp) String() string {
	if op.withY {
		return fmt.Sprintf("Gemm{transA=%t,transB=%t,dact=%d}", op.transA, op.transB, op.dact)
	}
	return fmt.Sprintf("Gemm{transA=%t,transB=%t}", op.transA, op.transB)
}
func (op *gemmOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.", op.String()) }
func (op *gemmOp) Hashcode() uint32      { return hashOf(op) }

// dims are m, n, k of op(A) [m, k] · op(B) [k, n] from the stored shapes of A and B.
func (op *gemmOp) dims(ar, ac, br, bc int) (m, n, k int, err error) {
	m, k = ar, ac
	if op.transA {
		m, k = ac, ar
	}
	k2, n := br, bc
	if op.transB {
		k2, n = bc, br
	}
	if k != k2 {
		return 0, 0, 0, fmt.Errorf("%w: %s of [%d %d] and [%d %d]", ErrShape, op, ar, ac, br, bc)
	}
	return m, n, k, nil
}

func (op *gemmOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("%w: %s takes %d inputs, got %d", ErrShape, op, op.Arity(), len(in))
	}
	ar, ac, err := shape2(in[0], "Gemm A")
	if err != nil {
		return nil, err
	}
	br, bc, err := shape2(in[1], "Gemm B")
	if err != nil {
		return nil, err
	}
	m, n, _, err := op.dims(ar, ac, br, bc)
	if err == nil && op.withY {
		if yr, yc, yerr := shape2(in[2], "Gemm Y"); yerr != nil || yr != m || yc != n {
			return nil, fmt.Errorf("%w: %s of [%d %d] with Y %v", ErrShape, op, m, n, in[2])
		}
	}
	return tensor.Shape{m, n}, err
}

func (op *gemmOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("%w: %s takes %d inputs, got %d", ErrShape, op, op.Arity(), len(in))
	}
	as, bs := in[0].Shape(), in[1].Shape()
	if len(as) != 2 || len(bs) != 2 {
		return nil, fmt.Errorf("%w: %s of %v and %v", ErrShape, op, as, bs)
	}
	m, n, k, err := op.dims(as[0], as[1], bs[0], bs[1])
	if err != nil {
		return nil, err
	}
	a, err := matrix(in[0], as[0], as[1], "Gemm A")
	if err != nil {
		return nil, err
	}
	b, err := matrix(in[1], bs[0], bs[1], "Gemm B")
	if err != nil {
		return nil, err
	}
	t, c := op.out.get(m, n)
	if op.withY {
		y, err := matrix(in[2], m, n, "Gemm Y")
		if err != nil {
			return nil, err
		}
		kernels.GemmActGrad(op.transA, op.transB, m, n, k, a, max(as[1], 1), b, max(bs[1], 1), c, max(n, 1), y, max(n, 1), op.dact)
		return t, nil
	}
	kernels.Gemm(op.transA, op.transB, m, n, k, a, max(as[1], 1), b, max(bs[1], 1), c, max(n, 1), false, nil, kernels.None)
	return t, nil
}

func (op *gemmOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *gemmOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrGraph, op)
}

// actGradOp is dz = dy·act'(x) from y = act(x): (y, dy) → dz.
type actGradOp struct {
	act kernels.Act
	out output
}

func (op *actGradOp) Arity() int           { return 2 }
func (op *actGradOp) Type() hm.Type        { return matrixType(2) }
func (op *actGradOp) ReturnsPtr() bool     { return true }
func (op *actGradOp) CallsExtern() bool    { return false }
func (op *actGradOp) OverwritesInput() int { return -1 }
func (op *actGradOp) String() string       { return fmt.Sprintf("ActGrad{act=%d}", op.act) }
func (op *actGradOp) WriteHash(h hash.Hash) {
	fmt.Fprint(h, "towerrl.", op.String())
}
func (op *actGradOp) Hashcode() uint32 { return hashOf(op) }

func (op *actGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("%w: ActGrad takes 2 inputs, got %d", ErrShape, len(in))
	}
	m, n, err := shape2(in[0], "ActGrad output")
	if err != nil {
		return nil, err
	}
	m2, n2, err := shape2(in[1], "ActGrad gradient")
	if err != nil {
		return nil, err
	}
	if m2 != m || n2 != n {
		return nil, fmt.Errorf("%w: ActGrad of %v and %v", ErrShape, in[0], in[1])
	}
	return tensor.Shape{m, n}, nil
}

func (op *actGradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("%w: ActGrad takes 2 inputs, got %d", ErrShape, len(in))
	}
	s := in[0].Shape()
	if len(s) != 2 {
		return nil, fmt.Errorf("%w: ActGrad of %v", ErrShape, s)
	}
	y, err := matrix(in[0], s[0], s[1], "ActGrad output")
	if err != nil {
		return nil, err
	}
	dy, err := matrix(in[1], s[0], s[1], "ActGrad gradient")
	if err != nil {
		return nil, err
	}
	t, dz := op.out.get(s[0], s[1])
	kernels.ActGrad(op.act, y, dy, dz)
	return t, nil
}

func (op *actGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *actGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrGraph, op)
}

// colSumOp sums a matrix's rows: [m, n] → [1, n] (a bias's gradient).
type colSumOp struct{ out output }

func (op *colSumOp) Arity() int            { return 1 }
func (op *colSumOp) Type() hm.Type         { return matrixType(1) }
func (op *colSumOp) ReturnsPtr() bool      { return true }
func (op *colSumOp) CallsExtern() bool     { return false }
func (op *colSumOp) OverwritesInput() int  { return -1 }
func (op *colSumOp) String() string        { return "ColSum" }
func (op *colSumOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.", op.String()) }
func (op *colSumOp) Hashcode() uint32      { return hashOf(op) }

func (op *colSumOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%w: ColSum takes 1 input, got %d", ErrShape, len(in))
	}
	_, n, err := shape2(in[0], "ColSum input")
	return tensor.Shape{1, n}, err
}

func (op *colSumOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%w: ColSum takes 1 input, got %d", ErrShape, len(in))
	}
	s := in[0].Shape()
	if len(s) != 2 {
		return nil, fmt.Errorf("%w: ColSum of %v", ErrShape, s)
	}
	a, err := matrix(in[0], s[0], s[1], "ColSum input")
	if err != nil {
		return nil, err
	}
	t, dst := op.out.get(1, s[1])
	kernels.ColSum(s[0], s[1], a, dst, false)
	return t, nil
}

func (op *colSumOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *colSumOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrGraph, op)
}

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

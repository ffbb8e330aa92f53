package engine

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ppoLossOp is CleanRL's PPO loss as one gorgonia op over rows of
// (logp, entropy, value, advantages, returns, old logp, old values) → the scalar loss:
//
//	loss = mean(max(−A·r, −A·clip(r, 1−ε, 1+ε))) − EntCoef·mean(H) + VfCoef·½·mean(V),
//	r = exp(logp − old logp), V = max((v − R)², (v_clip − R)²) (or (v − R)² without ClipVLoss),
//	v_clip = old v + clip(v − old v, −ε, ε).
//
// One op instead of some sixty small ones (forward and backward) is what keeps a tower's fixed
// cost per minibatch low, and so lets several towers run in parallel. Do also works out each
// row's derivative with respect to logp and v (at ties of the max, the unclipped term's), and
// the three gradient ops only scale those by the incoming gradient. The op belongs to one
// tower's graph: its statistics are those of the graph's last run.
type ppoLossOp struct {
	c         Loss
	rows      int
	valueDims int // 1 for a [rows] value, 2 for [rows, 1]

	dLogp, dValue []float32  // ∂loss/∂logp_i, ∂loss/∂v_i from the last Do
	stats         [6]float64 // ppoStats of the last Do
}

func vecType(dims int) hm.Type { return G.TensorType{Dims: dims, Of: hm.TypeVariable('a')} }

func (op *ppoLossOp) inputTypes() []hm.Type {
	v := vecType(1)
	return []hm.Type{v, v, vecType(op.valueDims), v, v, v, v}
}

func (op *ppoLossOp) Arity() int { return 7 }
func (op *ppoLossOp) Type() hm.Type {
	return hm.NewFnType(append(op.inputTypes(), hm.TypeVariable('a'))...)
}
func (op *ppoLossOp) ReturnsPtr() bool     { return false }
func (op *ppoLossOp) CallsExtern() bool    { return false }
func (op *ppoLossOp) OverwritesInput() int { return -1 }
func (op *ppoLossOp) String() string       { return fmt.Sprintf("PPOLoss%+v", op.c) }
func (op *ppoLossOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op) // one op per tower: never merged across graphs
}
func (op *ppoLossOp) Hashcode() uint32 { return hashOf(op) }

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *ppoLossOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("engine: PPOLoss takes 7 inputs, got %d", len(in))
	}
	for k, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != op.rows {
			return nil, fmt.Errorf("engine: PPOLoss input %d has shape %v, want %d values", k, d, op.rows)
		}
	}
	return tensor.ScalarShape(), nil
}

// floats returns a float32 tensor value's elements.
func floats(v G.Value, n int, what string) ([]float32, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 || d.Shape().TotalSize() != n {
		return nil, fmt.Errorf("engine: PPOLoss %s is %v, want %d float32 values", what, v, n)
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d.Float32s()[:n], nil
}

var ppoInputs = [7]string{"logp", "entropy", "value", "advantages", "returns", "old logp", "old values"}

func (op *ppoLossOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("engine: PPOLoss takes 7 inputs, got %d", len(in))
	}
	var x [7][]float32
	for k := range in {
		var err error
		if x[k], err = floats(in[k], op.rows, ppoInputs[k]); err != nil {
			return nil, err
		}
	}
	return G.NewF32(float32(op.terms(x[0], x[1], x[2], x[3], x[4], x[5], x[6]))), nil
}

// terms works out the loss over the rows' log-probabilities and entropies, with the statistics
// and each row's derivatives with respect to logp and v, and returns the loss.
func (op *ppoLossOp) terms(logp, ent, v, adv, ret, oldLogp, oldV []float32) float64 {
	if op.dLogp == nil {
		op.dLogp, op.dValue = make([]float32, op.rows), make([]float32, op.rows)
	}
	c, n := op.c, float64(op.rows)
	lo, hi := 1-c.ClipCoef, 1+c.ClipCoef
	var pg, vl, h, kl, clipped float64
	for i := range op.rows {
		lr := float64(logp[i]) - float64(oldLogp[i])
		r := math.Exp(lr)
		a := float64(adv[i])
		unclipped, clippedTerm := -a*r, -a*min(max(r, lo), hi)
		if unclipped >= clippedTerm {
			pg += unclipped
			op.dLogp[i] = float32(-a * r / n)
		} else {
			pg += clippedTerm
			op.dLogp[i] = 0
		}
		kl += (r - 1) - lr
		if math.Abs(r-1) > c.ClipCoef {
			clipped++
		}
		d := float64(v[i]) - float64(ret[i])
		term, grad := d*d, 2*d
		if c.ClipVLoss {
			delta := float64(v[i]) - float64(oldV[i])
			dc := float64(oldV[i]) + min(max(delta, -c.ClipCoef), c.ClipCoef) - float64(ret[i])
			if dc*dc > term {
				term = dc * dc
				grad = 0
				if delta > -c.ClipCoef && delta < c.ClipCoef {
					grad = 2 * dc
				}
			}
		}
		vl += term
		op.dValue[i] = float32(c.VfCoef * 0.5 * grad / n)
		h += float64(ent[i])
	}
	pg, vl, h = pg/n, 0.5*vl/n, h/n
	loss := pg - c.EntCoef*h + c.VfCoef*vl
	op.stats = [6]float64{loss, pg, vl, h, kl / n, clipped / n}
	return loss
}

func (op *ppoLossOp) DiffWRT(int) []bool { return []bool{true, true, true, false, false, false, false} }

func (op *ppoLossOp) SymDiff(in G.Nodes, _ *G.Node, dy *G.Node) (G.Nodes, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("engine: PPOLoss takes 7 inputs, got %d", len(in))
	}
	out := make(G.Nodes, 7)
	for k := range 3 {
		g, err := G.ApplyOp(&ppoGradOp{fwd: op, input: k}, in[k], dy)
		if err != nil {
			return nil, err
		}
		out[k] = g
	}
	return out, nil
}

// ppoGradOp is (x, dy) → ∂loss/∂x · dy for input x of a ppoLossOp (0 logp, 1 entropy, 2 value),
// from the derivatives the forward op left.
type ppoGradOp struct {
	fwd   *ppoLossOp
	input int
	out   *tensor.Dense
}

func (op *ppoGradOp) dims() int {
	if op.input == 2 {
		return op.fwd.valueDims
	}
	return 1
}
func (op *ppoGradOp) Arity() int { return 2 }
func (op *ppoGradOp) Type() hm.Type {
	t := vecType(op.dims())
	return hm.NewFnType(t, hm.TypeVariable('a'), t)
}
func (op *ppoGradOp) ReturnsPtr() bool     { return true }
func (op *ppoGradOp) CallsExtern() bool    { return false }
func (op *ppoGradOp) OverwritesInput() int { return -1 }
func (op *ppoGradOp) String() string       { return fmt.Sprintf("PPOLossGrad(%s)", ppoInputs[op.input]) }
func (op *ppoGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op.fwd)
}
func (op *ppoGradOp) Hashcode() uint32 { return hashOf(op) }

func (op *ppoGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("engine: %s takes 2 inputs, got %d", op, len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("engine: %s of %v", op, in[0])
	}
	return s.Clone(), nil
}

func (op *ppoGradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("engine: %s takes 2 inputs, got %d", op, len(in))
	}
	dy, err := scalarGrad(op, in[1])
	if err != nil {
		return nil, err
	}
	if op.out == nil {
		op.out = tensor.New(tensor.WithShape(in[0].Shape().Clone()...), tensor.Of(tensor.Float32))
	}
	dst := op.out.Float32s()
	f := op.fwd
	switch op.input {
	case 0:
		for i, d := range f.dLogp {
			dst[i] = d * dy
		}
	case 1:
		g := float32(-f.c.EntCoef/float64(f.rows)) * dy
		for i := range dst {
			dst[i] = g
		}
	case 2:
		for i, d := range f.dValue {
			dst[i] = d * dy
		}
	}
	return op.out, nil
}

// scalarGrad is the incoming gradient of a scalar loss: a float32 scalar value.
func scalarGrad(op fmt.Stringer, v G.Value) (float32, error) {
	switch g := v.(type) {
	case *G.F32:
		return float32(*g), nil
	case *tensor.Dense:
		if f, ok := g.Data().(float32); ok {
			return f, nil
		}
		return 0, fmt.Errorf("engine: %s: incoming gradient %v", op, g)
	default:
		return 0, fmt.Errorf("engine: %s: incoming gradient %T", op, v)
	}
}

func (op *ppoGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *ppoGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("engine: %s has no gradient", op)
}

// ppoCatLossOp is ppoLossOp over a categorical head's logits [rows, n]: it takes the logits in
// place of logp and entropy, works out the log-softmax, the taken action's log-probability and
// the entropy itself, and differentiates through them in the same pass. It replaces the dozen
// small gorgonia ops (and their per-run allocations) of Policy.LogProb and Policy.Entropy,
// which made a tower's fixed cost and kept the garbage collector busy. Its inputs are
// (logits, value, advantages, returns, old logp, old values); the actions are the tower's,
// written into acts before each run.
type ppoCatLossOp struct {
	ppoLossOp
	n         int
	acts      []int32   // [rows] the actions taken, 0 ≤ a < n
	logp, ent []float32 // [rows] from the last Do
	p         []float32 // [rows, n] softmax of the last Do
	ls        []float32 // [rows, n] log-softmax of the last Do
	dLogits   []float32 // [rows, n] ∂loss/∂logits of the last Do
}

func newPPOCatLossOp(c Loss, rows, n, valueDims int, acts []int32) *ppoCatLossOp {
	return &ppoCatLossOp{
		ppoLossOp: ppoLossOp{c: c, rows: rows, valueDims: valueDims},
		n:         n, acts: acts,
		logp: make([]float32, rows), ent: make([]float32, rows),
		p: make([]float32, rows*n), ls: make([]float32, rows*n), dLogits: make([]float32, rows*n),
	}
}

var ppoCatInputs = [6]string{"logits", "value", "advantages", "returns", "old logp", "old values"}

func (op *ppoCatLossOp) Arity() int { return 6 }
func (op *ppoCatLossOp) Type() hm.Type {
	v := vecType(1)
	return hm.NewFnType(vecType(2), vecType(op.valueDims), v, v, v, v, hm.TypeVariable('a'))
}
func (op *ppoCatLossOp) String() string { return fmt.Sprintf("PPOCategoricalLoss%+v", op.c) }
func (op *ppoCatLossOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op) // one op per tower: never merged across graphs
}
func (op *ppoCatLossOp) Hashcode() uint32 { return hashOf(op) }

func (op *ppoCatLossOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 6 {
		return nil, fmt.Errorf("engine: %s takes 6 inputs, got %d", op, len(in))
	}
	for k, d := range in {
		want := op.rows
		if k == 0 {
			want *= op.n
		}
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != want || (k == 0 && (s.Dims() != 2 || s[1] != op.n)) {
			return nil, fmt.Errorf("engine: %s input %s has shape %v, want %d values", op, ppoCatInputs[k], d, want)
		}
	}
	return tensor.ScalarShape(), nil
}

func (op *ppoCatLossOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 6 {
		return nil, fmt.Errorf("engine: %s takes 6 inputs, got %d", op, len(in))
	}
	var x [6][]float32
	for k := range in {
		want := op.rows
		if k == 0 {
			want *= op.n
		}
		var err error
		if x[k], err = floats(in[k], want, ppoCatInputs[k]); err != nil {
			return nil, err
		}
	}
	logits, n := x[0], op.n
	for i := range op.rows {
		a := int(op.acts[i])
		if a < 0 || a >= n {
			return nil, fmt.Errorf("engine: action %d of row %d is outside [0, %d)", a, i, n)
		}
		z, ls, p := logits[i*n:(i+1)*n], op.ls[i*n:(i+1)*n], op.p[i*n:(i+1)*n]
		m := float64(z[0])
		for _, v := range z[1:] {
			m = max(m, float64(v))
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		var h float64
		for j, v := range z {
			l := float64(v) - lse
			pj := math.Exp(l)
			ls[j], p[j] = float32(l), float32(pj)
			h -= pj * l
		}
		op.logp[i], op.ent[i] = ls[a], float32(h)
	}
	loss := op.terms(op.logp, op.ent, x[1], x[2], x[3], x[4], x[5])
	// ∂loss/∂z_j = ∂loss/∂logp·(1[j=a] − p_j) + ∂loss/∂H·(−p_j(ls_j + H)), ∂loss/∂H = −EntCoef/rows.
	ge := op.c.EntCoef / float64(op.rows)
	for i := range op.rows {
		dl, h := float64(op.dLogp[i]), float64(op.ent[i])
		for j := range n {
			k := i*n + j
			pj := float64(op.p[k])
			d := -dl*pj + ge*pj*(float64(op.ls[k])+h)
			if j == int(op.acts[i]) {
				d += dl
			}
			op.dLogits[k] = float32(d)
		}
	}
	return G.NewF32(float32(loss)), nil
}

func (op *ppoCatLossOp) DiffWRT(int) []bool { return []bool{true, true, false, false, false, false} }

func (op *ppoCatLossOp) SymDiff(in G.Nodes, _ *G.Node, dy *G.Node) (G.Nodes, error) {
	if len(in) != 6 {
		return nil, fmt.Errorf("engine: %s takes 6 inputs, got %d", op, len(in))
	}
	dz, err := G.ApplyOp(&ppoCatGradOp{fwd: op}, in[0], dy)
	if err != nil {
		return nil, err
	}
	dv, err := G.ApplyOp(&ppoGradOp{fwd: &op.ppoLossOp, input: 2}, in[1], dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dz, dv, nil, nil, nil, nil}, nil
}

// ppoCatGradOp is (logits, dy) → ∂loss/∂logits · dy, from the derivatives its forward op left.
type ppoCatGradOp struct {
	fwd *ppoCatLossOp
	out *tensor.Dense
}

func (op *ppoCatGradOp) Arity() int { return 2 }
func (op *ppoCatGradOp) Type() hm.Type {
	return hm.NewFnType(vecType(2), hm.TypeVariable('a'), vecType(2))
}
func (op *ppoCatGradOp) ReturnsPtr() bool     { return true }
func (op *ppoCatGradOp) CallsExtern() bool    { return false }
func (op *ppoCatGradOp) OverwritesInput() int { return -1 }
func (op *ppoCatGradOp) String() string       { return "PPOCategoricalLossGrad(logits)" }
func (op *ppoCatGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op.fwd)
}
func (op *ppoCatGradOp) Hashcode() uint32 { return hashOf(op) }

func (op *ppoCatGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("engine: %s takes 2 inputs, got %d", op, len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("engine: %s of %v", op, in[0])
	}
	return s.Clone(), nil
}

func (op *ppoCatGradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("engine: %s takes 2 inputs, got %d", op, len(in))
	}
	dy, err := scalarGrad(op, in[1])
	if err != nil {
		return nil, err
	}
	if op.out == nil {
		op.out = tensor.New(tensor.WithShape(op.fwd.rows, op.fwd.n), tensor.Of(tensor.Float32))
	}
	dst := op.out.Float32s()
	for k, d := range op.fwd.dLogits {
		dst[k] = d * dy
	}
	return op.out, nil
}

func (op *ppoCatGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *ppoCatGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("engine: %s has no gradient", op)
}

package ppo

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
	c         Coefs
	rows      int
	valueDims int // 1 for a [rows] value, 2 for [rows, 1]

	dLogp, dValue []float32  // ∂loss/∂logp_i, ∂loss/∂v_i from the last Do
	dEnt          []float32  // ∂loss/∂H_i = −EntCoef/rows, the same for every row and run
	stats         [6]float64 // StatNames of the last Do
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
		return nil, fmt.Errorf("ppo: PPOLoss takes 7 inputs, got %d", len(in))
	}
	for k, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != op.rows {
			return nil, fmt.Errorf("ppo: PPOLoss input %d has shape %v, want %d values", k, d, op.rows)
		}
	}
	return tensor.ScalarShape(), nil
}

// floats returns a float32 tensor value's elements.
func floats(v G.Value, n int, what string) ([]float32, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 || d.Shape().TotalSize() != n {
		return nil, fmt.Errorf("ppo: PPOLoss %s is %v, want %d float32 values", what, v, n)
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d.Float32s()[:n], nil
}

var ppoInputs = [7]string{"logp", "entropy", "value", "advantages", "returns", "old logp", "old values"}

func (op *ppoLossOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("ppo: PPOLoss takes 7 inputs, got %d", len(in))
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
		op.dLogp, op.dValue, op.dEnt = make([]float32, op.rows), make([]float32, op.rows), make([]float32, op.rows)
		for i := range op.dEnt {
			op.dEnt[i] = float32(-op.c.EntCoef / float64(op.rows))
		}
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
		return nil, fmt.Errorf("ppo: PPOLoss takes 7 inputs, got %d", len(in))
	}
	out := make(G.Nodes, 7)
	for k, d := range []*[]float32{&op.dLogp, &op.dEnt, &op.dValue} {
		dims := 1
		if k == 2 {
			dims = op.valueDims
		}
		g, err := G.ApplyOp(&lossGradOp{fwd: op, name: ppoInputs[k], dims: dims, d: d}, in[k], dy)
		if err != nil {
			return nil, err
		}
		out[k] = g
	}
	return out, nil
}

// lossGradOp is (x, dy) → ∂loss/∂x · dy for one input x of a fused loss op (ppoLossOp,
// ppoHeadLossOp), from the derivatives the forward op's last Do left in *d.
type lossGradOp struct {
	fwd  *ppoLossOp // the forward op: one per tower, so the hash is too
	name string     // the input's name
	dims int        // the input's rank
	d    *[]float32 // ∂loss/∂x, one value per element of x
	out  *tensor.Dense
}

func (op *lossGradOp) Arity() int { return 2 }
func (op *lossGradOp) Type() hm.Type {
	t := vecType(op.dims)
	return hm.NewFnType(t, hm.TypeVariable('a'), t)
}
func (op *lossGradOp) ReturnsPtr() bool     { return true }
func (op *lossGradOp) CallsExtern() bool    { return false }
func (op *lossGradOp) OverwritesInput() int { return -1 }
func (op *lossGradOp) String() string       { return fmt.Sprintf("PPOLossGrad(%s)", op.name) }
func (op *lossGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op.fwd)
}
func (op *lossGradOp) Hashcode() uint32 { return hashOf(op) }

func (op *lossGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("ppo: %s takes 2 inputs, got %d", op, len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("ppo: %s of %v", op, in[0])
	}
	return s.Clone(), nil
}

func (op *lossGradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("ppo: %s takes 2 inputs, got %d", op, len(in))
	}
	dy, err := scalarGrad(op, in[1])
	if err != nil {
		return nil, err
	}
	if op.out == nil {
		op.out = tensor.New(tensor.WithShape(in[0].Shape().Clone()...), tensor.Of(tensor.Float32))
	}
	dst := op.out.Float32s()
	for i, d := range *op.d {
		dst[i] = d * dy
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
		return 0, fmt.Errorf("ppo: %s: incoming gradient %v", op, g)
	default:
		return 0, fmt.Errorf("ppo: %s: incoming gradient %T", op, v)
	}
}

func (op *lossGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *lossGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("ppo: %s has no gradient", op)
}

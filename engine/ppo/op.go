package ppo

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/engine/internal/fused"
	"github.com/towerrl/towerrl/internal/kernels"
)

// lossTerms is CleanRL's PPO loss over rows of
// (logp, entropy, value, advantages, returns, old logp, old values) → the scalar loss:
//
//	loss = mean(max(−A·r, −A·clip(r, 1−ε, 1+ε))) − EntCoef·mean(H) + VfCoef·½·mean(V),
//	r = exp(logp − old logp), V = max((v − R)², (v_clip − R)²) (or (v − R)² without ClipVLoss),
//	v_clip = old v + clip(v − old v, −ε, ε).
//
// It is the maths of PPO's fused gorgonia ops (headOp, logProbOp): one op instead of some
// sixty small ones (forward and backward) is what keeps a tower's fixed cost per minibatch
// low, and so lets several towers run in parallel. loss also works out each row's derivative
// with respect to logp and v (at ties of the max, the unclipped term's), and the ops' gradient
// ops (fused.GradOp) only scale those by the incoming gradient. The terms belong to one
// tower's op: the statistics are those of its last run.
type lossTerms struct {
	c    Coefs
	rows int

	dLogp, dValue []float32  // ∂loss/∂logp_i, ∂loss/∂v_i from the last run
	dEnt          []float32  // ∂loss/∂H_i = −EntCoef/rows, the same for every row and run
	stats         [7]float64 // StatNames of the last run
	lr, r         []float64  // each row's log-ratio logp − old logp and ratio exp of it
}

func newLossTerms(c Coefs, rows int) lossTerms {
	t := lossTerms{c: c, rows: rows, dLogp: make([]float32, rows), dValue: make([]float32, rows), dEnt: make([]float32, rows),
		lr: make([]float64, rows), r: make([]float64, rows)}
	for i := range t.dEnt {
		t.dEnt[i] = float32(-c.EntCoef / float64(rows))
	}
	return t
}

// ppoInputs name the inputs of the loss after the value, as the ops take them.
var ppoInputs = [...]string{"advantages", "returns", "old logp", "old values"}

// inputs are the ops' value and ppoInputs inputs (the value of rank valueDims).
func (t *lossTerms) inputs(valueDims int) []fused.Input {
	in := []fused.Input{{Name: "value", Dims: valueDims, D: t.dValue}}
	for _, name := range ppoInputs {
		in = append(in, fused.Input{Name: name, Dims: 1})
	}
	return in
}

// loss works out the loss over the rows' log-probabilities and entropies, with the statistics
// and each row's derivatives with respect to logp and v, and returns the loss.
func (t *lossTerms) loss(logp, ent, v, adv, ret, oldLogp, oldV []float32) float64 {
	c, n := t.c, float64(t.rows)
	lo, hi := 1-c.ClipCoef, 1+c.ClipCoef
	var pg, vl, h, kl, oldKL, clipped float64
	for i := range t.rows {
		t.lr[i] = float64(logp[i]) - float64(oldLogp[i])
	}
	// The ratios eight at a time where the CPU allows, math.Exp's bits either way.
	if !kernels.GoExp(t.lr, t.r) {
		for i, lr := range t.lr {
			t.r[i] = math.Exp(lr)
		}
	}
	for i := range t.rows {
		lr, r := t.lr[i], t.r[i]
		a := float64(adv[i])
		unclipped, clippedTerm := -a*r, -a*min(max(r, lo), hi)
		if unclipped >= clippedTerm {
			pg += unclipped
			t.dLogp[i] = float32(-a * r / n)
		} else {
			pg += clippedTerm
			t.dLogp[i] = 0
		}
		kl += (r - 1) - lr
		oldKL -= lr
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
		t.dValue[i] = float32(c.VfCoef * 0.5 * grad / n)
		h += float64(ent[i])
	}
	pg, vl, h = pg/n, 0.5*vl/n, h/n
	loss := pg - c.EntCoef*h + c.VfCoef*vl
	t.stats = [7]float64{loss, pg, vl, h, kl / n, clipped / n, oldKL / n}
	return loss
}

// logProbOp is the loss as one gorgonia op over per-row log-probabilities and entropies:
// (logp, entropy, value, advantages, returns, old logp, old values) → the scalar loss,
// differentiable in the first three.
type logProbOp struct {
	fused.Op
	lossTerms
}

func newLogProbOp(c Coefs, rows, valueDims int) *logProbOp {
	op := &logProbOp{lossTerms: newLossTerms(c, rows)}
	in := append([]fused.Input{{Name: "logp", Dims: 1, D: op.dLogp}, {Name: "entropy", Dims: 1, D: op.dEnt}}, op.inputs(valueDims)...)
	op.Op = fused.NewOp(op, "ppo", rows, in...)
	return op
}

func (op *logProbOp) String() string { return fmt.Sprintf("PPOLoss%+v", op.c) }

func (op *logProbOp) Do(in ...G.Value) (G.Value, error) {
	x, err := op.Values(in)
	if err != nil {
		return nil, err
	}
	return G.NewF32(float32(op.loss(x[0], x[1], x[2], x[3], x[4], x[5], x[6]))), nil
}

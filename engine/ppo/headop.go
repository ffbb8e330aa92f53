package ppo

import (
	"fmt"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/engine/internal/fused"
)

// headOp is PPO's loss over a policy head's distribution outputs (the categorical logits; the
// Gaussian mean and log standard deviation) instead of per-row log-probabilities and
// entropies: it works those out itself (fused.Head), with their gradients, in the same pass.
// It replaces the dozen small gorgonia ops (and their per-run allocations) of Policy.LogProb
// and Policy.Entropy, which made a tower's fixed cost and kept the garbage collector busy. Its
// inputs are the head's k outputs ([rows, width] each), then value, advantages, returns, old
// logp and old values; the actions are the tower's, written into the head before each run.
type headOp struct {
	fused.Op
	lossTerms
	head      fused.Head
	k         int         // the head's inputs
	logp, ent []float32   // [rows] from the last Do
	dIn       [][]float32 // [k][rows·width] ∂loss/∂input of the last Do
}

func newHeadOp(c Coefs, rows, valueDims int, h fused.Head) *headOp {
	op := &headOp{lossTerms: newLossTerms(c, rows), head: h, k: len(h.Inputs()),
		logp: make([]float32, rows), ent: make([]float32, rows)}
	var in []fused.Input
	in, op.dIn = fused.HeadInputs(h, rows)
	op.Op = fused.NewOp(op, "ppo", rows, append(in, op.inputs(valueDims)...)...)
	return op
}

func (op *headOp) String() string {
	return fmt.Sprintf("PPOLoss(%s)%+v", strings.Join(op.head.Inputs(), ","), op.c)
}

func (op *headOp) Do(in ...G.Value) (G.Value, error) {
	x, err := op.Values(in)
	if err != nil {
		return nil, err
	}
	if err := op.head.Forward(x[:op.k], op.logp, op.ent); err != nil {
		return nil, fmt.Errorf("ppo: %w", err)
	}
	r := x[op.k:]
	loss := op.loss(op.logp, op.ent, r[0], r[1], r[2], r[3], r[4])
	op.head.Backward(op.dLogp, -op.c.EntCoef/float64(op.rows), op.dIn)
	return G.NewF32(float32(loss)), nil
}

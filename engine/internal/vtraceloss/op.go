package vtraceloss

import (
	"fmt"
	"math"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/engine/internal/fused"
	"github.com/towerrl/towerrl/engine/vtrace"
	"github.com/towerrl/towerrl/learner"
)

// Kind is which V-trace actor-critic loss an op computes.
type Kind int

const (
	// IMPALA is the IMPALA paper's loss (Espeholt et al. 2018, section 4.2).
	IMPALA Kind = iota
	// APPO is the clipped surrogate of RLlib's and Sample Factory's APPO on V-trace advantages.
	APPO
)

// String is the name the kind's algorithm is registered under.
func (k Kind) String() string {
	switch k {
	case IMPALA:
		return "impala"
	case APPO:
		return "appo"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// StatNames are the statistics of each kind's loss, in order.
func (k Kind) StatNames() []string {
	if k == APPO {
		return []string{"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "rho_mean", "rho_clip_frac"}
	}
	return []string{"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "rho_mean", "rho_clip_frac"}
}

// Coefs are the loss's coefficients.
type Coefs struct {
	Gamma, Lambda float64 // discount; V-trace's λ (1 is the paper's plain V-trace)
	RhoBar, CBar  float64 // V-trace's clipping thresholds ρ̄ (TD terms and the policy gradient) and c̄ (traces)
	ClipCoef      float64 // APPO's ε
	EntCoef       float64 // weight of the entropy bonus
	VfCoef        float64 // weight of the value loss
	KLCoef        float64 // APPO's weight of KL(μ‖π); 0 leaves it out
	// NormAdv standardises the policy-gradient advantages A_s over the loss's rows (a tower's
	// share of a minibatch) before they weigh the policy gradient, as Sample Factory does; the
	// value targets v_s are left as they are.
	NormAdv bool
}

// lossOp is a V-trace actor-critic loss as one gorgonia op over a policy head's outputs (k
// inputs of [rows, width]) and the value ([rows] or [rows, 1]) → the scalar loss. Do works
// out the log-probabilities and entropies, V-trace over the current policy's log-probabilities
// and values, the loss and its statistics, and every input's derivative; the gradient ops
// only scale those by the incoming gradient. The V-trace targets v_s and advantages A_s are
// constants for the gradient (a stop-gradient, as IMPALA's and RLlib's losses have).
//
// The per-row data (actions, behaviour log-probabilities, rewards, episode ends, successor
// values, and for rows in no order the targets of Algorithm.Targets) are Go slices written by
// Loss.Fill before each run. The op belongs to one tower's graph: its outputs are those of
// the graph's last run.
type lossOp struct {
	fused.Op
	kind      Kind
	c         Coefs
	rows      int
	seqLen    int  // 0: rows in no order
	timeMajor bool // loss row of sequence s's step t is t·S+s, not s·seqLen+t
	valueDims int
	head      fused.Head
	k         int // the head's inputs

	// Fill's per-row data, in loss-row order.
	bLogp, rew, term, trunc, next, ret, adv []float32

	// The last Do's results, per loss row.
	logp, ent, vs, pgAdv []float32
	dLogp, dValue        []float32
	dIn                  [][]float32 // [k][rows·width]
	stats                []float64

	// Time-major scratch for vtrace.Compute when seqLen > 0: order[j] is the loss row of
	// time-major index j = t·S+s.
	order                                   []int
	tbLogp, tLogp, tRew, tVal, tTerm, tTrun []float32
	tNext, tLast, tVS, tAdv                 []float32
}

func newLossOp(kind Kind, c Coefs, rows, seqLen int, timeMajor bool, valueDims int, h fused.Head) *lossOp {
	buf := func() []float32 { return make([]float32, rows) }
	op := &lossOp{kind: kind, c: c, rows: rows, seqLen: seqLen, timeMajor: timeMajor, valueDims: valueDims, head: h, k: len(h.Inputs()),
		bLogp: buf(), rew: buf(), term: buf(), trunc: buf(), next: buf(), ret: buf(), adv: buf(),
		logp: buf(), ent: buf(), vs: buf(), pgAdv: buf(), dLogp: buf(), dValue: buf(),
		stats: make([]float64, len(kind.StatNames()))}
	var in []fused.Input
	in, op.dIn = fused.HeadInputs(h, rows)
	op.Op = fused.NewOp(op, kind.String(), rows, append(in, fused.Input{Name: "value", Dims: valueDims, D: op.dValue})...)
	if seqLen > 0 {
		seqs := rows / seqLen
		op.order = make([]int, rows)
		for t := range seqLen {
			for s := range seqs {
				r := s*seqLen + t
				if timeMajor {
					r = t*seqs + s
				}
				op.order[t*seqs+s] = r
			}
		}
		op.tbLogp, op.tLogp, op.tRew, op.tVal, op.tTerm, op.tTrun = buf(), buf(), buf(), buf(), buf(), buf()
		op.tNext, op.tVS, op.tAdv, op.tLast = buf(), buf(), buf(), make([]float32, seqs)
	}
	return op
}

func (op *lossOp) String() string {
	return fmt.Sprintf("VTraceLoss[%s](%s)%+v", op.kind, strings.Join(op.head.Inputs(), ","), op.c)
}

func (op *lossOp) Do(in ...G.Value) (G.Value, error) {
	x, err := op.Values(in)
	if err != nil {
		return nil, err
	}
	loss, err := op.forward(x[:op.k], x[op.k])
	if err != nil {
		return nil, err
	}
	return G.NewF32(float32(loss)), nil
}

// forward works out the loss over the head's inputs and the values v, with the statistics and
// every input's derivative, and returns the loss.
func (op *lossOp) forward(headIn [][]float32, v []float32) (float64, error) {
	if err := op.head.Forward(headIn, op.logp, op.ent); err != nil {
		return 0, fmt.Errorf("%s: %w", op.kind, err)
	}
	if err := op.targets(v); err != nil {
		return 0, err
	}
	loss := op.terms(v)
	op.head.Backward(op.dLogp, -op.c.EntCoef/float64(op.rows), op.dIn)
	return loss, nil
}

// targets writes each row's V-trace target v_s (op.vs) and policy-gradient advantage A_s
// (op.pgAdv) under the current log-probabilities op.logp and values v. For sequences it runs
// vtrace.Compute over them time-major: inside a sequence the successor's value is the current
// critic's; at a sequence's last step and at a truncation it is the behaviour policy's
// (NextValues), at a termination 0. For rows in no order, v_s is the row's Returns and A_s
// its Advantages scaled by min(ρ̄, ρ_s).
func (op *lossOp) targets(v []float32) error {
	if op.seqLen == 0 {
		copy(op.vs, op.ret)
		for k := range op.rows {
			rho := math.Exp(float64(op.logp[k]) - float64(op.bLogp[k]))
			op.pgAdv[k] = float32(min(op.c.RhoBar, rho) * float64(op.adv[k]))
		}
		if op.c.NormAdv {
			learner.Standardize(op.pgAdv)
		}
		return nil
	}
	seqs := op.rows / op.seqLen
	for j, r := range op.order {
		op.tbLogp[j], op.tLogp[j], op.tRew[j], op.tVal[j] = op.bLogp[r], op.logp[r], op.rew[r], v[r]
		op.tTerm[j], op.tTrun[j], op.tNext[j] = op.term[r], op.trunc[r], op.next[r]
	}
	copy(op.tLast, op.tNext[(op.seqLen-1)*seqs:])
	err := vtrace.Compute(vtrace.Input{T: op.seqLen, N: seqs, BehaviourLogProbs: op.tbLogp, TargetLogProbs: op.tLogp,
		Rewards: op.tRew, Values: op.tVal, Terminated: op.tTerm, Truncated: op.tTrun, FinalValues: op.tNext, LastValues: op.tLast,
		Gamma: op.c.Gamma, Lambda: op.c.Lambda, RhoBar: op.c.RhoBar, CBar: op.c.CBar}, op.tVS, op.tAdv)
	if err != nil {
		return fmt.Errorf("%s: V-trace over %d sequences of %d steps (step = step of a sequence, env = sequence): %w", op.kind, seqs, op.seqLen, err)
	}
	for j, r := range op.order {
		op.vs[r], op.pgAdv[r] = op.tVS[j], op.tAdv[j]
	}
	if op.c.NormAdv {
		learner.Standardize(op.pgAdv)
	}
	return nil
}

// terms works out the loss from the rows' log-probabilities, entropies, values and targets,
// with the statistics and ∂loss/∂logp and ∂loss/∂v per row, and returns the loss:
//
//	IMPALA: −mean(A_s·log π) + VfCoef·½·mean((V − v_s)²) − EntCoef·mean(H)
//	APPO:   mean(max(−A_s·r, −A_s·clip(r, 1−ε, 1+ε))) + VfCoef·½·mean((V − v_s)²) − EntCoef·mean(H)
//	        + KLCoef·mean((r − 1) − log r),   r = π/μ = exp(log π − log μ).
func (op *lossOp) terms(v []float32) float64 {
	c, n := op.c, float64(op.rows)
	lo, hi := 1-c.ClipCoef, 1+c.ClipCoef
	var pg, vl, h, kl, clipped, rhoSum, rhoClipped float64
	for k := range op.rows {
		logp := float64(op.logp[k])
		lr := logp - float64(op.bLogp[k])
		rho := math.Exp(lr)
		a := float64(op.pgAdv[k])
		var dl float64
		switch op.kind {
		case IMPALA:
			pg -= a * logp
			dl = -a / n
		case APPO:
			unclipped, clippedTerm := -a*rho, -a*min(max(rho, lo), hi)
			if unclipped >= clippedTerm {
				pg += unclipped
				dl = -a * rho / n
			} else {
				pg += clippedTerm
			}
			dl += c.KLCoef * (rho - 1) / n
			if math.Abs(rho-1) > c.ClipCoef {
				clipped++
			}
		}
		op.dLogp[k] = float32(dl)
		kl += (rho - 1) - lr
		rhoSum += rho
		if rho > c.RhoBar {
			rhoClipped++
		}
		d := float64(v[k]) - float64(op.vs[k])
		vl += d * d
		op.dValue[k] = float32(c.VfCoef * d / n)
		h += float64(op.ent[k])
	}
	pg, vl, h, kl = pg/n, 0.5*vl/n, h/n, kl/n
	loss := pg + c.VfCoef*vl - c.EntCoef*h
	if op.kind == APPO {
		loss += c.KLCoef * kl
		copy(op.stats, []float64{loss, pg, vl, h, kl, clipped / n, rhoSum / n, rhoClipped / n})
	} else {
		copy(op.stats, []float64{loss, pg, vl, h, kl, rhoSum / n, rhoClipped / n})
	}
	return loss
}

// Package ppo is Proximal Policy Optimization (Schulman et al. 2017) as CleanRL's ppo.py and
// ppo_continuous_action.py define it — clipped surrogate, value loss clipped around the old
// values, entropy bonus — with generalised advantage estimates (Schulman et al. 2016). It
// registers itself with package engine/algo as "ppo".
//
// Each tower computes the loss as one gorgonia op over the policy head's outputs (the logits,
// or the Gaussian mean and log std) with its analytic gradient, built on engine/internal/fused
// (the op's gorgonia boilerplate, the heads, the gradient ops): log-probability, entropy and
// loss in float64 per row (package models/head's distribution maths), no per-run allocation,
// so towers run in parallel without waking the garbage collector. Tests compare it with
// gorgonia's graph of the same maths, ONNX Runtime in float64 and finite differences.
//
// Threading: an Algorithm may be shared; each Loss belongs to one tower's goroutine.
package ppo

import (
	"fmt"
	"math"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/fused"
	"github.com/towerrl/towerrl/learner"
)

func init() {
	algo.Register(Name, New, algo.Capabilities{OnPolicy: true})
	algo.Register(DDPPOName, func(s algo.Settings) (algo.Algorithm, error) {
		p, err := New(s)
		if err != nil {
			return nil, err
		}
		return ddppo{p.(*PPO)}, nil
	}, algo.Capabilities{OnPolicy: true, Ranks: true})
}

// Name is the name PPO is registered under.
const Name = "ppo"

// DDPPOName is the name of DD-PPO (Wijmans et al. 2019): PPO's loss and targets, which the
// engine runs decentralised over the ranks of an MPI job, every rank collecting and computing
// gradients, averaged across the ranks at every minibatch. With one rank it is PPO.
const DDPPOName = "ddppo"

// ddppo is PPO registered under DDPPOName.
type ddppo struct{ *PPO }

func (ddppo) Name() string { return DDPPOName }

// StatNames are the statistics of each update, in order: the loss, its policy, value and
// entropy terms, the approximate KL divergence (mean of (r − 1) − log r), the fraction of
// rows whose ratio left [1 − ε, 1 + ε], and the older, biased KL estimate mean(−log r) that
// CleanRL logs beside it as old_approx_kl (Schulman's k1; approx_kl is his unbiased,
// never negative k3).
var StatNames = []string{"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "old_approx_kl"}

// Coefs are PPO's loss coefficients (defaults are CleanRL's, set by the engine's config).
type Coefs struct {
	ClipCoef  float64 // ε of the clipped surrogate; also clips the value loss when ClipVLoss
	ClipVLoss bool    // clip the value update around the old value, as CleanRL does
	EntCoef   float64 // weight of the entropy bonus
	VfCoef    float64 // weight of the value loss
}

// PPO is the algorithm for the engine's trainer.
type PPO struct {
	Coefs
	Gamma, Lambda float64
}

// New makes PPO from the run's settings.
func New(s algo.Settings) (algo.Algorithm, error) {
	switch {
	case !(s.Gamma >= 0 && s.Gamma <= 1) || !(s.Lambda >= 0 && s.Lambda <= 1):
		return nil, fmt.Errorf("ppo: gamma %v and lambda %v must be in [0, 1]", s.Gamma, s.Lambda)
	case !(s.ClipCoef > 0) || math.IsInf(s.ClipCoef, 0):
		return nil, fmt.Errorf("ppo: clip coefficient %v must be positive", s.ClipCoef)
	case math.IsNaN(s.EntCoef) || math.IsNaN(s.VfCoef) || math.IsInf(s.EntCoef, 0) || math.IsInf(s.VfCoef, 0):
		return nil, fmt.Errorf("ppo: entropy and value coefficients must be finite (%v, %v)", s.EntCoef, s.VfCoef)
	}
	return &PPO{Coefs: Coefs{ClipCoef: s.ClipCoef, ClipVLoss: s.ClipVLoss, EntCoef: s.EntCoef, VfCoef: s.VfCoef},
		Gamma: s.Gamma, Lambda: s.Lambda}, nil
}

// Name implements algo.Algorithm.
func (p *PPO) Name() string { return Name }

// StatNames implements algo.Algorithm.
func (p *PPO) StatNames() []string { return slices.Clone(StatNames) }

// RowMean implements algo.RowMean: the loss and its statistics are means of per-row terms.
func (p *PPO) RowMean() {}

// Columns implements algo.ColumnReader: the columns Loss.Fill reads.
func (p *PPO) Columns() learner.Columns {
	return learner.ColLogP | learner.ColValues | learner.ColAdvantages | learner.ColReturns
}

// Targets implements algo.Algorithm: GAE advantages and returns.
func (p *PPO) Targets(r algo.Rollout, adv, ret []float32) error {
	return GAE(GAEInput{T: r.T, N: r.N, Rewards: r.Rewards, Values: r.Values, Terminated: r.Terminated, Truncated: r.Truncated,
		FinalValues: r.FinalValues, LastValues: r.LastValues, Gamma: p.Gamma, Lambda: p.Lambda}, adv, ret)
}

// Loss implements algo.Algorithm: one fused op over h's head outputs.
func (p *PPO) Loss(h algo.Heads) (algo.Loss, error) { return NewLoss(h, p.Coefs) }

// Loss is PPO's loss over one tower's heads, with the buffers it reads.
type Loss struct {
	pol                       *fused.Binding // the head, with the actions it reads
	rows                      int
	adv, ret, oldLogp, oldVal []float32
	node                      *G.Node
	op                        *headOp
}

// NewLoss adds the PPO loss over h to h's graph. Gorgonia's panics are the caller's to
// recover.
func NewLoss(h algo.Heads, c Coefs) (*Loss, error) {
	g := h.Params.Graph()
	in := func(name string, n int) (*G.Node, []float32) {
		data := make([]float32, n)
		v := tensor.New(tensor.WithShape(n), tensor.WithBacking(data))
		return G.NewTensor(g, tensor.Float32, 1, G.WithShape(n), G.WithName("towerrl."+name), G.WithValue(v)), data
	}
	pol, err := fused.Bind(h)
	if err != nil {
		return nil, fmt.Errorf("ppo: %w", err)
	}
	rows := h.Rows
	l := &Loss{pol: pol, rows: rows}
	var adv, ret, oldLogp, oldVal *G.Node
	adv, l.adv = in("advantages", rows)
	ret, l.ret = in("returns", rows)
	oldLogp, l.oldLogp = in("old_logp", rows)
	oldVal, l.oldVal = in("old_values", rows)
	l.op = newHeadOp(c, rows, h.Value.Dims(), pol.Head)
	ins := append(slices.Clip(pol.Nodes), h.Value, adv, ret, oldLogp, oldVal)
	l.node = G.Must(G.ApplyOp(l.op, ins...))
	return l, nil
}

// Node implements algo.Loss.
func (l *Loss) Node() *G.Node { return l.node }

// Stats implements algo.Loss (StatNames order).
func (l *Loss) Stats(dst []float64) { copy(dst, l.op.stats[:]) }

// LogProbs implements algo.Loss.
func (l *Loss) LogProbs() []float32 { return l.op.logp }

// Fill implements algo.Loss. The op refuses a categorical action outside the head and a
// non-finite Gaussian one, naming the row.
func (l *Loss) Fill(mb *learner.SampleBatch, rowOf func(k int) int) error {
	err := l.pol.Fill(mb, l.rows, rowOf, func(k, r int) {
		l.adv[k], l.ret[k], l.oldLogp[k], l.oldVal[k] = mb.Advantages[r], mb.Returns[r], mb.LogP[r], mb.Values[r]
	})
	if err != nil {
		return fmt.Errorf("ppo: %w", err)
	}
	return nil
}

// LogProbLoss is the same loss as one op over per-row log-probabilities and entropies
// ([rows] each) instead of the head's outputs: the form to compare the fused op with, over
// gorgonia's own graph of the distribution maths. stats writes its last run's statistics.
func LogProbLoss(logp, ent, value, adv, ret, oldLogp, oldVal *G.Node, rows int, c Coefs) (loss *G.Node, stats func([]float64), err error) {
	op := newLogProbOp(c, rows, value.Dims())
	n, err := G.ApplyOp(op, logp, ent, value, adv, ret, oldLogp, oldVal)
	if err != nil {
		return nil, nil, err
	}
	return n, func(dst []float64) { copy(dst, op.stats[:]) }, nil
}

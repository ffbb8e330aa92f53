package vtraceloss

import (
	"fmt"
	"math"
	"slices"
	"sync"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/fused"
	"github.com/towerrl/towerrl/engine/vtrace"
	"github.com/towerrl/towerrl/learner"
)

// Algorithm is IMPALA or APPO for the engine's trainer: an algo.Algorithm and algo.Sequential.
type Algorithm struct {
	kind Kind
	c    Coefs

	mu    sync.Mutex // guards zeros
	zeros []float32  // log-probabilities of 0 (ρ = 1) for Targets, grown as needed
}

// New makes the algorithm of kind from the run's settings: RhoBar and CBar 0 mean 1;
// ClipCoef is read by APPO only (and must then be positive), KLCoef too; ClipVLoss is
// ignored (neither loss clips the value update).
func New(kind Kind, s algo.Settings) (*Algorithm, error) {
	if kind != IMPALA && kind != APPO {
		return nil, fmt.Errorf("vtraceloss: unknown %v", kind)
	}
	c := Coefs{Gamma: s.Gamma, Lambda: s.Lambda, RhoBar: s.RhoBar, CBar: s.CBar, EntCoef: s.EntCoef, VfCoef: s.VfCoef,
		NormAdv: s.NormalizeAdvantages}
	if c.RhoBar == 0 {
		c.RhoBar = 1
	}
	if c.CBar == 0 {
		c.CBar = 1
	}
	if kind == APPO {
		c.ClipCoef, c.KLCoef = s.ClipCoef, s.KLCoef
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !(c.Gamma >= 0 && c.Gamma <= 1) || !(c.Lambda >= 0 && c.Lambda <= 1):
		return nil, fmt.Errorf("%s: gamma %v and lambda %v must be in [0, 1]", kind, c.Gamma, c.Lambda)
	case !(c.RhoBar > 0) || !(c.CBar > 0) || !finite(c.RhoBar) || !finite(c.CBar):
		return nil, fmt.Errorf("%s: V-trace's rho_bar %v and c_bar %v must be finite and positive (IMPALA uses 1)", kind, c.RhoBar, c.CBar)
	case kind == APPO && (!(c.ClipCoef > 0) || !finite(c.ClipCoef)):
		return nil, fmt.Errorf("%s: clip coefficient %v must be positive", kind, c.ClipCoef)
	case !(c.KLCoef >= 0) || !finite(c.KLCoef):
		return nil, fmt.Errorf("%s: KL coefficient %v must be finite and ≥ 0", kind, c.KLCoef)
	case !finite(c.EntCoef) || !finite(c.VfCoef):
		return nil, fmt.Errorf("%s: entropy and value coefficients must be finite (%v, %v)", kind, c.EntCoef, c.VfCoef)
	}
	return &Algorithm{kind: kind, c: c}, nil
}

// Coefs are the coefficients the algorithm's losses use (defaults filled).
func (a *Algorithm) Coefs() Coefs { return a.c }

// Name implements algo.Algorithm.
func (a *Algorithm) Name() string { return a.kind.String() }

// StatNames implements algo.Algorithm.
func (a *Algorithm) StatNames() []string { return a.kind.StatNames() }

// Sequences implements algo.Sequential: V-trace runs over whole time-ordered sequences.
func (a *Algorithm) Sequences() bool { return true }

// Defaults implements algo.Defaulter. APPO, discrete actions: sequences of 4 steps, 3 passes
// over each rollout (PPO's epochs), GAE's λ = 0.95, 600k steps; Box actions: 4 passes.
// IMPALA, whose loss has no trust region: 2 passes at a learning rate of 1e-4 (discrete
// actions), λ = 1 (the paper's), over 1M steps. Measured on CartPole-v1 (100-episode
// deterministic evaluations, advantages standardised, 4 envs × 128 steps, 4 minibatches, 2
// cores); an asynchronous run is not reproducible, so a seed's result varies between runs:
//   - APPO's minibatches hold whole sequences: with sequences of 32, a minibatch is 4 of them,
//     many hold no episode end, and standardised, their advantages (nearly all positive while
//     the critic lags) become noise. Runs then collapse to 115–334 on some seeds, most of all
//     on a quiet machine. Sequences of 32 (the default before), 4 passes, 500k: ≥ 475 on
//     45 of 61 quiet runs over three sittings (2.0–2.4 s, 1.3–1.6× ppo's env steps/s);
//     3 passes, 600k: 13 of 20 (1.73×); 2 passes, 600k: 4 of 10; 1 pass (RLlib's
//     num_sgd_iter), 600k: 5 of 10, as ppo with 1 epoch (6 of 10). Sequences of 16, 3 passes,
//     600k: 18 of 20 (seeds 20–39); of 8: 33 of 40 (seeds 0–39; 4 passes, 500k: 34 of 40).
//   - Sequences of 4, 3 passes, 600k (the default): ≥ 475 on 56 of 60 seeds (0–59; the
//     others 190–466) in 1.9–2.4 s; run seed by seed right after ppo (500k steps in
//     2.9–3.3 s), 500 on 19 of 20 at 1.48–1.91× ppo's env steps/s (median 1.75×). At 500k,
//     31 of 40 (most others 400–470: too few steps).
//   - IMPALA, 2 passes at 1e-4 after 400k steps: 460–484 on seeds 0–9 (4 of them ≥ 475); after
//     600k 391–492 (6); 3 passes after 600k 421–497 (7); 4 passes after 500k 257–500 (8),
//     after 600k 153–500 (7); 4 passes at λ = 0.95: 132–500 (5). Hence IMPALA's budget of 1M
//     steps: 2 passes at 1e-4 reach ≥ 475 on 11 of seeds 0–19 and 392–473 on the others
//     (2.8–3.3 s each); at 500k on 3 of 10. At 2e-4, 1M: 14 of 20, the others 176–443.
func (a *Algorithm) Defaults(discrete bool) algo.Defaults {
	if a.kind == IMPALA {
		d := algo.Defaults{TotalSteps: 1_000_000, Lambda: 1, Epochs: 2}
		if discrete {
			d.LR = 1e-4
		}
		return d
	}
	if discrete {
		return algo.Defaults{TotalSteps: 600_000, Epochs: 3, SeqLen: 4}
	}
	return algo.Defaults{Epochs: 4}
}

// Targets implements algo.Algorithm: V-trace over the behaviour policy's own values with
// ρ = 1 (the rollout is taken as on-policy, so v_s is the λ-return bootstrapped as GAE is)
// into ret, and the policy-gradient advantages r_s + γ·v_{s+1} − V(x_s) into adv. They are
// the value targets the trainer's metrics read (explained variance), and what the losses
// train on when the rows are in no order (Heads.SeqLen 0); on sequences the losses compute
// V-trace afresh under the current policy.
func (a *Algorithm) Targets(r algo.Rollout, adv, ret []float32) error {
	t, n := r.T, r.N
	if t < 1 || n < 1 || t > math.MaxInt/n {
		return fmt.Errorf("%s: targets of %d steps × %d envs", a.kind, t, n)
	}
	rows := t * n
	for _, c := range [...]struct {
		name string
		s    []float32
	}{{"Rewards", r.Rewards}, {"Values", r.Values}, {"Terminated", r.Terminated}, {"Truncated", r.Truncated},
		{"FinalValues", r.FinalValues}, {"adv", adv}, {"ret", ret}} {
		if len(c.s) < rows {
			return fmt.Errorf("%s: targets: %s holds %d values for %d×%d steps", a.kind, c.name, len(c.s), t, n)
		}
	}
	if len(r.LastValues) < n {
		return fmt.Errorf("%s: targets: LastValues holds %d values for %d envs", a.kind, len(r.LastValues), n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.zeros) < rows {
		a.zeros = make([]float32, rows)
	}
	zeros := a.zeros[:rows]
	err := vtrace.Compute(vtrace.Input{T: t, N: n, BehaviourLogProbs: zeros, TargetLogProbs: zeros,
		Rewards: r.Rewards[:rows], Values: r.Values[:rows], Terminated: r.Terminated[:rows], Truncated: r.Truncated[:rows],
		FinalValues: r.FinalValues[:rows], LastValues: r.LastValues[:n],
		Gamma: a.c.Gamma, Lambda: a.c.Lambda, RhoBar: a.c.RhoBar, CBar: a.c.CBar}, ret[:rows], adv[:rows])
	if err != nil {
		return fmt.Errorf("%s: targets: %w", a.kind, err)
	}
	return nil
}

// Loss implements algo.Algorithm: one fused op over h's head outputs and value.
func (a *Algorithm) Loss(h algo.Heads) (algo.Loss, error) { return NewLoss(a.kind, a.c, h) }

// Loss is a V-trace loss over one tower's heads, with the buffers it reads.
type Loss struct {
	pol  *fused.Binding // the head, with the actions it reads
	rows int
	node *G.Node
	op   *lossOp
}

// NewLoss adds the loss of kind over h to h's graph. h.Rows must be a positive multiple of
// h.SeqLen (when set). Gorgonia's panics are the caller's to recover.
func NewLoss(kind Kind, c Coefs, h algo.Heads) (*Loss, error) {
	switch {
	case h.Params == nil || h.Value == nil:
		return nil, fmt.Errorf("%s: the heads need their params and value nodes", kind)
	case h.Rows < 1:
		return nil, fmt.Errorf("%s: a loss over %d rows", kind, h.Rows)
	case h.SeqLen < 0 || (h.SeqLen > 0 && h.Rows%h.SeqLen != 0):
		return nil, fmt.Errorf("%s: %d rows are not whole sequences of %d steps; give each tower a whole number of sequences", kind, h.Rows, h.SeqLen)
	}
	pol, err := fused.Bind(h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	l := &Loss{pol: pol, rows: h.Rows}
	l.op = newLossOp(kind, c, h.Rows, h.SeqLen, h.TimeMajor, h.Value.Dims(), pol.Head)
	l.node = G.Must(G.ApplyOp(l.op, append(slices.Clip(pol.Nodes), h.Value)...))
	return l, nil
}

// Node implements algo.Loss.
func (l *Loss) Node() *G.Node { return l.node }

// Stats implements algo.Loss (StatNames order).
func (l *Loss) Stats(dst []float64) { copy(dst, l.op.stats) }

// LogProbs implements algo.Loss.
func (l *Loss) LogProbs() []float32 { return l.op.logp }

// Targets are the last run's V-trace targets v_s and policy-gradient advantages A_s, per loss
// row (read-only, valid until the next run).
func (l *Loss) Targets() (vs, adv []float32) { return l.op.vs, l.op.pgAdv }

// Fill implements algo.Loss: loss row k reads minibatch row rowOf(k) (k when rowOf is nil):
// its action, behaviour log-probability (LogP), reward, episode-end flags and NextValues,
// and its Advantages and Returns (read when the rows are in no order). On sequences, loss
// rows must map to whole time-ordered sequences as Heads.SeqLen declared. The op refuses a
// categorical action outside the head and a non-finite Gaussian one, naming the row.
func (l *Loss) Fill(mb *learner.SampleBatch, rowOf func(k int) int) error {
	if rowOf == nil && mb.Len() < l.rows {
		return fmt.Errorf("%s: a loss of %d rows filled from a batch of %d", l.op.kind, l.rows, mb.Len())
	}
	op := l.op
	err := l.pol.Fill(mb, l.rows, rowOf, func(k, r int) {
		op.bLogp[k], op.rew[k], op.term[k], op.trunc[k] = mb.LogP[r], mb.Rewards[r], mb.Terminated[r], mb.Truncated[r]
		op.next[k], op.ret[k], op.adv[k] = mb.NextValues[r], mb.Returns[r], mb.Advantages[r]
	})
	if err != nil {
		return fmt.Errorf("%s: %w", l.op.kind, err)
	}
	return nil
}

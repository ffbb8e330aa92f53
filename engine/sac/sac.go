// Package sac is the update of Soft Actor-Critic (Haarnoja et al. 2018, with automatic
// entropy tuning as in their "SAC algorithms and applications") as Stable-Baselines3's SAC
// computes it: twin Q critics with Polyak-averaged targets, a tanh-squashed Gaussian actor
// whose log standard deviation is an output of the network (state-dependent), bounded by a
// clamp to [−20, 2] (SB3) or squashed by tanh into [−5, 2] (CleanRL), and the entropy
// coefficient α tuned towards the target entropy −|A|.
//
// One [SAC.Update] on a minibatch from a replay buffer (engine/replay), with noise ε′ and ε
// drawn from the caller's RNG:
//
//  1. critics: a′ = tanh(μ(s′) + σ(s′)·ε′), y = r + γ(1 − terminated)·(min_k Q̄_k(s′, a′) −
//     α·log π(a′|s′)), loss ½·Σ_k mean (Q_k(s, a) − y)², one Adam step over both critics;
//  2. actor: a = tanh(μ(s) + σ(s)·ε), loss mean(α·log π(a|s) − min_k Q_k(s, a)) through the
//     updated critics (the gradient with respect to the critics' action input), one Adam step;
//  3. α: loss −mean(log α·(log π(a|s) + target)), one Adam step on log α (SB3's form; α in
//     the losses above is the value before this step, as in SB3);
//  4. every TargetEvery updates, Q̄ ← (1 − τ)·Q̄ + τ·Q.
//
// log π(a|s) = Σ_j [log N(u_j; μ_j, σ_j) − log(1 − a_j² + 10⁻⁶)], u = μ + σ·ε. Actions are
// in [−1, 1]; scaling them to an env's bounds is the acting side's job.
//
// With Config.UseSDE the actor explores with generalized State-Dependent Exploration (gSDE,
// Raffin, Kober and Stulp 2021, as SB3's SAC with use_sde computes it; see sde.go): the
// network outputs only the mean, clipped to [−ClipMean, ClipMean], and the noise is z·W, z
// the actor's last hidden layer (its features, detached) and W a [features, |A|] matrix of
// N(0, σ_kj²) entries, σ = exp(log σ) a parameter matrix of the actor (not a network output),
// W drawn once per update for every row (ε′ and ε above become one matrix of noise).
//
// Steps 1 and 2 each split the minibatch over the learner's towers (learner.Towers: each
// tower's gradient on its rows with the native dense networks of engine/internal/mlp,
// averaged, optionally clipped, applied by learner's Adam), as PPO's minibatches are; the
// actor's towers read the critics' parameters, the critics' towers the actor's, each
// unchanged while the other steps. Both sets of towers run on one learner.Crew, which also
// splits step 4 between its goroutines. The acting side (the batchers' tanh-gaussian head,
// the ONNX export) and the training loop are not here.
//
// Threading: a SAC belongs to one goroutine; Update runs its towers on their own goroutines
// and returns when they are done. The parameter vectors may be read between updates.
package sac

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/internal/mlp"
	"github.com/towerrl/towerrl/engine/internal/offpolicy"
	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/learner"
)

// ErrConfig is wrapped by New's errors about its Config.
var ErrConfig = errors.New("sac: bad config")

// LogStd says how the actor's log standard deviation output is bounded.
type LogStd int

const (
	// Clamp clips it to [LogStdMin, LogStdMax] (SB3; default bounds −20, 2); no gradient
	// flows where it is clipped.
	Clamp LogStd = iota
	// Tanh maps it to LogStdMin + ½(LogStdMax − LogStdMin)(tanh(x) + 1) (CleanRL, SpinUp;
	// default bounds −5, 2).
	Tanh
)

// CriticStatNames are the statistics of the critics' step: the loss, the mean Q-value of
// each critic on the minibatch's actions, and each critic's mean squared error (CleanRL's
// qf1_loss and qf2_loss; the loss is half their sum).
var CriticStatNames = []string{"critic_loss", "q1", "q2", "q1_loss", "q2_loss"}

// ActorStatNames are the statistics of the actor's step: the loss and the mean log π of its
// actions (the entropy's estimate is its negative).
var ActorStatNames = []string{"actor_loss", "logp"}

// Config are SAC's hyper-parameters; zero fields take the defaults given (SB3's SAC's).
type Config struct {
	Hidden               []int       // hidden widths of the actor and of each critic; default 256×256
	Act                  kernels.Act // hidden activation; default (0, kernels.None) means ReLU
	Gamma                float64     // discount; default 0.99
	Tau                  float64     // Polyak coefficient τ in (0, 1]; default 0.005
	TargetEvery          int         // updates between target updates; default 1
	LR                   float64     // the actor's Adam learning rate; default 3e-4
	CriticLR, AlphaLR    float64     // the critics' and α's; default LR
	AdamEps              float64     // Adam's ε; default 1e-8
	MaxGradNorm          float64     // clip each step's gradient by global norm; default 0: none
	LogStd               LogStd      // how the log std is bounded; default Clamp
	LogStdMin, LogStdMax float64     // its bounds; default the LogStd's
	InitAlpha            float64     // α before tuning; default 1
	FixedAlpha           bool        // keep α at InitAlpha (no tuning)
	TargetEntropy        float64     // α's target entropy; default −(action dimensions)
	Minibatch            int         // rows per update; default 256
	Towers               int         // towers each step's minibatch is split over; default 1
	NoSpin               bool        // towers park at once instead of spinning
	// UseSDE explores with gSDE (SB3's use_sde): the actor's log σ is a [last hidden width,
	// |A|] parameter matrix starting at LogStdInit (default −3, SB3's SAC's), the mean is
	// clipped to [−ClipMean, ClipMean] (default 2; negative: not clipped). LogStd and its
	// bounds do not apply.
	UseSDE     bool
	LogStdInit float64
	ClipMean   float64
}

func (c Config) withDefaults(actDim int) (Config, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Hidden == nil {
		c.Hidden = []int{256, 256}
	}
	if c.Act == kernels.None {
		c.Act = kernels.ReLU
	}
	def(&c.Gamma, 0.99)
	def(&c.Tau, 0.005)
	def(&c.LR, 3e-4)
	def(&c.CriticLR, c.LR)
	def(&c.AlphaLR, c.LR)
	def(&c.AdamEps, 1e-8)
	def(&c.InitAlpha, 1)
	def(&c.TargetEntropy, -float64(actDim))
	switch c.LogStd {
	case Clamp:
		def(&c.LogStdMin, -20)
		def(&c.LogStdMax, 2)
	case Tanh:
		def(&c.LogStdMin, -5)
		def(&c.LogStdMax, 2)
	default:
		return c, fmt.Errorf("%w: LogStd = %d", ErrConfig, c.LogStd)
	}
	if c.TargetEvery == 0 {
		c.TargetEvery = 1
	}
	if c.Minibatch == 0 {
		c.Minibatch = 256
	}
	if c.Towers == 0 {
		c.Towers = 1
	}
	if err := c.sdeDefaults(); err != nil {
		return c, err
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !(c.LR > 0) || !(c.CriticLR > 0) || !(c.AlphaLR > 0) || !finite(c.LR+c.CriticLR+c.AlphaLR):
		return c, fmt.Errorf("%w: learning rates %v, %v, %v (LR, CriticLR, AlphaLR) must be positive", ErrConfig, c.LR, c.CriticLR, c.AlphaLR)
	case !(c.LogStdMin < c.LogStdMax) || !finite(c.LogStdMin) || !finite(c.LogStdMax):
		return c, fmt.Errorf("%w: LogStdMin %v must be below LogStdMax %v", ErrConfig, c.LogStdMin, c.LogStdMax)
	case !(c.InitAlpha > 0) || !finite(c.InitAlpha):
		return c, fmt.Errorf("%w: InitAlpha = %v", ErrConfig, c.InitAlpha)
	case !finite(c.TargetEntropy):
		return c, fmt.Errorf("%w: TargetEntropy = %v", ErrConfig, c.TargetEntropy)
	}
	return c, offpolicy.Common{Gamma: c.Gamma, Tau: c.Tau, AdamEps: c.AdamEps, MaxGradNorm: c.MaxGradNorm,
		TargetEvery: c.TargetEvery, Minibatch: c.Minibatch, Towers: c.Towers}.Check(ErrConfig)
}

// SAC holds the actor, the critics and their targets, log α, the optimisers and the towers.
type SAC struct {
	cfg                 Config
	actor, critic       mlp.Net // the critic is one Q_k; the critic vectors hold Q_1 then Q_2
	obsDim, actDim      int
	actorP, criticP     []float32
	target              []float32
	logAlpha            []float32 // [1]
	alpha               float64   // exp(log α) of the update in progress, read by the towers
	actorOpt, criticOpt *learner.Adam
	alphaOpt            *learner.Adam
	actorTw, criticTw   *learner.Towers
	crew                *learner.Crew        // the goroutines of both sets of towers
	polyak              func(i int)          // crew member i's share of the targets' step
	mb                  *learner.SampleBatch // the minibatch in the towers' layout (see pack)
	alphaGrad           []float32
	updates             int64
	sde                 *sdeState // gSDE's matrices; nil without UseSDE
	acting              []float32 // what the batchers act with (Acting): actorP, then gSDE's acting W
}

// Stats report one update.
type Stats struct {
	CriticLoss, Q1, Q2    float64 // the critics' loss and mean Q-values on the minibatch's actions
	Q1Loss, Q2Loss        float64 // each critic's mean squared error (CriticLoss is half their sum)
	ActorLoss, LogP       float64 // the actor's loss and mean log π of its actions
	Alpha                 float64 // α used by this update's losses
	AlphaLoss             float64 // α's loss (0 with FixedAlpha)
	CriticNorm, ActorNorm float64 // the gradients' global norms before clipping
	TargetUpdated         bool    // the critics' targets moved after this update
}

// New makes SAC for observations of obsDim values and actions of actDim, the networks drawn
// from rng (nn.Linear's default initialisation: the actor, then Q_1, then Q_2) and the
// critics copied to their targets.
func New(cfg Config, obsDim, actDim int, rng *rand.Rand) (*SAC, error) {
	if actDim < 1 {
		return nil, fmt.Errorf("%w: %d action dimensions", ErrConfig, actDim)
	}
	cfg, err := cfg.withDefaults(actDim)
	if err != nil {
		return nil, err
	}
	outs := 2 * actDim // the mean, then the log std
	if cfg.UseSDE {
		outs = actDim // the mean; log σ is a parameter matrix
	}
	actor, err := mlp.New(obsDim, cfg.Hidden, outs, cfg.Act)
	if err == nil {
		err = actor.CheckRows(cfg.Minibatch)
	}
	if err != nil {
		return nil, fmt.Errorf("sac: the actor: %w", err)
	}
	critic, err := mlp.New(obsDim+actDim, cfg.Hidden, 1, cfg.Act)
	if err == nil {
		err = critic.CheckRows(cfg.Minibatch)
	}
	if err != nil {
		return nil, fmt.Errorf("sac: the critics: %w", err)
	}
	s := &SAC{cfg: cfg, actor: actor, critic: critic, obsDim: obsDim, actDim: actDim,
		criticP: make([]float32, 2*critic.NumParams()), logAlpha: []float32{float32(math.Log(cfg.InitAlpha))},
		alphaGrad: make([]float32, 1)}
	s.newActing()
	actor.Init(s.actorP[:actor.NumParams()], rng)
	pc := critic.NumParams()
	critic.Init(s.criticP[:pc], rng)
	critic.Init(s.criticP[pc:], rng)
	s.target = append([]float32(nil), s.criticP...)
	s.actorOpt = learner.NewAdam(len(s.actorP), learner.Constant(cfg.LR), 0, 0, cfg.AdamEps)
	s.criticOpt = learner.NewAdam(len(s.criticP), learner.Constant(cfg.CriticLR), 0, 0, cfg.AdamEps)
	s.alphaOpt = learner.NewAdam(1, learner.Constant(cfg.AlphaLR), 0, 0, cfg.AdamEps)
	// Each row's observation and next observation side by side; its action, the actor's
	// noise ε and the critics' target noise ε′.
	s.mb = learner.NewSampleBatch(cfg.Minibatch, 2*obsDim, 3*actDim, 0)
	// One crew for both sets: the critics' step and the actor's follow each other, and each
	// set's goroutines of its own would spin through the other's step while it waits for a CPU.
	s.crew = learner.NewCrew(cfg.Towers, cfg.NoSpin)
	s.polyak = func(i int) {
		lo, hi := i*len(s.target)/cfg.Towers, (i+1)*len(s.target)/cfg.Towers
		mlp.Polyak(s.target[lo:hi], s.criticP[lo:hi], cfg.Tau)
	}
	tc := learner.TowersConfig{N: cfg.Towers, Minibatch: cfg.Minibatch, MaxGradNorm: max(cfg.MaxGradNorm, 0), NoSpin: cfg.NoSpin, Crew: s.crew}
	if s.criticTw, err = learner.NewTowers(tc, s.criticP, s.criticOpt, s.mb, s.criticTower); err != nil {
		return nil, errors.Join(fmt.Errorf("sac: the critics' towers: %w", err), s.crew.Close())
	}
	if s.actorTw, err = learner.NewTowers(tc, s.actorP, s.actorOpt, s.mb, s.actorTower); err != nil {
		return nil, errors.Join(fmt.Errorf("sac: the actor's towers: %w", err), s.criticTw.Close(), s.crew.Close())
	}
	return s, nil
}

// Config is the configuration with its defaults applied.
func (s *SAC) Config() Config { return s.cfg }

// Actor is the actor's shape: its 2·actDim outputs are the mean, then the log std before its
// bound (with UseSDE, its actDim outputs are the mean). Its parameters are the first
// Actor().NumParams() of ActorParams, in engine/internal/mlp's layout.
func (s *SAC) Actor() mlp.Net { return s.actor }

// Critic is one critic's shape (input: the observation, then the action).
func (s *SAC) Critic() mlp.Net { return s.critic }

// ActorParams are the actor's parameters: the network's, then with UseSDE gSDE's log σ
// matrix [features, actDim] row-major.
func (s *SAC) ActorParams() []float32 { return s.actorP }

// CriticParams are Q_1's parameters, then Q_2's.
func (s *SAC) CriticParams() []float32 { return s.criticP }

// TargetParams are the critics' targets, laid out as CriticParams.
func (s *SAC) TargetParams() []float32 { return s.target }

// LogAlpha is log α, one value, tuned by the alpha optimiser.
func (s *SAC) LogAlpha() []float32 { return s.logAlpha }

// Optimizers are the actor's, the critics' and log α's Adam, for checkpoints.
func (s *SAC) Optimizers() (actor, critic, alpha *learner.Adam) {
	return s.actorOpt, s.criticOpt, s.alphaOpt
}

// Updates is the number of updates applied.
func (s *SAC) Updates() int64 { return s.updates }

// SetUpdates restores the update count from a checkpoint: it decides when the targets next move.
func (s *SAC) SetUpdates(n int64) { s.updates = n }

// Update takes one SAC update on b (Config.Minibatch rows), drawing the noise from rng: ε′ for
// every row's next observation (row by row, each row's actDim values in order), then ε for
// every row's observation; with UseSDE, gSDE's matrix ε_W instead (features × actDim values,
// row-major), the noise of every row's actions, W = σ ⊙ ε_W.
func (s *SAC) Update(ctx context.Context, b *replay.Batch, rng *rand.Rand) (Stats, error) {
	if err := s.check(b); err != nil {
		return Stats{}, err
	}
	if s.sde != nil {
		s.sde.drawUpdate(rng)
		return s.update(ctx, b)
	}
	n, a := b.Len(), s.actDim
	for i := range n {
		for j := range a {
			s.mb.Actions[i*3*a+2*a+j] = float32(rng.NormFloat64())
		}
	}
	for i := range n {
		for j := range a {
			s.mb.Actions[i*3*a+a+j] = float32(rng.NormFloat64())
		}
	}
	return s.update(ctx, b)
}

func (s *SAC) check(b *replay.Batch) error {
	switch {
	case b.Len() != s.cfg.Minibatch:
		return fmt.Errorf("sac: a batch of %d rows, the minibatch is %d", b.Len(), s.cfg.Minibatch)
	case b.ObsDim != s.obsDim || b.ActDim != s.actDim:
		return fmt.Errorf("sac: a batch of %d observation and %d action values, want %d and %d", b.ObsDim, b.ActDim, s.obsDim, s.actDim)
	}
	return nil
}

// update is Update with the noise already in s.mb: the four steps in order.
func (s *SAC) update(ctx context.Context, b *replay.Batch) (Stats, error) {
	s.pack(b)
	var st Stats
	if err := s.criticStep(ctx, &st); err != nil {
		return Stats{}, err
	}
	if err := s.actorStep(ctx, &st); err != nil {
		return Stats{}, err
	}
	if err := s.alphaStep(&st); err != nil {
		return Stats{}, err
	}
	s.targetStep(&st)
	return st, nil
}

// pack writes b into s.mb, the towers' layout: Obs row i is b's observation then next
// observation, Actions row i the action then the noises (ε, ε′) already there.
func (s *SAC) pack(b *replay.Batch) {
	n, o, a := b.Len(), s.obsDim, s.actDim
	for i := range n {
		copy(s.mb.Obs[2*i*o:(2*i+1)*o], b.Obs[i*o:(i+1)*o])
		copy(s.mb.Obs[(2*i+1)*o:(2*i+2)*o], b.NextObs[i*o:(i+1)*o])
		copy(s.mb.Actions[i*3*a:i*3*a+a], b.Actions[i*a:(i+1)*a])
	}
	copy(s.mb.Rewards, b.Rewards)
	copy(s.mb.Terminated, b.Terminated)
	_ = s.mb.SetLen(n) // n is the batch's capacity
	s.alpha = math.Exp(float64(s.logAlpha[0]))
	if s.sde != nil {
		s.sde.prepare(s.sdeLogStd())
	}
}

// criticStep is step 1: the critics' gradient on the towers and their Adam step.
func (s *SAC) criticStep(ctx context.Context, st *Stats) error {
	cs, err := s.criticTw.Update(ctx, s.mb, 0, s.mb.Len())
	if err != nil {
		return fmt.Errorf("sac: the critics' step: %w", err)
	}
	st.CriticLoss, st.Q1, st.Q2, st.CriticNorm, st.Alpha = cs.Stats[0], cs.Stats[1], cs.Stats[2], cs.GradNorm, s.alpha
	st.Q1Loss, st.Q2Loss = cs.Stats[3], cs.Stats[4]
	return nil
}

// actorStep is step 2: the actor's gradient through the updated critics and its Adam step.
func (s *SAC) actorStep(ctx context.Context, st *Stats) error {
	as, err := s.actorTw.Update(ctx, s.mb, 0, s.mb.Len())
	if err != nil {
		return fmt.Errorf("sac: the actor's step: %w", err)
	}
	st.ActorLoss, st.LogP, st.ActorNorm = as.Stats[0], as.Stats[1], as.GradNorm
	return nil
}

// alphaStep is step 3: log α's Adam step on −mean(log α·(log π + target)), from the mean
// log π of the actor's step.
func (s *SAC) alphaStep(st *Stats) error {
	if s.cfg.FixedAlpha {
		return nil
	}
	st.AlphaLoss = -float64(s.logAlpha[0]) * (st.LogP + s.cfg.TargetEntropy)
	s.alphaGrad[0] = float32(-(st.LogP + s.cfg.TargetEntropy))
	if err := s.alphaOpt.Step(s.logAlpha, s.alphaGrad); err != nil {
		return fmt.Errorf("sac: α's step: %w", err)
	}
	return nil
}

// targetStep is step 4: counts the update and moves the targets every TargetEvery updates,
// each tower's goroutine a shard of them (element by element: the bits of one pass).
func (s *SAC) targetStep(st *Stats) {
	s.updates++
	if s.updates%int64(s.cfg.TargetEvery) == 0 {
		s.crew.Run(s.polyak)
		st.TargetUpdated = true
	}
}

// Close stops the towers and their crew.
func (s *SAC) Close() error {
	return errors.Join(s.criticTw.Close(), s.actorTw.Close(), s.crew.Close())
}

// head is the actor's squashed Gaussian over a tower's rows: sample makes a row's action and
// log π from the network's outputs and the noise, keeping what backward needs.
type head struct {
	mode   LogStd
	lo, hi float64
	actDim int
	sigEps []float64 // [rows×A] σ·ε
	act    []float64 // [rows×A] a = tanh(u)
	dRaw   []float64 // [rows×A] ∂log σ/∂raw
}

func newHead(c *Config, rows, actDim int) *head {
	return &head{mode: c.LogStd, lo: c.LogStdMin, hi: c.LogStdMax, actDim: actDim,
		sigEps: make([]float64, rows*actDim), act: make([]float64, rows*actDim), dRaw: make([]float64, rows*actDim)}
}

// halfLog2Pi is ½·log(2π).
var halfLog2Pi = 0.5 * math.Log(2*math.Pi)

// sample computes row i's action into a (A values) from the actor's outputs out (2A) and the
// noise eps (A), and returns log π(a|s).
func (h *head) sample(i int, out, eps []float32, a []float32) float64 {
	var logp float64
	for j := range h.actDim {
		mu, raw := float64(out[j]), float64(out[h.actDim+j])
		var ls, d float64
		switch h.mode {
		case Clamp:
			ls, d = min(max(raw, h.lo), h.hi), 0
			if raw >= h.lo && raw <= h.hi {
				d = 1
			}
		case Tanh:
			t := math.Tanh(raw)
			ls, d = h.lo+0.5*(h.hi-h.lo)*(t+1), 0.5*(h.hi-h.lo)*(1-t*t)
		}
		e := float64(eps[j])
		se := math.Exp(ls) * e
		act := math.Tanh(mu + se)
		k := i*h.actDim + j
		h.sigEps[k], h.act[k], h.dRaw[k] = se, act, d
		a[j] = float32(act)
		logp += -0.5*e*e - ls - halfLog2Pi - math.Log(1-act*act+1e-6)
	}
	return logp
}

// backward writes row i's ∂loss/∂(actor outputs) into dOut (2A values) from ∂loss/∂log π
// (dLogp) and ∂loss/∂a (dA, A values).
func (h *head) backward(i int, dLogp float64, dA []float64, dOut []float32) {
	for j := range h.actDim {
		k := i*h.actDim + j
		a := h.act[k]
		g := 1 - a*a
		// log π depends on u through −log(1 − a² + 10⁻⁶), and directly on log σ through −log σ.
		du := dA[j]*g + dLogp*2*a*g/(g+1e-6)
		dOut[j] = float32(du)
		dOut[h.actDim+j] = float32((du*h.sigEps[k] - dLogp) * h.dRaw[k])
	}
}

// criticTower computes the critics' loss's gradient on its rows.
type criticTower struct {
	s      *SAC
	rows   int
	pi     *mlp.Work // the actor on s′
	t1, t2 *mlp.Work // the targets on (s′, a′)
	q1, q2 *mlp.Work // the critics on (s, a)
	head   *head
	sde    *sdeHead // gSDE's head in place of head; nil without UseSDE
	y      []float64
}

func (s *SAC) criticTower(_ int, dev device.Device, rows int, params []float32) (learner.Tower, error) {
	if dev.Kind() != device.KindCPU {
		return nil, fmt.Errorf("sac: towers run on the CPU, not %s", dev)
	}
	return &criticTower{s: s, rows: rows, pi: s.actor.NewWork(rows), t1: s.critic.NewWork(rows), t2: s.critic.NewWork(rows),
		q1: s.critic.NewWork(rows), q2: s.critic.NewWork(rows), head: newHead(&s.cfg, rows, s.actDim), sde: s.newSDEHead(rows),
		y: make([]float64, rows)}, nil
}

func (t *criticTower) StatNames() []string { return CriticStatNames }
func (t *criticTower) Close() error        { return nil }

func (t *criticTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	s := t.s
	n, o, a, ci := mb.Len(), s.obsDim, s.actDim, s.obsDim+s.actDim
	if n != t.rows {
		return fmt.Errorf("sac: a tower of %d rows got %d", t.rows, n)
	}
	pc := s.critic.NumParams()
	for i := range n {
		copy(t.pi.In()[i*o:(i+1)*o], mb.Obs[(2*i+1)*o:(2*i+2)*o])
	}
	s.actor.Forward(s.actorP, t.pi)
	out, in := t.pi.Out(), t.t1.In()
	logp := t.y // log π(a′|s′) until y replaces it
	for i := range n {
		copy(in[i*ci:i*ci+o], mb.Obs[(2*i+1)*o:(2*i+2)*o])
		if t.sde != nil {
			logp[i] = t.sde.sample(i, t.pi, in[i*ci+o:(i+1)*ci])
			continue
		}
		logp[i] = t.head.sample(i, out[i*2*a:(i+1)*2*a], mb.Actions[i*3*a+2*a:(i+1)*3*a], in[i*ci+o:(i+1)*ci])
	}
	copy(t.t2.In(), in)
	s.critic.Forward(s.target[:pc], t.t1)
	s.critic.Forward(s.target[pc:], t.t2)
	g := s.cfg.Gamma
	for i := range n {
		next := min(float64(t.t1.Out()[i]), float64(t.t2.Out()[i])) - s.alpha*logp[i]
		t.y[i] = float64(mb.Rewards[i]) + g*(1-float64(mb.Terminated[i]))*next
		copy(t.q1.In()[i*ci:i*ci+o], mb.Obs[2*i*o:(2*i+1)*o])
		copy(t.q1.In()[i*ci+o:(i+1)*ci], mb.Actions[i*3*a:i*3*a+a])
	}
	copy(t.q2.In(), t.q1.In())
	s.critic.Forward(s.criticP[:pc], t.q1)
	s.critic.Forward(s.criticP[pc:], t.q2)
	var loss, m1, m2, l1, l2 float64
	for i := range n {
		q1, q2 := float64(t.q1.Out()[i]), float64(t.q2.Out()[i])
		d1, d2 := q1-t.y[i], q2-t.y[i]
		loss += 0.5 * (d1*d1 + d2*d2)
		l1 += d1 * d1
		l2 += d2 * d2
		t.q1.DOut()[i], t.q2.DOut()[i] = float32(d1/float64(n)), float32(d2/float64(n))
		m1 += q1
		m2 += q2
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return fmt.Errorf("sac: the critics' loss is %v (non-finite values or rewards)", loss)
	}
	s.critic.Backward(s.criticP[:pc], t.q1, grads[:pc], nil)
	s.critic.Backward(s.criticP[pc:], t.q2, grads[pc:], nil)
	stats[0], stats[1], stats[2], stats[3], stats[4] = loss/float64(n), m1/float64(n), m2/float64(n), l1/float64(n), l2/float64(n)
	return nil
}

// actorTower computes the actor's loss's gradient on its rows.
type actorTower struct {
	s        *SAC
	rows     int
	pi       *mlp.Work // the actor on s
	q1, q2   *mlp.Work // the critics on (s, a)
	dx1, dx2 []float32 // ∂loss/∂(the critics' action inputs), transposed: [A×rows]
	head     *head
	sde      *sdeHead // gSDE's head in place of head; nil without UseSDE
	dA       []float64
}

func (s *SAC) actorTower(_ int, dev device.Device, rows int, params []float32) (learner.Tower, error) {
	if dev.Kind() != device.KindCPU {
		return nil, fmt.Errorf("sac: towers run on the CPU, not %s", dev)
	}
	return &actorTower{s: s, rows: rows, pi: s.actor.NewWork(rows), q1: s.critic.NewWork(rows), q2: s.critic.NewWork(rows),
		dx1: make([]float32, rows*s.actDim), dx2: make([]float32, rows*s.actDim), head: newHead(&s.cfg, rows, s.actDim),
		sde: s.newSDEHead(rows), dA: make([]float64, s.actDim)}, nil
}

func (t *actorTower) StatNames() []string { return ActorStatNames }
func (t *actorTower) Close() error        { return nil }

func (t *actorTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	s := t.s
	n, o, a, ci := mb.Len(), s.obsDim, s.actDim, s.obsDim+s.actDim
	if n != t.rows {
		return fmt.Errorf("sac: a tower of %d rows got %d", t.rows, n)
	}
	pc := s.critic.NumParams()
	for i := range n {
		copy(t.pi.In()[i*o:(i+1)*o], mb.Obs[2*i*o:(2*i+1)*o])
	}
	s.actor.Forward(s.actorP, t.pi)
	out, in := t.pi.Out(), t.q1.In()
	var loss, mlogp float64
	for i := range n {
		copy(in[i*ci:i*ci+o], mb.Obs[2*i*o:(2*i+1)*o])
		var lp float64
		if t.sde != nil {
			lp = t.sde.sample(i, t.pi, in[i*ci+o:(i+1)*ci])
		} else {
			lp = t.head.sample(i, out[i*2*a:(i+1)*2*a], mb.Actions[i*3*a+a:i*3*a+2*a], in[i*ci+o:(i+1)*ci])
		}
		loss += s.alpha * lp
		mlogp += lp
	}
	copy(t.q2.In(), in)
	s.critic.Forward(s.criticP[:pc], t.q1)
	s.critic.Forward(s.criticP[pc:], t.q2)
	inv := 1 / float64(n)
	for i := range n {
		q1, q2 := t.q1.Out()[i], t.q2.Out()[i]
		// The min's gradient goes to the smaller (Q_1 at a tie, as torch.min over the pair).
		if q1 <= q2 {
			loss -= float64(q1)
			t.q1.DOut()[i], t.q2.DOut()[i] = float32(-inv), 0
		} else {
			loss -= float64(q2)
			t.q1.DOut()[i], t.q2.DOut()[i] = 0, float32(-inv)
		}
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return fmt.Errorf("sac: the actor's loss is %v (non-finite values)", loss)
	}
	s.critic.Backward(s.criticP[:pc], t.q1, nil, nil)
	s.critic.InputGradT(s.criticP[:pc], t.q1, o, ci, t.dx1)
	s.critic.Backward(s.criticP[pc:], t.q2, nil, nil)
	s.critic.InputGradT(s.criticP[pc:], t.q2, o, ci, t.dx2)
	dOut := t.pi.DOut()
	for i := range n {
		for j := range a {
			t.dA[j] = float64(t.dx1[j*n+i]) + float64(t.dx2[j*n+i])
		}
		if t.sde != nil {
			t.sde.backward(i, s.alpha*inv, t.dA, dOut[i*a:(i+1)*a])
			continue
		}
		t.head.backward(i, s.alpha*inv, t.dA, dOut[i*2*a:(i+1)*2*a])
	}
	np := s.actor.NumParams()
	s.actor.Backward(s.actorP[:np], t.pi, grads[:np], nil)
	if t.sde != nil {
		t.sde.logStdGrad(t.pi, grads[np:])
	}
	stats[0], stats[1] = loss*inv, mlogp*inv
	return nil
}

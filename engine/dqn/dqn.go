// Package dqn is the update of Deep Q-Networks (Mnih et al. 2015) with Double DQN's target
// (van Hasselt et al. 2016): a Q-network over the observation with one output per discrete
// action, regressed with the Huber loss (PyTorch's smooth_l1_loss, δ = 1, as SB3's DQN) onto
//
//	y = r + γ·(1 − terminated)·Q_target(s′, argmax_a Q(s′, a))
//
// (or max_a Q_target(s′, a), SB3's and CleanRL's target, with Config.Vanilla), where the
// target network follows the online one every TargetEvery updates by Polyak averaging,
// target ← (1 − τ)·target + τ·online (τ = 1, the default, is the hard copy of the original
// DQN).
//
// Each [DQN.Update] is one gradient step on a minibatch sampled from a replay buffer
// (engine/replay): the minibatch is split over the learner's towers (learner.Towers), each
// computes the loss's gradient on its rows with the native dense network of
// engine/internal/mlp, the gradients are averaged, clipped by global norm (SB3's 10 by
// default) and applied by learner's Adam, exactly as PPO's minibatches are. The acting side
// (ε-greedy batchers, the ONNX export) and the training loop are not here.
//
// Threading: a DQN belongs to one goroutine; Update runs its towers on their own goroutines
// and returns when they are done. Params and Target may be read between updates.
package dqn

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
var ErrConfig = errors.New("dqn: bad config")

// StatNames are the statistics of each update, in order: the Huber loss and the mean Q-value
// of the actions taken.
var StatNames = []string{"loss", "q"}

// Config are DQN's hyper-parameters; zero fields take the defaults given (SB3's DQN's where
// it has one).
type Config struct {
	Hidden      []int       // hidden widths; default 64×64
	Act         kernels.Act // hidden activation; default (0, kernels.None) means ReLU
	Gamma       float64     // discount; default 0.99
	LR          float64     // Adam's learning rate; default 1e-4
	AdamEps     float64     // Adam's ε; default 1e-8
	MaxGradNorm float64     // clip the gradient's global norm; default 10, negative: no clipping
	TargetEvery int         // updates between target updates; default 1000
	Tau         float64     // Polyak coefficient τ in (0, 1]; default 1 (hard copy)
	Vanilla     bool        // max_a Q_target(s′, a) instead of Double DQN's target
	Minibatch   int         // rows per update; default 32
	Towers      int         // towers the minibatch is split over; default 1
	NoSpin      bool        // towers park at once instead of spinning (learner.TowersConfig.NoSpin)
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Hidden == nil {
		c.Hidden = []int{64, 64}
	}
	if c.Act == kernels.None {
		c.Act = kernels.ReLU
	}
	def(&c.Gamma, 0.99)
	def(&c.LR, 1e-4)
	def(&c.AdamEps, 1e-8)
	def(&c.MaxGradNorm, 10)
	def(&c.Tau, 1)
	if c.TargetEvery == 0 {
		c.TargetEvery = 1000
	}
	if c.Minibatch == 0 {
		c.Minibatch = 32
	}
	if c.Towers == 0 {
		c.Towers = 1
	}
	if !(c.LR > 0) || math.IsInf(c.LR, 0) {
		return c, fmt.Errorf("%w: LR = %v", ErrConfig, c.LR)
	}
	return c, offpolicy.Common{Gamma: c.Gamma, Tau: c.Tau, AdamEps: c.AdamEps, MaxGradNorm: c.MaxGradNorm,
		TargetEvery: c.TargetEvery, Minibatch: c.Minibatch, Towers: c.Towers}.Check(ErrConfig)
}

// DQN holds the online and target Q-networks, the optimiser and the towers.
type DQN struct {
	cfg            Config
	net            mlp.Net
	obsDim         int
	params, target []float32
	opt            *learner.Adam
	towers         *learner.Towers
	mb             *learner.SampleBatch // the minibatch in the towers' layout (see pack)
	updates        int64
}

// Stats report one update.
type Stats struct {
	Loss, Q       float64 // the Huber loss and the mean Q-value of the actions taken
	GradNorm      float64 // the gradient's global norm before clipping
	TargetUpdated bool    // the target network moved after this update
}

// New makes DQN for observations of obsDim values and actions discrete actions, its
// Q-network drawn from rng (nn.Linear's default initialisation) and copied to the target.
func New(cfg Config, obsDim, actions int, rng *rand.Rand) (*DQN, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	net, err := mlp.New(obsDim, cfg.Hidden, actions, cfg.Act)
	if err == nil {
		err = net.CheckRows(2 * cfg.Minibatch)
	}
	if err != nil {
		return nil, fmt.Errorf("dqn: %w", err)
	}
	d := &DQN{cfg: cfg, net: net, obsDim: obsDim, params: make([]float32, net.NumParams())}
	net.Init(d.params, rng)
	d.target = append([]float32(nil), d.params...)
	d.opt = learner.NewAdam(len(d.params), learner.Constant(cfg.LR), 0, 0, cfg.AdamEps)
	// Each row's observation and next observation side by side; the action's index.
	d.mb = learner.NewSampleBatch(cfg.Minibatch, 2*obsDim, 1, 0)
	clip := max(cfg.MaxGradNorm, 0)
	d.towers, err = learner.NewTowers(learner.TowersConfig{N: cfg.Towers, Minibatch: cfg.Minibatch, MaxGradNorm: clip, NoSpin: cfg.NoSpin},
		d.params, d.opt, d.mb, d.tower)
	if err != nil {
		return nil, fmt.Errorf("dqn: %w", err)
	}
	return d, nil
}

// Config is the configuration with its defaults applied.
func (d *DQN) Config() Config { return d.cfg }

// Net is the Q-network's shape; its parameters are Params, in engine/internal/mlp's layout.
func (d *DQN) Net() mlp.Net { return d.net }

// Params are the online network's parameters (the towers' shared vector).
func (d *DQN) Params() []float32 { return d.params }

// Target are the target network's parameters.
func (d *DQN) Target() []float32 { return d.target }

// Optimizer is the online network's Adam.
func (d *DQN) Optimizer() *learner.Adam { return d.opt }

// Updates is the number of updates applied.
func (d *DQN) Updates() int64 { return d.updates }

// SetUpdates restores the update count (with Params, Target and the optimiser's state) from a
// checkpoint: it decides when the target next moves.
func (d *DQN) SetUpdates(n int64) { d.updates = n }

// Update takes one gradient step on b (Config.Minibatch rows), then moves the target network
// when the update count reaches a multiple of TargetEvery.
func (d *DQN) Update(ctx context.Context, b *replay.Batch) (Stats, error) {
	n, o := b.Len(), d.obsDim
	switch {
	case n != d.cfg.Minibatch:
		return Stats{}, fmt.Errorf("dqn: a batch of %d rows, the minibatch is %d", n, d.cfg.Minibatch)
	case b.ObsDim != o || b.ActDim != 1:
		return Stats{}, fmt.Errorf("dqn: a batch of %d observation and %d action values, want %d and 1", b.ObsDim, b.ActDim, o)
	}
	pack(d.mb, b)
	st, err := d.towers.Update(ctx, d.mb, 0, n)
	if err != nil {
		return Stats{}, fmt.Errorf("dqn: %w", err)
	}
	d.updates++
	s := Stats{Loss: st.Stats[0], Q: st.Stats[1], GradNorm: st.GradNorm}
	if d.updates%int64(d.cfg.TargetEvery) == 0 {
		mlp.Polyak(d.target, d.params, d.cfg.Tau)
		s.TargetUpdated = true
	}
	return s, nil
}

// pack writes b into mb, the towers' layout: Obs row i is b's observation then next
// observation, Actions the action's index, Rewards and Terminated as they are.
func pack(mb *learner.SampleBatch, b *replay.Batch) {
	o, n := b.ObsDim, b.Len()
	for i := range n {
		copy(mb.Obs[2*i*o:(2*i+1)*o], b.Obs[i*o:(i+1)*o])
		copy(mb.Obs[(2*i+1)*o:(2*i+2)*o], b.NextObs[i*o:(i+1)*o])
	}
	copy(mb.Actions, b.Actions[:n*mb.ActDim])
	copy(mb.Rewards, b.Rewards)
	copy(mb.Terminated, b.Terminated)
	_ = mb.SetLen(n) // n is the batch's capacity
}

// Close stops the towers.
func (d *DQN) Close() error { return d.towers.Close() }

// tower is the learner.TowerFactory of d's towers.
func (d *DQN) tower(_ int, dev device.Device, rows int, params []float32) (learner.Tower, error) {
	if dev.Kind() != device.KindCPU {
		return nil, fmt.Errorf("dqn: towers run on the CPU, not %s", dev)
	}
	t := &tower{cfg: &d.cfg, net: d.net, obsDim: d.obsDim, rows: rows, params: params, target: d.target,
		both: d.net.NewWork(rows), tgt: d.net.NewWork(rows)}
	if !d.cfg.Vanilla {
		// Q(s) and Q(s′) in one product of 2·rows rows; only the first half is differentiated.
		t.both = d.net.NewWork(2 * rows)
	}
	t.on = t.both.Prefix(rows)
	return t, nil
}

// tower computes the loss's gradient on its rows.
type tower struct {
	cfg            *Config
	net            mlp.Net
	obsDim, rows   int
	params, target []float32 // shared; read only
	both           *mlp.Work // Q(s), then Q(s′) for Double DQN
	on, tgt        *mlp.Work // Q(s) (both's first rows), Q_target(s′)
}

func (t *tower) StatNames() []string { return StatNames }
func (t *tower) Close() error        { return nil }

func (t *tower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	n, o, na := mb.Len(), t.obsDim, t.net.Out()
	if n != t.rows {
		return fmt.Errorf("dqn: a tower of %d rows got %d", t.rows, n)
	}
	double := !t.cfg.Vanilla
	for i := range n {
		copy(t.on.In()[i*o:(i+1)*o], mb.Obs[2*i*o:(2*i+1)*o])
		copy(t.tgt.In()[i*o:(i+1)*o], mb.Obs[(2*i+1)*o:(2*i+2)*o])
		a := mb.Actions[i]
		if k := int(a); float32(k) != a || k < 0 || k >= na {
			return fmt.Errorf("dqn: row %d's action %v is not one of the %d actions", i, a, na)
		}
	}
	if double {
		copy(t.both.In()[n*o:], t.tgt.In())
	}
	t.net.Forward(t.params, t.both)
	t.net.Forward(t.target, t.tgt)
	q, qt, dq := t.both.Out(), t.tgt.Out(), t.on.DOut()
	clear(dq[:n*na])
	var loss, qsum float64
	for i := range n {
		row := qt[i*na : (i+1)*na]
		k := argmax(row)
		if double {
			k = argmax(q[(n+i)*na : (n+i+1)*na])
		}
		y := float64(mb.Rewards[i]) + t.cfg.Gamma*(1-float64(mb.Terminated[i]))*float64(row[k])
		a := int(mb.Actions[i])
		qa := float64(q[i*na+a])
		d := qa - y
		if math.Abs(d) < 1 {
			loss += 0.5 * d * d
		} else {
			loss += math.Abs(d) - 0.5
		}
		dq[i*na+a] = float32(min(max(d, -1), 1) / float64(n))
		qsum += qa
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return fmt.Errorf("dqn: the loss is %v (non-finite Q-values or rewards)", loss)
	}
	t.net.Backward(t.params, t.on, grads, nil)
	stats[0], stats[1] = loss/float64(n), qsum/float64(n)
	return nil
}

// argmax is the index of the first largest value (torch.argmax's choice at ties).
func argmax(x []float32) int {
	k := 0
	for j, v := range x {
		if v > x[k] {
			k = j
		}
	}
	return k
}

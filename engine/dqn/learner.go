package dqn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/mlp"
	"github.com/towerrl/towerrl/engine/internal/offpolicy"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// Name is the name DQN is registered under (Config.Algo "dqn").
const Name = "dqn"

func init() { algo.RegisterReplay(Name, newLearner, check, algo.Capabilities{}) }

// check refuses settings DQN cannot run with, allocating nothing: a Box action space, or a
// buffer the memory available cannot hold.
func check(s algo.ReplaySettings) error {
	if s.Actions < 1 {
		return fmt.Errorf("%w: DQN acts on a Discrete action space; for continuous actions use sac", ErrConfig)
	}
	return offpolicy.CheckMemory(s.BufferSize, s.ObsDim, 1)
}

// LearnerStatNames are the statistics the engine's loop reports for each update, with
// CleanRL's names: the Huber TD loss and the mean Q-value of the actions taken.
var LearnerStatNames = []string{"td_loss", "q_values"}

// replayLearner is DQN as the engine's off-policy loop drives it (algo.ReplayLearner). Its target
// network moves every TargetEvery env steps, counted over the collections (SB3 counts its
// target_update_interval in env steps, not gradient steps), instead of every TargetEvery
// updates.
type replayLearner struct {
	*DQN
	mem       *offpolicy.Memory
	every     int64 // env steps between target updates
	collected int64 // env steps collected at the last Collected
	explore   algo.LinearSchedule
}

// newLearner makes DQN from the engine's settings.
func newLearner(s algo.ReplaySettings) (algo.ReplayLearner, error) {
	if err := check(s); err != nil {
		return nil, err
	}
	act, err := activation(s.Activation)
	if err != nil {
		return nil, err
	}
	if s.TargetEvery < 1 {
		return nil, fmt.Errorf("%w: target_update_interval = %d env steps, want at least 1", ErrConfig, s.TargetEvery)
	}
	d, err := New(Config{Hidden: s.Hidden, Act: act, Gamma: s.Gamma, LR: s.LR, AdamEps: s.AdamEps, MaxGradNorm: noClip(s.MaxGradNorm),
		TargetEvery: math.MaxInt, Tau: s.Tau, Vanilla: s.MaxTarget, Minibatch: s.Minibatch, Towers: s.Towers, NoSpin: s.NoSpin}, s.ObsDim, s.Actions, s.Rng)
	if err != nil {
		return nil, err
	}
	if s.Init != nil {
		if err := d.Start(s.Init.Params); err != nil {
			return nil, errors.Join(err, d.Close())
		}
	}
	mem, err := offpolicy.NewMemory(s.BufferSize, s.ObsDim, 1, s.Minibatch)
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return &replayLearner{DQN: d, mem: mem, every: int64(s.TargetEvery), explore: s.Explore}, nil
}

// noClip is the engine's "no clipping" (0 or negative) as Config's (negative).
func noClip(v float64) float64 {
	if v <= 0 {
		return -1
	}
	return v
}

// activation maps the config's activation name onto the kernels'.
func activation(name string) (kernels.Act, error) {
	switch name {
	case "relu":
		return kernels.ReLU, nil
	case "tanh":
		return kernels.Tanh, nil
	}
	return kernels.None, fmt.Errorf("%w: activation %q; choose relu or tanh", ErrConfig, name)
}

func (l *replayLearner) StatNames() []string { return LearnerStatNames }

// Add keeps the actions taken (action indices) as they are.
func (l *replayLearner) Add(obs, act, rew, term, trunc, next, final []float32) error {
	return l.mem.Buf.Add(obs, act, rew, term, trunc, next, final)
}

func (l *replayLearner) Buffered() (int, int64, int64) { return l.mem.Filled() }

func (l *replayLearner) Update(ctx context.Context, rng *rand.Rand, stats []float64) error {
	b, err := l.mem.Sample(rng)
	if err != nil {
		return err
	}
	st, err := l.DQN.Update(ctx, b)
	if err != nil {
		return err
	}
	stats[0], stats[1] = st.Loss, st.Q
	return nil
}

// Collected moves the target network once for every multiple of the interval the env steps
// passed since the last call: a hard copy (τ = 1) once, Polyak averaging once per multiple.
func (l *replayLearner) Collected(steps int64) {
	n := steps/l.every - l.collected/l.every
	l.collected = steps
	if l.cfg.Tau == 1 {
		n = min(n, 1)
	}
	for range n {
		mlp.Polyak(l.target, l.params, l.cfg.Tau)
	}
}

func (l *replayLearner) Acting() []float32 { return l.params }

// Exploration is ε after steps env steps: SB3's linear schedule.
func (l *replayLearner) Exploration(steps int64) (float64, bool) { return l.explore.At(steps), true }

func (l *replayLearner) PublishLayout() []bind.Param { return l.net.PublishLayout("q") }
func (l *replayLearner) Head() head.Kind             { return head.QValuesKind }

// Export is the Q-network, greedy (ε = 0): what eval plays. The batchers' ε comes with
// each publish.
func (l *replayLearner) Export(spec head.Spec, version int64) ([]byte, error) {
	return l.DQN.Export(spec, 0, version)
}

// Store adds the env steps of the last target count ("dqn.collected") to DQN's state, and
// the buffer with withBuffer.
func (l *replayLearner) Store(c *models.Checkpoint, withBuffer bool) error {
	if err := l.DQN.Store(c); err != nil {
		return err
	}
	c.Ints["dqn.collected"] = l.collected
	if withBuffer {
		return l.mem.Store(c)
	}
	return nil
}

func (l *replayLearner) Load(c *models.Checkpoint) (bool, error) {
	n, ok := c.Ints["dqn.collected"]
	if !ok || n < 0 {
		return false, fmt.Errorf("dqn: the checkpoint has no count of env steps collected (dqn.collected)")
	}
	if err := l.DQN.Load(c); err != nil {
		return false, err
	}
	l.collected = n
	return l.mem.Load(c)
}

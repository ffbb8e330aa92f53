package sac

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/offpolicy"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/models"
	policyhead "github.com/towerrl/towerrl/models/head"
)

// Name is the name SAC is registered under (Config.Algo "sac").
const Name = "sac"

func init() { algo.RegisterReplay(Name, newLearner, check, algo.Capabilities{}) }

// check refuses settings SAC cannot run with, allocating nothing: a Discrete action space, or
// a buffer the memory available cannot hold.
func check(s algo.ReplaySettings) error {
	if s.ActDim < 1 {
		return fmt.Errorf("%w: SAC acts on a Box action space; for discrete actions use dqn", ErrConfig)
	}
	return offpolicy.CheckMemory(s.BufferSize, s.ObsDim, s.ActDim)
}

// LearnerStatNames are the statistics the engine's loop reports for each update, with
// CleanRL's names where it has them: the critics' loss (½ the sum of their mean squared
// errors, CleanRL's qf_loss), each critic's error, their mean Q-values, the actor's loss, α and
// its loss, and the mean log π of the actor's actions.
var LearnerStatNames = []string{"qf_loss", "qf1_loss", "qf2_loss", "qf1_values", "qf2_values", "actor_loss", "alpha", "alpha_loss", "logp"}

// SDEStatNames are LearnerStatNames with gSDE: the mean of its σ matrix follows (SB3's
// train/std).
var SDEStatNames = append(slices.Clip(LearnerStatNames), "sde_std")

// replayLearner is SAC as the engine's off-policy loop drives it (algo.ReplayLearner).
type replayLearner struct {
	*SAC
	mem *offpolicy.Memory
	act []float32 // a step's squashed actions
	// warm is the updates the critics take alone first (a fine-tune's CriticWarmup).
	warm int64
}

// newLearner makes SAC from the engine's settings.
func newLearner(s algo.ReplaySettings) (algo.ReplayLearner, error) {
	if err := check(s); err != nil {
		return nil, err
	}
	var act kernels.Act
	switch s.Activation {
	case "relu":
		act = kernels.ReLU
	case "tanh":
		act = kernels.Tanh
	default:
		return nil, fmt.Errorf("%w: activation %q; choose relu or tanh", ErrConfig, s.Activation)
	}
	cfg := Config{Hidden: s.Hidden, Act: act, Gamma: s.Gamma, Tau: s.Tau, TargetEvery: s.TargetEvery, LR: s.LR, AdamEps: s.AdamEps,
		MaxGradNorm: s.MaxGradNorm, Minibatch: s.Minibatch, Towers: s.Towers, NoSpin: s.NoSpin, UseSDE: s.UseSDE, LogStdInit: s.LogStdInit}
	if s.EntCoef > 0 {
		cfg.InitAlpha, cfg.FixedAlpha = s.EntCoef, true
	}
	if s.Init != nil {
		cfg.LogStdMin, cfg.LogStdMax = s.Init.LogStdMin, s.Init.LogStdMax
		if !cfg.FixedAlpha && s.Init.InitAlpha > 0 {
			cfg.InitAlpha = s.Init.InitAlpha
		}
	}
	sc, err := New(cfg, s.ObsDim, s.ActDim, s.Rng)
	if err != nil {
		return nil, err
	}
	var warm int64
	if s.Init != nil {
		warm = int64(s.Init.CriticWarmup)
		if err := sc.StartActor(s.Init.Params); err != nil {
			return nil, errors.Join(err, sc.Close())
		}
	}
	mem, err := offpolicy.NewMemory(s.BufferSize, s.ObsDim, s.ActDim, s.Minibatch)
	if err != nil {
		return nil, errors.Join(err, sc.Close())
	}
	l := &replayLearner{SAC: sc, mem: mem, warm: warm}
	if cfg.UseSDE {
		return gsdeLearner{l}, nil
	}
	return l, nil
}

func (l *replayLearner) StatNames() []string {
	if l.sde != nil {
		return SDEStatNames
	}
	return LearnerStatNames
}

// Add stores the squashed actions tanh(u) of the raw draws u the tanh-gaussian head's
// batchers report.
func (l *replayLearner) Add(obs, act, rew, term, trunc, next, final []float32) error {
	l.act = slices.Grow(l.act[:0], len(act))[:len(act)]
	for k, u := range act {
		l.act[k] = float32(math.Tanh(float64(u)))
	}
	return l.mem.Buf.Add(obs, l.act, rew, term, trunc, next, final)
}

func (l *replayLearner) Buffered() (int, int64, int64) { return l.mem.Filled() }

func (l *replayLearner) Update(ctx context.Context, rng *rand.Rand, stats []float64) error {
	b, err := l.mem.Sample(rng)
	if err != nil {
		return err
	}
	update := l.SAC.Update
	if l.Updates() < l.warm {
		update = l.WarmUpdate // the actor's and α's statistics are 0
	}
	st, err := update(ctx, b, rng)
	if err != nil {
		return err
	}
	copy(stats, []float64{st.CriticLoss, st.Q1Loss, st.Q2Loss, st.Q1, st.Q2, st.ActorLoss, st.Alpha, st.AlphaLoss, st.LogP})
	if l.sde != nil {
		stats[len(LearnerStatNames)] = l.SDEStd()
	}
	return nil
}

func (l *replayLearner) Collected(int64) {}

// Exploration: SAC explores by sampling its actor (rate 0).
func (l *replayLearner) Exploration(int64) (float64, bool) { return 0, false }

func (l *replayLearner) Head() policyhead.Kind { return policyhead.TanhGaussianKind }

// Acting, PublishLayout: SAC's (with gSDE, the actor's weights and the acting W).

func (l *replayLearner) Export(spec policyhead.Spec, version int64) ([]byte, error) {
	return l.ExportActor(spec, version)
}

// gsdeLearner is replayLearner with gSDE (algo.NoisyActing): the batchers act with
// ExportActing's graph, whose acting W ResampleNoise draws at each collection's start.
type gsdeLearner struct{ *replayLearner }

func (l gsdeLearner) ResampleNoise(rng *rand.Rand) { l.ResampleActingNoise(rng) }

// Store puts SAC's state into c, and the buffer with withBuffer.
func (l *replayLearner) Store(c *models.Checkpoint, withBuffer bool) error {
	if err := l.SAC.Store(c); err != nil {
		return err
	}
	if withBuffer {
		return l.mem.Store(c)
	}
	return nil
}

// Load restores SAC's state from c, and the buffer when c holds it.
func (l *replayLearner) Load(c *models.Checkpoint) (bool, error) {
	if err := l.SAC.Load(c); err != nil {
		return false, err
	}
	return l.mem.Load(c)
}

package sac

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/internal/kernels"
	policyhead "github.com/towerrl/towerrl/models/head"
)

// Name is the name SAC is registered under (Config.Algo "sac").
const Name = "sac"

func init() { algo.RegisterReplay(Name, newLearner, algo.Capabilities{}) }

// LearnerStatNames are the statistics the engine's loop reports for each update, with
// CleanRL's names where it has them: the critics' loss (½ the sum of their mean squared
// errors, CleanRL's qf_loss), each critic's error, their mean Q-values, the actor's loss, α and
// its loss, and the mean log π of the actor's actions.
var LearnerStatNames = []string{"qf_loss", "qf1_loss", "qf2_loss", "qf1_values", "qf2_values", "actor_loss", "alpha", "alpha_loss", "logp"}

// replayLearner is SAC as the engine's off-policy loop drives it (algo.ReplayLearner).
type replayLearner struct{ *SAC }

// newLearner makes SAC from the engine's settings.
func newLearner(s algo.ReplaySettings) (algo.ReplayLearner, error) {
	if s.ActDim < 1 {
		return nil, fmt.Errorf("%w: SAC acts on a Box action space; for discrete actions use dqn", ErrConfig)
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
		MaxGradNorm: s.MaxGradNorm, Minibatch: s.Minibatch, Towers: s.Towers, NoSpin: s.NoSpin}
	if s.EntCoef > 0 {
		cfg.InitAlpha, cfg.FixedAlpha = s.EntCoef, true
	}
	sc, err := New(cfg, s.ObsDim, s.ActDim, s.Rng)
	if err != nil {
		return nil, err
	}
	return replayLearner{sc}, nil
}

func (l replayLearner) StatNames() []string { return LearnerStatNames }

func (l replayLearner) Update(ctx context.Context, b *replay.Batch, rng *rand.Rand, stats []float64) error {
	st, err := l.SAC.Update(ctx, b, rng)
	if err != nil {
		return err
	}
	copy(stats, []float64{st.CriticLoss, st.Q1Loss, st.Q2Loss, st.Q1, st.Q2, st.ActorLoss, st.Alpha, st.AlphaLoss, st.LogP})
	return nil
}

func (l replayLearner) Collected(int64) {}

// Exploration: SAC explores by sampling its actor (rate 0).
func (l replayLearner) Exploration(int64) (float64, bool) { return 0, false }

// BufferActions stores the squashed actions tanh(u) of the raw draws u the tanh-gaussian
// head's batchers report.
func (l replayLearner) BufferActions(dst, taken []float32) []float32 {
	dst = dst[:len(taken)]
	for k, u := range taken {
		dst[k] = float32(math.Tanh(float64(u)))
	}
	return dst
}
func (l replayLearner) Acting() []float32           { return l.actorP }
func (l replayLearner) PublishLayout() []bind.Param { return l.actor.PublishLayout("actor") }
func (l replayLearner) Head() policyhead.Kind       { return policyhead.TanhGaussianKind }

func (l replayLearner) Export(spec policyhead.Spec, version int64) ([]byte, error) {
	return l.ExportActor(spec, version)
}

package engine

import (
	"fmt"
	"math"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/envs"
)

// The config of an off-policy algorithm (capabilities Replay: dqn, sac): its own defaults,
// Stable-Baselines3's, in place of PPO's, and its checks.

// replayDefaults is withDefaults for an off-policy algorithm on the env of spec: every zero
// field takes SB3's default for the algorithm (an iteration of about 1000 env steps, so that
// metrics.jsonl and the checkpoints keep the pace of PPO's), then the fields are checked.
func (c Config) replayDefaults(spec envs.Spec) (Config, error) {
	_, discrete := spec.Action.(envs.Discrete)
	dqn := discrete // dqn acts on discrete actions, sac on a Box; the learner refuses the other
	pick := func(d, s int) int {
		if dqn {
			return d
		}
		return s
	}
	if c.TotalSteps == 0 {
		c.TotalSteps = 100_000
	}
	orDefault(&c.Workers, 1)
	orDefault(&c.Envs, 1)
	orDefault(&c.Towers, 1)
	orDefault(&c.TrainFreq, pick(4, 1))
	orDefault(&c.GradientSteps, 1)
	orDefault(&c.BatchSize, pick(32, 256))
	orDefault(&c.TargetUpdateInterval, pick(10_000, 1))
	if c.LearningStarts == 0 {
		c.LearningStarts = 100
	}
	orDefault(&c.BufferSize, int(min(1_000_000, max(c.TotalSteps, 1))))
	n := c.Workers * c.Envs
	if c.RolloutSteps == 0 && c.TrainFreq > 0 && n > 0 {
		per := c.TrainFreq * n
		c.RolloutSteps = c.TrainFreq * max(1, (1000+per-1)/per)
	}
	orDefault(&c.EvalEpisodes, 10)
	orDefault(&c.CheckpointEvery, 10)
	orDefault(&c.LR, []float64{3e-4, 1e-4}[boolIndex(dqn)])
	orDefault(&c.Gamma, 0.99)
	orDefault(&c.Tau, []float64{0.005, 1}[boolIndex(dqn)])
	orDefault(&c.AdamEps, 1e-8) // PyTorch's Adam, which SB3 uses as it comes
	if dqn {
		orDefault(&c.MaxGradNorm, 10)
		orDefault(&c.ExplorationFraction, 0.1)
		orDefault(&c.ExplorationInitialEps, 1)
		orDefault(&c.ExplorationFinalEps, 0.05)
		if c.DQNTarget == "" {
			c.DQNTarget = "double"
		}
	} else {
		orDefault(&c.MaxGradNorm, -1) // SB3's SAC does not clip
	}
	if c.InitPolicy == "" { // a fine-tune's network is the InitPolicy's
		if len(c.Hidden) == 0 {
			c.Hidden = []int{pick(64, 256), pick(64, 256)}
		}
		if c.Activation == "" {
			c.Activation = "relu"
		}
	} else if !dqn {
		orDefault(&c.CriticWarmup, 2000)
	}
	if c.EntCoef < 0 {
		c.EntCoef = 0
	}
	return c, c.checkReplay(spec, dqn)
}

// finalEps is ExplorationFinalEps, whose explicit 0 is kept as −1 (explicitZeros).
func (c Config) finalEps() float64 {
	if c.ExplorationFinalEps == -1 {
		return 0
	}
	return c.ExplorationFinalEps
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkReplay checks an off-policy config after its defaults.
func (c Config) checkReplay(spec envs.Spec, discrete bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.Algo == "dqn" && !discrete:
		return bad("dqn acts on a Discrete action space and %s's is %s; use --algo sac", c.Env, spec.Action)
	case c.Algo == "sac" && discrete:
		return bad("sac acts on a Box action space and %s's is %s; use --algo dqn", c.Env, spec.Action)
	case c.TotalSteps < 1:
		return bad("TotalSteps = %d", c.TotalSteps)
	case c.Workers < 1 || c.Envs < 1 || c.Towers < 1:
		return bad("Workers (%d), Envs (%d) and Towers (%d) must be at least 1", c.Workers, c.Envs, c.Towers)
	case c.TrainFreq < 1:
		return bad("train_freq = %d, want the steps of each env per collection, at least 1", c.TrainFreq)
	case c.GradientSteps < -1 || c.GradientSteps == 0:
		return bad("gradient_steps = %d, want the updates per collection (at least 1), or -1 for as many as the transitions collected", c.GradientSteps)
	case c.BatchSize < 1 || c.BatchSize%c.Towers != 0:
		return bad("batch_size %d must be positive and a multiple of towers (%d): each update's rows are split over the towers", c.BatchSize, c.Towers)
	case c.LearningStarts < -1: // −1 is an explicit 0 (explicitZeros): learning at once
		return bad("learning_starts = %d, want the env steps of random actions before learning, 0 or more", c.LearningStarts)
	case c.BufferSize < 1:
		return bad("buffer_size = %d, want at least 1", c.BufferSize)
	case c.TargetUpdateInterval < 1:
		return bad("target_update_interval = %d, want at least 1", c.TargetUpdateInterval)
	case !(c.Tau > 0 && c.Tau <= 1):
		return bad("tau = %g, want (0, 1]", c.Tau)
	case !(c.Gamma >= 0 && c.Gamma <= 1):
		return bad("Gamma = %g, want [0, 1]", c.Gamma)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return bad("LR = %g, want a positive rate", c.LR)
	case c.RolloutSteps < c.TrainFreq || c.RolloutSteps%c.TrainFreq != 0:
		return bad("rollout_steps %d (the steps of each env per iteration) must be a multiple of train_freq %d", c.RolloutSteps, c.TrainFreq)
	case c.CheckpointEvery < 0:
		return bad("CheckpointEvery = %d", c.CheckpointEvery)
	case c.EvalEpisodes < -1 || c.EvalEpisodes > maxEvalEpisodes:
		return bad("EvalEpisodes = %d, want 1 to %d, or -1 for no evaluation", c.EvalEpisodes, maxEvalEpisodes)
	case c.Activation != "" && c.Activation != "relu" && c.Activation != "tanh": // a fine-tune's may be empty: the InitPolicy's
		return bad("Activation %q; choose relu or tanh", c.Activation)
	case c.CriticWarmup < -1 || c.CriticWarmup != 0 && (c.InitPolicy == "" || discrete):
		return bad("critic_warmup = %d: it is the updates sac's new critics take alone when fine-tuning an init_policy (-1 for none)", c.CriticWarmup)
	case c.NormObs || c.NormReward:
		return bad("norm_obs and norm_reward are not supported by --algo %s yet; drop them", c.Algo)
	case c.Shared:
		return bad("shared_trunk is PPO's (the native actor-critic); drop it for --algo %s", c.Algo)
	case c.LogStdInit != 0 && !c.UseSDE:
		return bad("logstd_init is PPO's Gaussian head's, and sac's only with use_sde (gSDE's log σ): set use_sde (--use-sde), or drop it (--logstd-init 0) for --algo %s", c.Algo)
	case c.UseSDE && c.InitPolicy != "":
		return bad("use_sde with init_policy: a foreign actor outputs its own log std, and gSDE's is a parameter matrix of a new actor; fine-tune it without use_sde")
	case c.UseSDE && c.Algo != "sac":
		return bad("use_sde (gSDE) is sac's exploration; --algo %s explores otherwise: drop it", c.Algo)
	case c.SDESampleFreq != 0 && !c.UseSDE:
		return bad("sde_sample_freq %d is gSDE's; set use_sde (--use-sde) or drop it", c.SDESampleFreq)
	case c.SDESampleFreq > 0 && c.OverlapCollection:
		return bad("sde_sample_freq %d draws gSDE's noise within a collection, from the stream the updates draw from: it cannot run beside them with overlap_collection; drop one of them", c.SDESampleFreq)
	case c.SDESampleFreq < -1:
		return bad("sde_sample_freq = %d, want the steps of each env between gSDE's draws (at least 1), or -1 (or 0) for one draw per collection", c.SDESampleFreq)
	}
	if discrete {
		switch {
		case !(c.ExplorationFraction > 0 && c.ExplorationFraction <= 1):
			return bad("exploration_fraction = %g, want (0, 1]: the share of total_steps over which ε falls", c.ExplorationFraction)
		case !(c.ExplorationInitialEps >= 0 && c.ExplorationInitialEps <= 1) || !(c.finalEps() >= 0 && c.ExplorationFinalEps <= 1):
			return bad("exploration_initial_eps %g and exploration_final_eps %g must be in [0, 1]", c.ExplorationInitialEps, c.ExplorationFinalEps)
		case c.DQNTarget != "double" && c.DQNTarget != "max":
			return bad("dqn_target %q; choose double (Double DQN's target) or max (SB3's and the original DQN's)", c.DQNTarget)
		}
	} else if c.ExplorationFraction != 0 || c.ExplorationInitialEps != 0 || c.ExplorationFinalEps != 0 {
		return bad("exploration_fraction, exploration_initial_eps and exploration_final_eps are DQN's ε-greedy schedule; sac explores by sampling its actor: drop them")
	} else if c.DQNTarget != "" {
		return bad("dqn_target is DQN's bootstrap target; sac has twin critics: drop it")
	}
	if err := c.checkHidden(spec); err != nil {
		return err
	}
	n := c.Workers * c.Envs
	if int64(n)*int64(c.RolloutSteps) > c.TotalSteps {
		return bad("one iteration collects %d steps (workers×envs×rollout_steps), more than TotalSteps %d", n*c.RolloutSteps, c.TotalSteps)
	}
	// The algorithm's own checks, the buffer's memory among them.
	if err := algo.CheckReplay(c.Algo, c.replaySettings(spec)); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// replayFieldsSet names the off-policy fields set in c, for the error of an algorithm that
// does not use them.
func (c Config) replayFieldsSet() []string {
	var set []string
	for _, f := range []struct {
		name string
		v    float64
	}{{"buffer_size", float64(c.BufferSize)}, {"learning_starts", float64(c.LearningStarts)}, {"train_freq", float64(c.TrainFreq)},
		{"gradient_steps", float64(c.GradientSteps)}, {"target_update_interval", float64(c.TargetUpdateInterval)}, {"tau", c.Tau},
		{"exploration_fraction", c.ExplorationFraction}, {"exploration_initial_eps", c.ExplorationInitialEps},
		{"exploration_final_eps", c.ExplorationFinalEps}} {
		if f.v != 0 {
			set = append(set, fmt.Sprintf("%s %g", f.name, f.v))
		}
	}
	if c.BatchSize != 0 {
		set = append(set, fmt.Sprintf("batch_size %d (the rows of a dqn or sac update; PPO's minibatches is a count: rows per minibatch = workers·envs·rollout_steps / minibatches)", c.BatchSize))
	}
	if c.NoBufferCheckpoint {
		set = append(set, "no_buffer_checkpoint")
	}
	if c.CriticWarmup != 0 {
		set = append(set, fmt.Sprintf("critic_warmup %d", c.CriticWarmup))
	}
	if c.DQNTarget != "" {
		set = append(set, "dqn_target "+c.DQNTarget)
	}
	if c.OverlapCollection {
		set = append(set, "overlap_collection")
	}
	if c.UseSDE {
		set = append(set, "use_sde (sac's gSDE)")
	}
	if c.SDESampleFreq != 0 {
		set = append(set, fmt.Sprintf("sde_sample_freq %d", c.SDESampleFreq))
	}
	return set
}

// replaySettings are the off-policy learner's settings of c on the env of spec (without the
// weights' stream, Rng, which the run sets).
func (c Config) replaySettings(spec envs.Spec) algo.ReplaySettings {
	s := algo.ReplaySettings{ObsDim: spec.Observation.Dim(), Hidden: c.Hidden, Activation: c.Activation, Gamma: c.Gamma, LR: c.LR,
		AdamEps: c.AdamEps, MaxGradNorm: c.MaxGradNorm, Tau: c.Tau, TargetEvery: c.TargetUpdateInterval,
		Minibatch: c.BatchSize, Towers: c.Towers, NoSpin: c.NoSpin, EntCoef: c.EntCoef, BufferSize: c.BufferSize, MaxTarget: c.DQNTarget == "max",
		UseSDE: c.UseSDE, LogStdInit: float64(c.LogStdInit),
		Explore: algo.LinearSchedule{Initial: c.ExplorationInitialEps, Final: c.finalEps(), Fraction: c.ExplorationFraction, Total: c.TotalSteps}}
	if d, ok := spec.Action.(envs.Discrete); ok {
		s.Actions = d.N
	} else {
		s.ActDim = spec.Action.Dim()
	}
	return s
}

package engine

import (
	"errors"
	"fmt"

	"github.com/towerrl/towerrl/envs"
)

// ErrConfig is wrapped by errors about an invalid Config field.
var ErrConfig = errors.New("engine: invalid config")

// Config configures a training run. Zero fields take defaults ([Config.WithDefaults]): CleanRL's
// ppo.py hyper-parameters for Discrete action spaces, ppo_continuous_action.py's for Box ones.
// Booleans are phrased so that false is the default.
type Config struct {
	Env  string `json:"env"`  // Gymnasium id (required)
	Algo string `json:"algo"` // "ppo" (default)

	TotalSteps   int64 `json:"total_steps"`   // env steps; default 500k (Discrete), 1M (Box)
	Workers      int   `json:"workers"`       // batcher workers; default 1
	Envs         int   `json:"envs"`          // envs per worker; default 4 (Discrete), 1 (Box)
	RolloutSteps int   `json:"rollout_steps"` // steps per env per iteration; default 128 (Discrete), 2048 (Box)
	Towers       int   `json:"towers"`        // learner towers; default 1
	Minibatches  int   `json:"minibatches"`   // per epoch; default 4 (Discrete), 32 (Box)
	Epochs       int   `json:"epochs"`        // passes over each rollout; default 4 (Discrete), 10 (Box)

	LR          float64 `json:"lr"`            // default 2.5e-4 (Discrete), 3e-4 (Box)
	ConstantLR  bool    `json:"constant_lr"`   // do not anneal the learning rate linearly to 0
	Gamma       float64 `json:"gamma"`         // default 0.99
	Lambda      float64 `json:"gae_lambda"`    // default 0.95
	ClipCoef    float64 `json:"clip_coef"`     // default 0.2
	NoClipVLoss bool    `json:"no_clip_vloss"` // do not clip the value loss
	EntCoef     float64 `json:"ent_coef"`      // default 0.01 (Discrete), 0 (Box); negative: 0
	VfCoef      float64 `json:"vf_coef"`       // default 0.5
	MaxGradNorm float64 `json:"max_grad_norm"` // default 0.5; negative: no clipping
	NoNormAdv   bool    `json:"no_norm_adv"`   // do not standardise advantages per minibatch
	AdamEps     float64 `json:"adam_eps"`      // default 1e-5

	Hidden     []int   `json:"hidden"`       // MLP widths; default 64, 64
	Activation string  `json:"activation"`   // tanh (default) or relu
	Shared     bool    `json:"shared_trunk"` // one trunk for actor and critic
	LogStdInit float32 `json:"logstd_init"`  // Gaussian log_std start; default 0

	Seed            uint64 `json:"seed"`
	CheckpointEvery int    `json:"checkpoint_every"` // iterations between checkpoints; default 10 (and always the last)
	EvalEpisodes    int    `json:"eval_episodes"`    // evaluation at the end; default 10; negative: none
	InitPolicy      string `json:"init_policy,omitempty"`
}

// WithDefaults fills zero fields and validates the result; errors name the field.
func (c Config) WithDefaults() (Config, error) {
	if c.Env == "" {
		return c, fmt.Errorf("%w: Env is required", ErrConfig)
	}
	spec, err := envs.Lookup(c.Env)
	if err != nil {
		return c, err
	}
	_, discrete := spec.Action.(envs.Discrete)
	pick := func(d, b int) int {
		if discrete {
			return d
		}
		return b
	}
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setF := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Algo == "" {
		c.Algo = "ppo"
	}
	if c.TotalSteps == 0 {
		c.TotalSteps = int64(pick(500_000, 1_000_000))
	}
	setInt(&c.Workers, 1)
	setInt(&c.Envs, pick(4, 1))
	setInt(&c.RolloutSteps, pick(128, 2048))
	setInt(&c.Towers, 1)
	setInt(&c.Minibatches, pick(4, 32))
	setInt(&c.Epochs, pick(4, 10))
	setInt(&c.EvalEpisodes, 10)
	setInt(&c.CheckpointEvery, 10)
	if discrete {
		setF(&c.LR, 2.5e-4)
		setF(&c.EntCoef, 0.01)
	} else {
		setF(&c.LR, 3e-4)
	}
	setF(&c.Gamma, 0.99)
	setF(&c.Lambda, 0.95)
	setF(&c.ClipCoef, 0.2)
	setF(&c.VfCoef, 0.5)
	setF(&c.MaxGradNorm, 0.5)
	setF(&c.AdamEps, 1e-5)
	c.EntCoef = max(c.EntCoef, 0)
	if len(c.Hidden) == 0 {
		c.Hidden = []int{64, 64}
	}
	if c.Activation == "" {
		c.Activation = "tanh"
	}
	switch {
	case c.Algo != "ppo":
		return c, fmt.Errorf("%w: Algo %q; only ppo is implemented", ErrConfig, c.Algo)
	case c.TotalSteps < 0:
		return c, fmt.Errorf("%w: TotalSteps = %d", ErrConfig, c.TotalSteps)
	case c.CheckpointEvery < 0:
		return c, fmt.Errorf("%w: CheckpointEvery = %d", ErrConfig, c.CheckpointEvery)
	case c.Workers < 0 || c.Envs < 0 || c.RolloutSteps < 0 || c.Towers < 0 || c.Minibatches < 0 || c.Epochs < 0:
		return c, fmt.Errorf("%w: Workers, Envs, RolloutSteps, Towers, Minibatches and Epochs must be positive", ErrConfig)
	case c.Gamma < 0 || c.Gamma > 1:
		return c, fmt.Errorf("%w: Gamma = %g, want [0, 1]", ErrConfig, c.Gamma)
	case c.Lambda < 0 || c.Lambda > 1:
		return c, fmt.Errorf("%w: Lambda = %g, want [0, 1]", ErrConfig, c.Lambda)
	case c.LR < 0:
		return c, fmt.Errorf("%w: LR = %g", ErrConfig, c.LR)
	}
	batch := c.Workers * c.Envs * c.RolloutSteps
	if mb := batch / c.Minibatches; mb < c.Towers {
		return c, fmt.Errorf("%w: a batch of %d steps in %d minibatches of %d cannot be split over %d towers",
			ErrConfig, batch, c.Minibatches, mb, c.Towers)
	}
	if int64(batch) > c.TotalSteps {
		return c, fmt.Errorf("%w: one iteration collects %d steps (Workers×Envs×RolloutSteps), more than TotalSteps %d",
			ErrConfig, batch, c.TotalSteps)
	}
	return c, nil
}

// Iterations is the number of PPO iterations the run makes.
func (c Config) Iterations() int {
	return int(c.TotalSteps / int64(c.Workers*c.Envs*c.RolloutSteps))
}

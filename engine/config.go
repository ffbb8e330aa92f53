package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
)

// ErrConfig is wrapped by errors about an invalid Config field.
var ErrConfig = errors.New("engine: invalid config")

// Config configures a training run. Zero fields take defaults ([Config.WithDefaults]): CleanRL's
// ppo.py hyper-parameters for Discrete action spaces, ppo_continuous_action.py's for Box ones.
// Booleans are phrased so that false is the default.
type Config struct {
	Env string `json:"env"` // Gymnasium id (required)
	// Algo is a registered algorithm (engine/algo): "ppo" (default), "appo", "impala",
	// "ddppo", or the off-policy "dqn" and "sac" (SB3's defaults, below). An algorithm may have its own defaults for TotalSteps, Epochs, Minibatches,
	// LR, Lambda and SeqLen (algo.Defaulter: appo, discrete actions, 3 passes over sequences
	// of 4 steps for 600k steps, Box 4 passes; impala 2 passes at 1e-4 with λ = 1 for 1M).
	Algo string `json:"algo"`

	TotalSteps   int64 `json:"total_steps"`   // env steps; default 500k (Discrete), 1M (Box); see Algo
	Workers      int   `json:"workers"`       // batcher workers; default 1
	Envs         int   `json:"envs"`          // envs per worker; default 4 (Discrete), 1 (Box)
	RolloutSteps int   `json:"rollout_steps"` // steps per env per iteration; default 128 (Discrete), 2048 (Box)
	Towers       int   `json:"towers"`        // learner towers; default 1
	Minibatches  int   `json:"minibatches"`   // per epoch; default 4 (Discrete), 32 (Box)
	Epochs       int   `json:"epochs"`        // passes over each rollout; default 4 (Discrete), 10 (Box); see Algo
	// SeqLen is, for a recurrent policy, the steps of the sequences the learner
	// backpropagates through (RLlib's max_seq_len): each env's rollout is cut into
	// RolloutSteps/SeqLen sequences, each replayed from the state the batcher fed at its first
	// step. It must divide RolloutSteps. Default (0): the largest divisor of RolloutSteps up
	// to 8 (up to 32 for impala and appo, whose V-trace runs over sequences; appo with
	// discrete actions: up to 4, written into the run's config). Unused by feed-forward
	// policies under ppo.
	SeqLen int `json:"seq_len,omitempty"`

	LR          float64 `json:"lr"`            // default 2.5e-4 (Discrete), 3e-4 (Box), 1e-4 fine-tuning a Box InitPolicy (foreignBoxLR)
	ConstantLR  bool    `json:"constant_lr"`   // do not anneal the learning rate linearly to 0
	Gamma       float64 `json:"gamma"`         // default 0.99
	Lambda      float64 `json:"gae_lambda"`    // GAE's or V-trace's λ; default 0.95 (impala: 1)
	ClipCoef    float64 `json:"clip_coef"`     // default 0.2
	NoClipVLoss bool    `json:"no_clip_vloss"` // do not clip the value loss
	EntCoef     float64 `json:"ent_coef"`      // default 0.01 (Discrete), 0 (Box, or fine-tuning an InitPolicy); negative (or 0 written in a JSON config): 0
	VfCoef      float64 `json:"vf_coef"`       // default 0.5
	MaxGradNorm float64 `json:"max_grad_norm"` // default 0.5; negative: no clipping
	NoNormAdv   bool    `json:"no_norm_adv"`   // do not standardise advantages per minibatch
	AdamEps     float64 `json:"adam_eps"`      // default 1e-5

	// Normalisation (package engine/normalize; CleanRL's "37 details" 6–9, SB3's
	// VecNormalize). NormObs normalises observations by their running mean and variance,
	// clipped at ±ClipObs: the map is part of the policy (ops in front of the network in
	// policy.onnx, published with the weights), updated after each iteration from its rollout.
	// NormReward divides the rewards the learner sees by the running standard deviation of
	// each env's discounted return (γ = Gamma), clipped at ±ClipReward; returns in the metrics
	// and evaluation stay raw. Both default to false (a preset may set them; for a foreign
	// InitPolicy, whose graph may hold its own normaliser, only when asked); the clips default
	// to 10.
	NormObs    bool    `json:"norm_obs"`
	NormReward bool    `json:"norm_reward"`
	ClipObs    float64 `json:"clip_obs"`
	ClipReward float64 `json:"clip_reward"`

	Hidden     []int   `json:"hidden"`       // MLP widths; default 64, 64
	Activation string  `json:"activation"`   // tanh (default) or relu
	Shared     bool    `json:"shared_trunk"` // one trunk for actor and critic
	LogStdInit float32 `json:"logstd_init"`  // Gaussian log_std start; default 0 (sac with use_sde: gSDE's log σ, default −3)

	// NoSpin: the learner's towers park at once when they wait for each other instead of
	// spinning briefly first (learner.TowersConfig.NoSpin), for machines shared with other
	// work. Default false.
	NoSpin bool `json:"no_spin,omitempty"`
	// MatmulPrecision is what the learner's matrix products may round their operands to:
	// "float32" (default: exact float32) or "bf16", each element of both operands rounded to
	// bfloat16 (8 significant bits) and the products summed in float32 by the CPU's matrix
	// unit (Intel AMX), as PyTorch's torch.set_float32_matmul_precision("medium") allows;
	// biases, activations, losses, gradients' sums and Adam stay float32. The precision of
	// the whole process while the run goes on; on a CPU without AMX-BF16 the products stay
	// float32 (BF16Available). The batchers' inference (ONNX Runtime) is unchanged.
	MatmulPrecision string `json:"matmul_precision,omitempty"`

	// Preset names the preset the run's settings were filled from (package engine/preset:
	// "ppo/Pendulum-v1"), or "none"; a record, written by whoever applied it (cmd/train). Train
	// does not read it.
	Preset string `json:"preset,omitempty"`

	Seed            uint64 `json:"seed"`
	CheckpointEvery int    `json:"checkpoint_every"` // iterations between checkpoints; default 10 (and always the last)
	EvalEpisodes    int    `json:"eval_episodes"`    // evaluation at the end; default 10; negative: none
	// EvalEvery evaluates the policy during training as well, every EvalEvery iterations
	// (on-policy algorithms; env steps for off-policy ones): EvalEpisodes deterministic
	// episodes on envs of their own, seeded as the final evaluation's (Seed + 1000003, every
	// time, so the scores compare), which leave the training's envs and random streams alone.
	// Their mean and standard deviation go to the metrics (eval/episodic_return), and the best
	// policy so far is kept as best_policy.onnx, its step and score in best.json. 0 (default):
	// the final evaluation only. May change on resume.
	EvalEvery int64 `json:"eval_every,omitempty"`
	// StopAtReturn, when set, ends the run once an evaluation's mean return reaches it (≥):
	// a checkpoint and policy.onnx are written and the run ends as a finished one
	// (Result.StoppedEarly says why). Needs EvalEvery. Default: unset, never. May change on
	// resume (a run stopped by it goes on when resumed with it raised).
	StopAtReturn *float64 `json:"stop_at_return,omitempty"`
	// GifEvery draws one deterministic episode of the policy trained so far every GifEvery
	// iterations (env steps for off-policy algorithms), as eval --gif does (env 0's first
	// episode of the evaluation envs), into gifs/step-<env steps>.gif in the run directory and
	// into TensorBoard as the image "episode" (its image tab plays GIFs). Classic-control envs
	// only, drawn by Options.Draw (package engine/gif's Drawer, which cmd/train sets). 0
	// (default): none. May change on resume.
	GifEvery   int64  `json:"gif_every,omitempty"`
	InitPolicy string `json:"init_policy,omitempty"` // a foreign ONNX policy to fine-tune; stored as an absolute path

	// Set by Train and kept in config.json and every checkpoint: the run's identity (a resume
	// refuses another run's checkpoint) and the SHA-256 of the InitPolicy file (a given value
	// must match the file). Train replaces RunID with a fresh one.
	RunID            string `json:"run_id,omitempty"`
	InitPolicySHA256 string `json:"init_policy_sha256,omitempty"`

	// How to bind a foreign InitPolicy that carries no towerrl metadata (the batcher's and
	// eval's --head, --action-space, --logits-output, --logstd-output, --value-output). Empty
	// fields are found as the batchers find them: the env's action space, and the outputs by
	// head.Bind's conventions. The output names may be inner tensors of the graph.
	Head         string `json:"head,omitempty"`          // categorical or gaussian
	ActionSpace  string `json:"action_space,omitempty"`  // discrete:N or box:DIM:LOW:HIGH; must be the env's
	LogitsOutput string `json:"logits_output,omitempty"` // tensor holding the logits or the Gaussian mean
	LogStdOutput string `json:"logstd_output,omitempty"` // tensor holding the Gaussian log_std
	ValueOutput  string `json:"value_output,omitempty"`  // tensor holding the state value
	// ValueWarmup is the number of first iterations in which a new critic (given to a
	// foreign policy without a value output) trains alone, the actor's gradients zeroed and
	// the learning rate ×10 (it starts from scratch next to a pretrained actor). Default 30;
	// negative: none.
	ValueWarmup int `json:"value_warmup,omitempty"`

	// Asynchronous algorithms (impala, appo: those whose loss corrects for policy lag with
	// V-trace). The batchers collect without pause into a ring of QueueSize rollouts; the
	// learner trains on each rollout as it arrives (Epochs passes of Minibatches minibatches
	// of whole env sequences) and publishes its weights every BroadcastInterval iterations.
	// Unused by ppo.
	QueueSize         int   `json:"queue_size,omitempty"`         // rollouts buffered between batchers and learner; default 2
	BroadcastInterval int   `json:"broadcast_interval,omitempty"` // learner iterations between publishes; default 1
	MaxPolicyLag      int64 `json:"max_policy_lag,omitempty"`     // drop rollouts more versions behind than this; default 0: never
	// V-trace's clipping (IMPALA's ρ̄ and c̄), default 1 each, and APPO's KL(μ‖π) weight,
	// default 0 (no KL term).
	RhoBar float64 `json:"vtrace_rho_bar,omitempty"`
	CBar   float64 `json:"vtrace_c_bar,omitempty"`
	KLCoef float64 `json:"kl_coef,omitempty"`

	// SyncFrac is DD-PPO's straggler preemption threshold (ddppo on several ranks, feed-forward
	// policies): once ceil(SyncFrac·N) of the N ranks have finished collecting an iteration's
	// rollout, the others stop early, keeping at least a quarter of RolloutSteps and one
	// minibatch; the updates then weight each rank by the rows it has. Default 0.6 (the
	// paper's); 1 turns preemption off, as does any value with ceil(SyncFrac·N) = N (the
	// default on 2 ranks: use 0.5 there). Unused by the other algorithms.
	SyncFrac float64 `json:"sync_frac,omitempty"`

	// Off-policy algorithms (dqn, sac: those that learn from a replay buffer), with SB3's
	// names and defaults unless said; unused by the others (see config_replay.go and
	// docs/offpolicy.md). Each collection of TrainFreq steps of every env goes into a buffer
	// of BufferSize transitions, then GradientSteps updates on BatchSize rows sampled from it
	// (none before LearningStarts env steps, when the actions are uniformly random). An
	// iteration (a metrics line) is RolloutSteps steps of each env, whole collections.

	BufferSize     int   `json:"buffer_size,omitempty"`     // dqn, sac: transitions the replay buffer keeps; default 1,000,000 (or total_steps when fewer)
	LearningStarts int64 `json:"learning_starts,omitempty"` // dqn, sac: env steps of uniformly random actions before learning; default 100
	TrainFreq      int   `json:"train_freq,omitempty"`      // dqn, sac: steps of each env per collection; default 4 (dqn), 1 (sac)
	GradientSteps  int   `json:"gradient_steps,omitempty"`  // dqn, sac: updates per collection; default 1; -1: as many as transitions collected
	BatchSize      int   `json:"batch_size,omitempty"`      // dqn, sac: rows per update; default 32 (dqn), 256 (sac)
	// TargetUpdateInterval: the target networks move every so many env steps (dqn, as SB3
	// counts it; default 10,000) or gradient steps (sac; default 1), by Polyak averaging with
	// Tau (default 1 for dqn, a hard copy; 0.005 for sac).
	TargetUpdateInterval int     `json:"target_update_interval,omitempty"`
	Tau                  float64 `json:"tau,omitempty"`
	// DQN's ε-greedy exploration: ε goes linearly from ExplorationInitialEps (default 1) to
	// ExplorationFinalEps (default 0.05) over the first ExplorationFraction (default 0.1) of
	// TotalSteps, then stays; it is 1 before LearningStarts. ε is set at each collection.
	ExplorationFraction   float64 `json:"exploration_fraction,omitempty"`
	ExplorationInitialEps float64 `json:"exploration_initial_eps,omitempty"`
	ExplorationFinalEps   float64 `json:"exploration_final_eps,omitempty"`
	// DQNTarget is dqn's bootstrap target: "double" (the default), Double DQN's
	// Q_target(s′, argmax_a Q(s′, a)), or "max", max_a Q_target(s′, a), the target of the
	// original DQN and of SB3's DQN, which RL Zoo's figures were made with.
	DQNTarget string `json:"dqn_target,omitempty"`
	// NoBufferCheckpoint leaves the replay buffer out of the checkpoints (its size is logged
	// when they hold it): smaller and faster checkpoints, but a resume starts with an empty
	// buffer and so is not the run an uninterrupted one would have been.
	NoBufferCheckpoint bool `json:"no_buffer_checkpoint,omitempty"`
	// CriticWarmup is, when sac fine-tunes an InitPolicy, the updates its new critics take
	// alone (the actor and α held) before the actor moves. Default 2000; -1: none.
	CriticWarmup int `json:"critic_warmup,omitempty"`
	// OverlapCollection collects each collection's next TrainFreq steps while the learner
	// runs its updates, instead of after them: the batchers then act with the network of one
	// collection before (train_freq steps behind the learner), and the updates per env step
	// stay as configured. The pipeline drains at the end of every iteration, so runs and
	// resumes stay deterministic. Off by default, as SB3 (and the presets' figures) run.
	OverlapCollection bool `json:"overlap_collection,omitempty"`
	// UseSDE: sac explores with generalized State-Dependent Exploration (gSDE, SB3's use_sde;
	// see docs/offpolicy.md): noise that is a function of the state, z·W for the actor's last
	// hidden layer z and a matrix W drawn at each collection's start, or every SDESampleFreq
	// steps of each env when positive (SB3's sde_sample_freq; default −1, 0 here: at each
	// collection's start only). LogStdInit is then the start of its log σ matrix (SB3's
	// log_std_init; default −3, and a 0 takes it).
	UseSDE        bool `json:"use_sde,omitempty"`
	SDESampleFreq int  `json:"sde_sample_freq,omitempty"`
}

// WithDefaults fills zero fields and validates the result; errors name the field.
func (c Config) WithDefaults() (Config, error) {
	c, _, err := c.resolve()
	return c, err
}

// resolve is WithDefaults with the spec of the run's env: the one place the engine looks the
// env up. Train, Resume and a DD-PPO rank's start resolve their config once and hand the spec
// down with it.
func (c Config) resolve() (Config, envs.Spec, error) {
	if c.Env == "" {
		return c, envs.Spec{}, fmt.Errorf("%w: Env is required", ErrConfig)
	}
	spec, err := envs.Lookup(c.Env)
	if err != nil {
		return c, spec, err
	}
	c, err = c.withDefaults(spec)
	return c, spec, err
}

// withDefaults is WithDefaults for the env of spec.
func (c Config) withDefaults(spec envs.Spec) (Config, error) {
	if c.Algo == "" {
		c.Algo = DefaultAlgo
	}
	if _, err := parsePrecision(c.MatmulPrecision); err != nil {
		return c, err
	}
	c.MatmulPrecision = precisionName(c.MatmulPrecision)
	if err := c.checkAlgoFields(); err != nil {
		return c, err
	}
	if err := c.checkEvaluation(); err != nil {
		return c, err
	}
	if capabilities(c.Algo).Replay {
		return c.replayDefaults(spec)
	}
	if c.ValueWarmup < -1 {
		return c, fmt.Errorf("%w: ValueWarmup = %d, want a count of iterations, or -1 for none (0: the default, 30)", ErrConfig, c.ValueWarmup)
	}
	_, discrete := spec.Action.(envs.Discrete)
	c.fillDefaults(discrete)
	if err := c.syncFracDefaults(); err != nil {
		return c, err
	}
	if err := c.checkRanges(); err != nil {
		return c, err
	}
	return c, c.checkRun(spec)
}

// checkEvaluation checks the evaluation settings every algorithm shares: at the end, during
// training, the stopping return and the episodes drawn.
func (c Config) checkEvaluation() error {
	switch {
	case c.EvalEpisodes < -1 || c.EvalEpisodes > maxEvalEpisodes:
		return fmt.Errorf("%w: EvalEpisodes = %d, want 1 to %d, or -1 for no evaluation (0: the default, 10)", ErrConfig, c.EvalEpisodes, maxEvalEpisodes)
	case c.EvalEvery < 0:
		return fmt.Errorf("%w: EvalEvery = %d, want a count of iterations (env steps for off-policy algorithms), or 0 for no evaluation during training", ErrConfig, c.EvalEvery)
	case c.EvalEvery > 0 && c.EvalEpisodes < 0:
		return fmt.Errorf("%w: EvalEvery = %d evaluates during training, but EvalEpisodes = %d runs no episodes; give EvalEpisodes ≥ 1 (or 0 for the default, 10)", ErrConfig, c.EvalEvery, c.EvalEpisodes)
	case c.StopAtReturn != nil && c.EvalEvery == 0:
		return fmt.Errorf("%w: StopAtReturn = %g needs evaluations during training to compare with; set EvalEvery too", ErrConfig, *c.StopAtReturn)
	case c.StopAtReturn != nil && (math.IsNaN(*c.StopAtReturn) || math.IsInf(*c.StopAtReturn, 0)):
		return fmt.Errorf("%w: StopAtReturn = %g, want a finite return", ErrConfig, *c.StopAtReturn)
	case c.GifEvery < 0:
		return fmt.Errorf("%w: GifEvery = %d, want a count of iterations (env steps for off-policy algorithms), or 0 for no episodes drawn", ErrConfig, c.GifEvery)
	}
	return nil
}

// fillDefaults gives the zero fields of an on-policy run their defaults, for a Discrete
// (discrete) or a Box action space: the algorithm's own (algo.Defaulter) first, then PPO's
// (CleanRL's).
func (c *Config) fillDefaults(discrete bool) {
	pick := func(d, b int) int {
		if discrete {
			return d
		}
		return b
	}
	seqLimit := 0
	if d, ok := algoDefaults(c.Algo, discrete); ok { // the algorithm's own, before PPO's
		if c.TotalSteps == 0 {
			c.TotalSteps = d.TotalSteps
		}
		seqLimit = d.SeqLen
		orDefault(&c.Epochs, d.Epochs)
		orDefault(&c.Minibatches, d.Minibatches)
		orDefault(&c.LR, d.LR)
		orDefault(&c.Lambda, d.Lambda)
	}
	if c.TotalSteps == 0 {
		c.TotalSteps = int64(pick(500_000, 1_000_000))
	}
	orDefault(&c.Workers, 1)
	orDefault(&c.Envs, pick(4, 1))
	orDefault(&c.RolloutSteps, pick(128, 2048))
	if c.SeqLen == 0 && seqLimit > 0 && c.RolloutSteps > 0 {
		c.SeqLen = largestDivisor(c.RolloutSteps, seqLimit)
	}
	orDefault(&c.Towers, 1)
	orDefault(&c.Minibatches, pick(4, 32))
	orDefault(&c.Epochs, pick(4, 10))
	orDefault(&c.EvalEpisodes, 10)
	orDefault(&c.CheckpointEvery, 10)
	orDefault(&c.ValueWarmup, 30)
	if !discrete && c.InitPolicy != "" {
		orDefault(&c.LR, foreignBoxLR)
	}
	if discrete {
		orDefault(&c.LR, 2.5e-4)
		// An entropy bonus of 0.01 (CleanRL's) for a policy trained from scratch; none for a
		// fine-tuned InitPolicy, as in Stable-Baselines3's and RLlib's PPO, where most exported
		// policies come from. A bonus keeps the tuned policy stochastic, and the deterministic
		// policy an evaluation runs then lags behind. Measured on the weakened fixtures,
		// 100-episode deterministic evaluations:
		//   - RLlib LSTM on CartPoleNoVel-v1, 200k steps: 496, 498, 335, 346, 257 (seeds 0–4)
		//     with no bonus, 245, 500, 268 (seeds 0–2) with 0.01; Sample Factory GRU: 455,
		//     448, 445 against 230, 337, 487.
		//   - Feed-forward CartPole-v1 families (CleanRL, SB3 both recipes, VecNormalize),
		//     150k steps: 500 either way (seed 1); RLlib's MLP with a new critic, 400k steps:
		//     447, 500, 500, 480, 489 (seeds 1–5) against 485, 499, 500, 419 (seeds 1–4), and
		//     500 after 500k (seed 1).
		if c.InitPolicy == "" {
			orDefault(&c.EntCoef, 0.01)
		}
	} else {
		orDefault(&c.LR, 3e-4)
	}
	orDefault(&c.Gamma, 0.99)
	orDefault(&c.Lambda, 0.95)
	orDefault(&c.ClipCoef, 0.2)
	orDefault(&c.VfCoef, 0.5)
	orDefault(&c.MaxGradNorm, 0.5)
	orDefault(&c.AdamEps, 1e-5)
	orDefault(&c.QueueSize, 2)
	orDefault(&c.BroadcastInterval, 1)
	orDefault(&c.RhoBar, 1)
	orDefault(&c.CBar, 1)
	orDefault(&c.ClipObs, 10)
	orDefault(&c.ClipReward, 10)
	c.EntCoef = max(c.EntCoef, 0)
	if len(c.Hidden) == 0 {
		c.Hidden = []int{64, 64}
	}
	if c.Activation == "" {
		c.Activation = "tanh"
	}
}

// checkRanges refuses the fields of an on-policy run out of their ranges, naming them.
func (c Config) checkRanges() error {
	switch {
	case !slices.Contains(algo.Names(), c.Algo):
		return fmt.Errorf("%w: Algo %q is not a registered algorithm; registered: %s", ErrConfig, c.Algo, strings.Join(algo.Names(), ", "))
	case c.TotalSteps < 0:
		return fmt.Errorf("%w: TotalSteps = %d", ErrConfig, c.TotalSteps)
	case c.CheckpointEvery < 0:
		return fmt.Errorf("%w: CheckpointEvery = %d", ErrConfig, c.CheckpointEvery)
	case c.Workers < 0 || c.Envs < 0 || c.RolloutSteps < 0 || c.Towers < 0 || c.Minibatches < 0 || c.Epochs < 0 || c.SeqLen < 0:
		return fmt.Errorf("%w: Workers, Envs, RolloutSteps, Towers, Minibatches, Epochs and SeqLen must be positive", ErrConfig)
	case c.SeqLen > 0 && c.RolloutSteps%c.SeqLen != 0:
		return fmt.Errorf("%w: SeqLen %d does not divide RolloutSteps %d: a rollout is cut into whole sequences; pick a divisor of %d",
			ErrConfig, c.SeqLen, c.RolloutSteps, c.RolloutSteps)
	case c.Gamma < 0 || c.Gamma > 1:
		return fmt.Errorf("%w: Gamma = %g, want [0, 1]", ErrConfig, c.Gamma)
	case c.Lambda < 0 || c.Lambda > 1:
		return fmt.Errorf("%w: Lambda = %g, want [0, 1]", ErrConfig, c.Lambda)
	case c.LR < 0:
		return fmt.Errorf("%w: LR = %g", ErrConfig, c.LR)
	case c.QueueSize < 2:
		return fmt.Errorf("%w: QueueSize = %d: the ring needs 2 rollouts at least (one collecting while the learner trains on the other)", ErrConfig, c.QueueSize)
	case c.BroadcastInterval < 1 || c.MaxPolicyLag < 0:
		return fmt.Errorf("%w: BroadcastInterval (%d) must be ≥ 1 and MaxPolicyLag (%d) ≥ 0", ErrConfig, c.BroadcastInterval, c.MaxPolicyLag)
	case !(c.ClipObs > 0) || !(c.ClipReward > 0) || math.IsInf(c.ClipObs, 0) || math.IsInf(c.ClipReward, 0):
		return fmt.Errorf("%w: ClipObs (%g) and ClipReward (%g) must be positive and finite", ErrConfig, c.ClipObs, c.ClipReward)
	case c.RhoBar <= 0 || c.CBar <= 0 || c.KLCoef < 0:
		return fmt.Errorf("%w: V-trace's RhoBar (%g) and CBar (%g) must be positive, KLCoef (%g) ≥ 0", ErrConfig, c.RhoBar, c.CBar, c.KLCoef)
	}
	return nil
}

// checkRun refuses an on-policy run whose fields are each in range but do not make a run
// together on spec's env: the network, a foreign policy's binding, the memory, the batch's
// split over minibatches and towers, and the steps of an iteration.
func (c Config) checkRun(spec envs.Spec) error {
	if err := c.checkHidden(spec); err != nil {
		return err
	}
	if c.InitPolicy == "" {
		for name, v := range map[string]string{"Head": c.Head, "ActionSpace": c.ActionSpace, "LogitsOutput": c.LogitsOutput,
			"LogStdOutput": c.LogStdOutput, "ValueOutput": c.ValueOutput} {
			if v != "" {
				return fmt.Errorf("%w: %s = %q only applies to a foreign InitPolicy, and InitPolicy is empty", ErrConfig, name, v)
			}
		}
	}
	if _, err := c.binding(spec); err != nil {
		return err
	}
	if err := c.checkMemory(spec); err != nil {
		return err
	}
	batch := c.Workers * c.Envs * c.RolloutSteps
	if mb := batch / c.Minibatches; mb < c.Towers {
		return fmt.Errorf("%w: a batch of %d steps in %d minibatches of %d cannot be split over %d towers",
			ErrConfig, batch, c.Minibatches, mb, c.Towers)
	}
	if int64(batch) > c.TotalSteps {
		return fmt.Errorf("%w: one iteration collects %d steps (Workers×Envs×RolloutSteps), more than TotalSteps %d",
			ErrConfig, batch, c.TotalSteps)
	}
	if iters := c.Iterations(); sequential(c.Algo) && c.BroadcastInterval > iters {
		return fmt.Errorf("%w: BroadcastInterval %d is more than the run's %d iterations: the batchers would collect with the first policy to the end; want 1 to %d",
			ErrConfig, c.BroadcastInterval, iters, iters)
	}
	return nil
}

// DefaultAlgo is the algorithm of a Config that names none. The engine links no algorithm
// itself: a program that trains imports package engine/algos (or its own algorithms).
const DefaultAlgo = "ppo"

// maxEvalEpisodes bounds EvalEpisodes: a million episodes is days of evaluation already, and a
// typo of 2e9 failed only after the training, allocating its returns.
const maxEvalEpisodes = 1_000_000

// checkAlgoFields refuses the fields of one family of algorithms set for another, which would
// be silently unused: QueueSize, BroadcastInterval and MaxPolicyLag belong to the asynchronous
// algorithms (impala, appo), SyncFrac to ddppo. A QueueSize of 2 and a BroadcastInterval of 1
// pass (their defaults, which config.json files of ppo runs hold).
func (c Config) checkAlgoFields() error {
	var bad []string
	if !sequential(c.Algo) {
		if c.QueueSize != 0 && c.QueueSize != 2 {
			bad = append(bad, fmt.Sprintf("queue_size %d", c.QueueSize))
		}
		if c.BroadcastInterval != 0 && c.BroadcastInterval != 1 {
			bad = append(bad, fmt.Sprintf("broadcast_interval %d", c.BroadcastInterval))
		}
		if c.MaxPolicyLag != 0 {
			bad = append(bad, fmt.Sprintf("max_policy_lag %d", c.MaxPolicyLag))
		}
	}
	if !capabilities(c.Algo).Ranks && c.SyncFrac != 0 {
		bad = append(bad, fmt.Sprintf("sync_frac %g", c.SyncFrac))
	}
	if !capabilities(c.Algo).Replay {
		bad = append(bad, c.replayFieldsSet()...)
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: not used by --algo %s (queue_size, broadcast_interval and max_policy_lag are impala's and appo's, sync_frac ddppo's, the replay buffer's fields dqn's and sac's); drop them or choose the algorithm they belong to",
		ErrConfig, strings.Join(bad, ", "), c.Algo)
}

// checkMemory refuses a run whose buffers cannot fit in the memory available (package
// learner.Footprint), before anything is allocated or written: a typo such as --envs 5000000, or
// a QueueSize of 1e9, is an error naming the fields, not an out-of-memory death after the run
// directory was made. The figure is a lower bound of what the run allocates: the rollout's
// columns in the batchers and in the learner's batch (8 bytes per observation and action value
// and 64 per row), the ring of QueueSize rollouts of an asynchronous algorithm, and, for each
// minibatch row, the hidden activations of actor and critic with their gradients (16 bytes per
// unit). Measured on CartPole-v1 with 10,000 envs (1.28M rows): 1.14 GB of resident memory,
// where the estimate says 0.77 GB.
func (c Config) checkMemory(env envs.Spec) error {
	units := int64(0)
	for _, h := range c.Hidden {
		units += int64(h)
	}
	copies := int64(1)
	if sequential(c.Algo) {
		copies += int64(c.QueueSize) // the ring's rollouts beside the learner's batch
	}
	f := learner.Footprint{Workers: int64(c.Workers), Envs: int64(c.Envs), Steps: int64(c.RolloutSteps),
		ObsDim: int64(env.Observation.Dim()), ActDim: int64(env.Action.Dim()), Copies: copies,
		Minibatches: int64(c.Minibatches), HiddenUnits: units}
	what := fmt.Sprintf("workers %d × envs %d × rollout_steps %d", c.Workers, c.Envs, c.RolloutSteps)
	if copies > 1 {
		what += fmt.Sprintf(" with queue_size %d", c.QueueSize)
	}
	if err := f.Check(what, "use fewer envs or steps per iteration (or a smaller queue)"); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// Iterations is the number of PPO iterations the run makes.
func (c Config) Iterations() int {
	return int(c.TotalSteps / int64(c.Workers*c.Envs*c.RolloutSteps))
}

// foreignBoxLR is the default learning rate for fine-tuning a foreign policy with continuous
// actions. CleanRL's 3e-4 was set for its 64-wide tanh MLP starting at σ = 1; Adam moves every
// weight by about the rate whatever its gradient, so a pretrained policy that is both wider
// and sharper moves much further per step: fine-tuning SB3's SAC Pendulum actor (256×256
// ReLU, σ ≈ 0.2) took approx_kl 0.1–2.3 per iteration where PPO's clipping expects about
// 0.01, and its return fell from −194 to −540…−900. At 1e-4, with its log_std layer kept out
// of PPO's reach (engine/foreign.go), it keeps −176 and −178 after 200k steps on seeds 1 and
// 2 (−210 and −189 after 100k); CleanRL's Pendulum export keeps its return at either rate.
const foreignBoxLR = 1e-4

// maxParams bounds the parameters of the native MLPs a config asks for (2^28, 1 GiB of float32
// weights, 4 GiB with gradients and Adam's two moments): a typo such as "hidden": [100000,
// 100000] is refused before anything is allocated.
const maxParams = 1 << 28

// maxLayers bounds the hidden layers of the native MLPs: "hidden": [1, 1, …] with 100,000
// ones held ONNX Runtime's session creation for 13 minutes and 4.5 GB.
const maxLayers = 64

// checkHidden checks the MLP widths: each from 1 to 2^16, and the actor and critic together
// within maxParams.
func (c Config) checkHidden(env envs.Spec) error {
	in := int64(env.Observation.Dim())
	out := int64(env.Action.Dim())
	if d, ok := env.Action.(envs.Discrete); ok {
		out = int64(d.N)
	}
	if len(c.Hidden) > maxLayers {
		return fmt.Errorf("%w: Hidden has %d layers, more than %d: ONNX Runtime would take minutes to build the policy's session; use fewer layers",
			ErrConfig, len(c.Hidden), maxLayers)
	}
	params := int64(0)
	for _, head := range []int64{out, 1} { // actor, critic
		prev := in
		for i, h := range c.Hidden {
			if h < 1 || h > 1<<16 {
				return fmt.Errorf("%w: Hidden[%d] = %d, want 1 to %d", ErrConfig, i, h, 1<<16)
			}
			params += prev*int64(h) + int64(h)
			prev = int64(h)
		}
		params += prev*head + head
	}
	if params > maxParams {
		return fmt.Errorf("%w: Hidden %v makes %d parameters (%.1f GiB with gradients and Adam's state), more than %d: use smaller layers",
			ErrConfig, c.Hidden, params, float64(params)*16/(1<<30), maxParams)
	}
	return nil
}

// orDefault sets *v to d when it is zero (unset).
func orDefault[T int | int64 | float64](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

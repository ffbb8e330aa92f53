package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/preset"
	"github.com/towerrl/towerrl/internal/bounded"
)

// configFlags are the flags that set engine.Config fields. Each one given on the command line
// overrides the field, over the preset's and the --config file's value.
type configFlags struct {
	env, algo, initPolicy, preset, activation, hidden string
	towers, workers, envs, epochs, minibatches        int
	rollout, queue, broadcast, evalEps, ckptEvery     int
	total, maxLag, evalEvery, gifEvery                int64
	seed                                              uint64
	noSpin, normObs, normReward, constantLR           bool
	syncFrac, lr, gamma, lambda, clip, ent, logStd    float64
	stopAt                                            float64
	head                                              cli.HeadFlags
	// Off-policy algorithms (dqn, sac).
	bufferSize, trainFreq, gradSteps, batchSize int
	criticWarmup, sdeFreq                       int
	learningStarts                              int64
	noBufferCkpt, useSDE                        bool
	dqnTarget                                   string
	overlap                                     bool
	precision                                   string
}

func (f *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.env, "env", "", "Gymnasium environment id (required unless in --config)")
	fs.StringVar(&f.algo, "algo", "", "algorithm: "+strings.Join(algo.Names(), ", ")+" (default ppo)")
	fs.StringVar(&f.preset, "preset", "", "tuned settings to start from: ALGO/ENV (e.g. ppo/Pendulum-v1; ENV alone for --algo's), a preset file (.json), or none for the plain defaults (default: the preset of --algo and --env when towerrl has one; none when fine-tuning an --init-policy). See docs/presets.md")
	fs.IntVar(&f.towers, "towers", 0, "learner towers (default 1)")
	fs.IntVar(&f.workers, "workers", 0, "batcher workers (default 1)")
	fs.IntVar(&f.envs, "envs", 0, "envs per worker (default 4 for Discrete actions, 1 for Box)")
	fs.IntVar(&f.rollout, "rollout-steps", 0, "steps per env per iteration (default 128 Discrete, 2048 Box)")
	fs.Int64Var(&f.total, "total-steps", 0, "env steps to train for (default 500000 Discrete, 1000000 Box; appo 600000 Discrete, impala 1000000)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed")
	fs.BoolVar(&f.noSpin, "no-spin", false, "towers park at once instead of spinning while they wait for each other (machines shared with other work; same results)")
	fs.StringVar(&f.initPolicy, "init-policy", "", "pretrained ONNX policy to fine-tune")
	fs.StringVar(&f.precision, "matmul-precision", "", "the learner's matrix products: float32 (default, exact) or bf16 (operands rounded to bfloat16, float32 sums, on Intel AMX; float32 on a CPU without it). See docs/benchmarks.md")
	fs.IntVar(&f.queue, "queue-size", 0, "impala/appo: rollouts buffered between batchers and learner (default 2)")
	fs.IntVar(&f.broadcast, "broadcast-interval", 0, "impala/appo: learner iterations between weight publishes (default 1)")
	fs.Int64Var(&f.maxLag, "max-policy-lag", 0, "impala/appo: drop rollouts more policy versions behind than this (default 0: never)")
	fs.IntVar(&f.epochs, "epochs", 0, "passes over each rollout (num_sgd_iter; default 4 Discrete, 10 Box; appo 3 Discrete, impala 2)")
	fs.IntVar(&f.minibatches, "minibatches", 0, "minibatches per pass (default 4 Discrete, 32 Box)")
	fs.Float64Var(&f.syncFrac, "sync-frac", 0, "ddppo: once this fraction of the ranks (rounded up) has finished collecting, the others stop early, keeping at least 25% of the rollout (default 0.6, which on 2 ranks never preempts: use 0.5; 1: off)")
	fs.Float64Var(&f.lr, "lr", 0, "Adam's learning rate (default 2.5e-4 Discrete, 3e-4 Box), annealed linearly to 0 unless --constant-lr")
	fs.BoolVar(&f.constantLR, "constant-lr", false, "keep the learning rate constant instead of annealing it")
	fs.Float64Var(&f.gamma, "gamma", 0, "discount γ (default 0.99)")
	fs.Float64Var(&f.lambda, "gae-lambda", 0, "GAE's λ (default 0.95)")
	fs.Float64Var(&f.clip, "clip-coef", 0, "PPO's clipping ε (default 0.2)")
	fs.Float64Var(&f.ent, "ent-coef", 0, "entropy bonus weight (default 0.01 Discrete, 0 Box; 0 given here: none)")
	fs.StringVar(&f.hidden, "hidden", "", "MLP widths, comma-separated (default 64,64)")
	fs.StringVar(&f.activation, "activation", "", "hidden activation: tanh or relu (default tanh)")
	fs.Float64Var(&f.logStd, "logstd-init", 0, "Gaussian head's initial log std (default 0; sac with --use-sde: gSDE's log σ matrix, default -3)")
	fs.IntVar(&f.evalEps, "eval-episodes", 0, "deterministic episodes of the final evaluation (default 10; -1: none, and no evaluations during training; may change on --resume)")
	fs.Int64Var(&f.evalEvery, "eval-every", 0, "evaluate --eval-episodes deterministic episodes every N iterations during training (env steps for dqn and sac), keeping the best policy as best_policy.onnx (default 0: only at the end, and no --stop-at-return; may change on --resume)")
	fs.Float64Var(&f.stopAt, "stop-at-return", 0, "end the run (checkpoint, policy.onnx, exit 0) once an evaluation's mean return reaches this; needs --eval-every (may change on --resume)")
	fs.Int64Var(&f.gifEvery, "gif-every", 0, "draw one deterministic episode every N iterations (env steps for dqn and sac) into the run directory's gifs/ and TensorBoard's images, as eval --gif does, MuJoCo envs filmed offscreen by MuJoCo (default 0: none; may change on --resume)")
	fs.IntVar(&f.ckptEvery, "checkpoint-every", 0, "iterations between checkpoints (default 10; may change on --resume)")
	fs.BoolVar(&f.normObs, "norm-obs", false, "normalise observations by their running mean and variance, the map frozen into policy.onnx (--norm-obs=false turns a preset's off)")
	fs.BoolVar(&f.normReward, "norm-reward", false, "scale rewards by the running std of the discounted return (--norm-reward=false turns a preset's off)")
	fs.IntVar(&f.criticWarmup, "critic-warmup", 0, "sac fine-tuning an --init-policy: updates its new critics take alone before the actor moves (default 2000; -1: none)")
	fs.IntVar(&f.bufferSize, "buffer-size", 0, "dqn/sac: transitions the replay buffer keeps (default 1000000, or total-steps when fewer)")
	fs.Int64Var(&f.learningStarts, "learning-starts", 0, "dqn/sac: env steps of uniformly random actions before the first update (default 100; 0 given here: learn from the first collection)")
	fs.IntVar(&f.trainFreq, "train-freq", 0, "dqn/sac: steps of each env per collection (default 4 dqn, 1 sac)")
	fs.IntVar(&f.gradSteps, "gradient-steps", 0, "dqn/sac: updates after each collection (default 1; -1: as many as the transitions collected)")
	fs.IntVar(&f.batchSize, "batch-size", 0, "dqn/sac: rows per update (default 32 dqn, 256 sac)")
	fs.StringVar(&f.dqnTarget, "dqn-target", "", "dqn: the bootstrap target, double (Double DQN's, the default) or max (SB3's and the original DQN's)")
	fs.BoolVar(&f.overlap, "overlap-collection", false, "dqn/sac: collect the next train_freq steps while the learner updates (the batchers act one collection behind it; same updates per env step)")
	fs.BoolVar(&f.useSDE, "use-sde", false, "sac: explore with gSDE, noise that is a function of the state drawn at each collection's start (SB3's use_sde; --use-sde=false turns a preset's off)")
	fs.IntVar(&f.sdeFreq, "sde-sample-freq", 0, "sac with --use-sde: steps of each env between gSDE's draws within a collection (default -1: one draw per collection)")
	fs.BoolVar(&f.noBufferCkpt, "no-buffer-checkpoint", false, "dqn/sac: leave the replay buffer out of the checkpoints (smaller, faster; a resume starts with an empty buffer and is then approximate)")
	f.head.Register(fs)
}

// overrides returns the edit that applies every config flag given on fs's command line.
func (f *configFlags) overrides(fs *flag.FlagSet) (func(*engine.Config), error) {
	var hidden []int
	if f.hidden != "" {
		for _, s := range strings.Split(f.hidden, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || w < 1 {
				return nil, fmt.Errorf("--hidden %q: want positive widths separated by commas, e.g. 256,256", f.hidden)
			}
			hidden = append(hidden, w)
		}
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	set := map[string]func(*engine.Config){
		"env":              func(c *engine.Config) { c.Env = f.env },
		"algo":             func(c *engine.Config) { c.Algo = f.algo },
		"preset":           func(c *engine.Config) { c.Preset = f.preset },
		"towers":           func(c *engine.Config) { c.Towers = f.towers },
		"workers":          func(c *engine.Config) { c.Workers = f.workers },
		"envs":             func(c *engine.Config) { c.Envs = f.envs },
		"rollout-steps":    func(c *engine.Config) { c.RolloutSteps = f.rollout },
		"total-steps":      func(c *engine.Config) { c.TotalSteps = f.total },
		"seed":             func(c *engine.Config) { c.Seed = f.seed },
		"no-spin":          func(c *engine.Config) { c.NoSpin = f.noSpin },
		"matmul-precision": func(c *engine.Config) { c.MatmulPrecision = f.precision },
		"init-policy":      func(c *engine.Config) { c.InitPolicy = f.initPolicy },
		"epochs":           func(c *engine.Config) { c.Epochs = f.epochs },
		"minibatches":      func(c *engine.Config) { c.Minibatches = f.minibatches },
		"sync-frac":        func(c *engine.Config) { c.SyncFrac = f.syncFrac },
		"lr":               func(c *engine.Config) { c.LR = f.lr },
		"constant-lr":      func(c *engine.Config) { c.ConstantLR = f.constantLR },
		"gamma":            func(c *engine.Config) { c.Gamma = f.gamma },
		"gae-lambda":       func(c *engine.Config) { c.Lambda = f.lambda },
		"clip-coef":        func(c *engine.Config) { c.ClipCoef = f.clip },
		"ent-coef": func(c *engine.Config) {
			if c.EntCoef = f.ent; f.ent == 0 {
				c.EntCoef = -1 // an explicit 0: no bonus (engine.ParseConfig's convention)
			}
		},
		"hidden":      func(c *engine.Config) { c.Hidden = hidden },
		"activation":  func(c *engine.Config) { c.Activation = f.activation },
		"logstd-init": func(c *engine.Config) { c.LogStdInit = float32(f.logStd) },
		"norm-obs":    func(c *engine.Config) { c.NormObs = f.normObs },
		"norm-reward": func(c *engine.Config) { c.NormReward = f.normReward },
		// No evaluations asked for drops a preset's evaluations during training and the
		// stop_at_return they serve (dqn's CartPole and MountainCar presets), unless those
		// flags are given too.
		"eval-episodes": func(c *engine.Config) {
			if c.EvalEpisodes = f.evalEps; f.evalEps < 0 {
				if !given["eval-every"] {
					c.EvalEvery = 0
				}
				if !given["stop-at-return"] {
					c.StopAtReturn = nil
				}
			}
		},
		"eval-every": func(c *engine.Config) {
			if c.EvalEvery = f.evalEvery; f.evalEvery == 0 && !given["stop-at-return"] {
				c.StopAtReturn = nil
			}
		},
		"stop-at-return":   func(c *engine.Config) { r := f.stopAt; c.StopAtReturn = &r },
		"gif-every":        func(c *engine.Config) { c.GifEvery = f.gifEvery },
		"checkpoint-every": func(c *engine.Config) { c.CheckpointEvery = f.ckptEvery },
		// Asynchronous algorithms (impala, appo).
		"queue-size":         func(c *engine.Config) { c.QueueSize = f.queue },
		"broadcast-interval": func(c *engine.Config) { c.BroadcastInterval = f.broadcast },
		"max-policy-lag":     func(c *engine.Config) { c.MaxPolicyLag = f.maxLag },
		// Off-policy algorithms (dqn, sac).
		"buffer-size":   func(c *engine.Config) { c.BufferSize = f.bufferSize },
		"critic-warmup": func(c *engine.Config) { c.CriticWarmup = f.criticWarmup },
		"learning-starts": func(c *engine.Config) {
			if c.LearningStarts = f.learningStarts; f.learningStarts == 0 {
				c.LearningStarts = -1 // an explicit 0 (engine.ParseConfig's convention)
			}
		},
		"train-freq":           func(c *engine.Config) { c.TrainFreq = f.trainFreq },
		"gradient-steps":       func(c *engine.Config) { c.GradientSteps = f.gradSteps },
		"batch-size":           func(c *engine.Config) { c.BatchSize = f.batchSize },
		"no-buffer-checkpoint": func(c *engine.Config) { c.NoBufferCheckpoint = f.noBufferCkpt },
		"dqn-target":           func(c *engine.Config) { c.DQNTarget = f.dqnTarget },
		"overlap-collection":   func(c *engine.Config) { c.OverlapCollection = f.overlap },
		"use-sde":              func(c *engine.Config) { c.UseSDE = f.useSDE },
		"sde-sample-freq":      func(c *engine.Config) { c.SDESampleFreq = f.sdeFreq },
		// How a foreign --init-policy is bound (as batcher's and eval's flags).
		"head":          func(c *engine.Config) { c.Head = f.head.Head },
		"action-space":  func(c *engine.Config) { c.ActionSpace = f.head.ActionSpace },
		"logits-output": func(c *engine.Config) { c.LogitsOutput = f.head.Params },
		"logstd-output": func(c *engine.Config) { c.LogStdOutput = f.head.LogStd },
		"value-output":  func(c *engine.Config) { c.ValueOutput = f.head.Value },
	}
	var edits []func(*engine.Config)
	fs.Visit(func(fl *flag.Flag) {
		if o, ok := set[fl.Name]; ok {
			edits = append(edits, o)
		}
	})
	return func(c *engine.Config) {
		for _, o := range edits {
			o(c)
		}
	}, nil
}

// chosen is the preset a run starts from: p when ok, else none for the reason why.
type chosen struct {
	p   preset.Preset
	ok  bool
	why string
}

// resolve makes a new run's configuration from three layers, each over the one before: the
// preset in force (the --preset flag's, else the config file's "preset", else the preset of
// the run's algorithm and env: preset.Choose), the --config file's fields (configFile, read),
// and the flags given (change). The result names its preset ("none" when there is none).
func resolve(configFile []byte, change func(*engine.Config)) (engine.Config, chosen, error) {
	var first engine.Config // the env, algorithm, preset and fine-tune asked for
	if configFile != nil {
		var err error
		if first, err = engine.ParseConfig(configFile); err != nil {
			return first, chosen{}, fmt.Errorf("--config: %w", err)
		}
	}
	change(&first)
	p, ok, err := preset.Choose(first.Preset, first.Algo, first.Env, first.InitPolicy != "")
	if err != nil {
		return first, chosen{}, err
	}
	c := chosen{p: p, ok: ok}
	switch {
	case ok:
	case first.Preset == preset.None:
		c.why = "--preset none: the engine's defaults apply"
	case first.InitPolicy != "":
		c.why = "fine-tuning an --init-policy uses no preset unless --preset names one"
	default:
		c.why = fmt.Sprintf("towerrl has no %s preset for %s: the engine's defaults apply", orPPO(first.Algo), first.Env)
	}
	var cfg engine.Config
	if ok {
		if cfg, err = p.Base(); err != nil {
			return cfg, c, err
		}
	}
	if configFile != nil {
		if cfg, err = engine.ParseConfigOver(cfg, configFile); err != nil {
			return cfg, c, fmt.Errorf("--config: %w", err)
		}
	}
	change(&cfg)
	cfg.Preset = preset.None
	if ok {
		cfg.Preset = p.Name
	}
	return cfg, c, nil
}

// showPreset writes the preset in force for cfg (from resolve) as one JSON object: its name,
// what it is tuned for, where its numbers come from, and its fields; or "none" and why.
func showPreset(w io.Writer, cfg engine.Config, c chosen) error {
	p := c.p
	if !c.ok {
		if cfg.Env == "" {
			return errors.New("--show-preset needs --env (or --config with an env, or --preset NAME)")
		}
		return cli.Summary(w, struct {
			Preset string `json:"preset"`
			Why    string `json:"why"`
		}{preset.None, c.why})
	}
	return cli.Summary(w, struct {
		Preset string          `json:"preset"`
		Algo   string          `json:"algo,omitempty"`
		Env    string          `json:"env,omitempty"`
		About  string          `json:"about"`
		Config json.RawMessage `json:"config"`
	}{p.Name, p.Algo, p.Env, p.About, p.Config})
}

func orPPO(a string) string {
	if a == "" {
		return engine.DefaultAlgo
	}
	return a
}

// readConfig reads the --config file, nil for none.
func readConfig(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	return bounded.ReadFile("--config", path, bounded.ConfigLimit)
}

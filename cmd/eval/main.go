// Command eval runs whole episodes with an ONNX policy and prints their statistics.
//
//	eval --policy P.onnx --env ID --episodes K [--seed S] [--sample] [--envs N] [--gif FILE]
//
// Actions are the most probable ones (a Gaussian's mean; SAC's tanh of its mean, mapped onto
// the env's bounds) unless --sample is given. Env i of N runs ⌊(K+i)/N⌋ episodes, fixed in
// advance. One JSON object goes to stdout:
// {"episodes", "return_mean", "return_std", "length_mean", "returns", "policy", "env"}.
//
// --gif FILE also writes env 0's first episode (the first of "returns" when deterministic) as an
// animated GIF to FILE, a new file: the classic-control envs drawn as Gymnasium draws them,
// with the return so far in the top-left corner (package envs/render; "gif" in the summary).
//
// # Policies from other libraries
//
// Policies exported by Stable-Baselines3 (both documented recipes, SAC, VecNormalize baked
// in), SB3-contrib RecurrentPPO, RLlib (MLP and LSTM), Sample Factory and CleanRL run with no
// extra flag: the head and the tensors carrying it are recognised from the graph (inner
// tensors are exposed as outputs), a fixed batch is made dynamic (checked against the
// original), recurrent states are carried per env and zeroed when an episode starts, and
// seq_lens, episode_starts and dummy inputs are fed. What was bound goes to the log. Flags
// override any part of it: --head (categorical, gaussian, tanh-gaussian), --logits-output,
// --logstd-output, --value-output, --actions-output (graph outputs or inner tensors; the
// log_std may be an initializer), --action-scale env|none for SAC's squashed actions, and
// --action-space. A graph that fits no head is refused with its candidate tensors, their
// shapes and the flags to pass. A policy with no action distribution (only its own actions,
// or a mean without a log_std) runs deterministically only: --sample is then refused.
//
// Sizes are checked before anything is allocated: --episodes at least 1, --envs 0 (the
// default) or more, --threads -1 (one per core) or 1 to the cores, and the buffers of the
// envs and the episodes' results against the memory available (MemAvailable in
// /proc/meminfo, or the cgroup's limit when lower); a size that does not fit is an error
// naming the flag and the most that fits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/envs"
	"go.uber.org/zap"
)

type summary struct {
	Episodes   int         `json:"episodes"`
	ReturnMean float64     `json:"return_mean"`
	ReturnStd  float64     `json:"return_std"`
	LengthMean float64     `json:"length_mean"`
	Returns    []float64   `json:"returns"`
	Policy     string      `json:"policy"`
	Env        string      `json:"env"`
	Device     string      `json:"device"`
	GIF        *gifSummary `json:"gif,omitempty"`
}

type options struct {
	policy, env     string
	episodes, envs  int
	seed            uint64
	sample          bool
	maxEpisodeSteps int
	flags           cli.PolicyFlags
	gif             gifFlags
	mem             batcher.Memory // what the size checks allow; zero: batcher.AvailableMemory()
}

func main() {
	var o options
	fs := flag.CommandLine
	cli.Usage(fs, "eval", "run whole episodes with an ONNX policy and report their returns (docs/tools.md)",
		"bin/eval --policy runs/cp/policy.onnx --env CartPole-v1 --episodes 100")
	fs.StringVar(&o.policy, "policy", "", `ONNX policy file, or "random" (required)`)
	fs.StringVar(&o.env, "env", "", "Gymnasium environment id (required)")
	fs.IntVar(&o.episodes, "episodes", 10, "episodes to run")
	fs.IntVar(&o.envs, "envs", 0, "environments run side by side (default: min(episodes, 16))")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for env resets and action sampling")
	fs.BoolVar(&o.sample, "sample", false, "sample actions instead of taking the most probable one")
	o.flags.Register(fs)
	o.gif.register(fs)
	var lf cli.LogFlags
	lf.Register(fs)
	flag.Parse()
	cli.Main("eval", lf, func(ctx context.Context, log *zap.Logger) error { return run(ctx, os.Stdout, log, o) })
}

// validate checks every flag before anything is allocated, and returns the env's spec,
// resolved once here where the tool starts.
func validate(o options) (envs.Spec, error) {
	switch {
	case o.policy == "" || o.env == "":
		return envs.Spec{}, errors.New("--policy and --env are required")
	case o.episodes < 1:
		return envs.Spec{}, fmt.Errorf("--episodes %d: want at least 1", o.episodes)
	case o.envs < 0:
		return envs.Spec{}, fmt.Errorf("--envs %d: want at least 1 (or 0: min(--episodes, 16))", o.envs)
	}
	if err := o.flags.CheckThreads(); err != nil {
		return envs.Spec{}, err
	}
	if err := o.gif.check(o.env); err != nil {
		return envs.Spec{}, err
	}
	env, err := envs.Lookup(o.env)
	if err != nil {
		return env, err
	}
	if o.mem.Source == "" {
		o.mem = batcher.AvailableMemory()
	}
	err = batcher.CheckEvalMemory(batcher.EvalConfig{Env: env, Episodes: o.episodes, Envs: o.envs}, o.mem)
	var me *batcher.MemoryError
	switch {
	case !errors.As(err, &me):
		return env, err
	case me.FitEnvsPerWorker >= 1:
		return env, fmt.Errorf("--envs %d: %w; at most --envs %d fits with --episodes %d", me.EnvsPerWorker, err, me.FitEnvsPerWorker, o.episodes)
	case me.FitEpisodes >= 1:
		return env, fmt.Errorf("--episodes %d: %w; at most --episodes %d fits with --envs %d", o.episodes, err, me.FitEpisodes, me.EnvsPerWorker)
	}
	return env, fmt.Errorf("--envs %d --episodes %d: %w; lower both", me.EnvsPerWorker, o.episodes, err)
}

func run(ctx context.Context, stdout io.Writer, log *zap.Logger, o options) error {
	env, err := validate(o)
	if err != nil {
		return err
	}
	var policy *bind.Policy
	if o.policy != "random" {
		cfg, err := o.flags.Config(log)
		if err != nil {
			return err
		}
		if policy, err = bind.Load(ctx, o.policy, env, cfg); err != nil {
			return err
		}
	}
	log.Info("evaluating", zap.String("policy", o.policy), zap.String("env", o.env), zap.Int("episodes", o.episodes))
	cfg := batcher.EvalConfig{Env: env, Episodes: o.episodes, Envs: o.envs, Seed: o.seed, Deterministic: !o.sample}
	res, err := batcher.Evaluate(ctx, cfg, policy)
	if err != nil {
		return err
	}
	g, err := o.gif.write(ctx, log, cfg, policy)
	if err != nil {
		return err
	}
	return cli.Summary(stdout, summary{Episodes: len(res.Returns), ReturnMean: res.ReturnMean, ReturnStd: res.ReturnStd,
		LengthMean: res.LengthMean, Returns: res.Returns, Policy: o.policy, Env: o.env, Device: res.Device, GIF: g})
}

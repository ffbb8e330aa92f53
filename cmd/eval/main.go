// Command eval runs whole episodes with an ONNX policy and prints their statistics.
//
//	eval --policy P.onnx --env ID --episodes K [--seed S] [--sample] [--envs N]
//
// Actions are the most probable ones (a Gaussian's mean) unless --sample is given. Env i of N
// runs ⌊(K+i)/N⌋ episodes, fixed in advance. One JSON object goes to stdout:
// {"episodes", "return_mean", "return_std", "length_mean", "returns", "policy", "env"}.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/internal/cli"
	"go.uber.org/zap"
)

type summary struct {
	Episodes   int       `json:"episodes"`
	ReturnMean float64   `json:"return_mean"`
	ReturnStd  float64   `json:"return_std"`
	LengthMean float64   `json:"length_mean"`
	Returns    []float64 `json:"returns"`
	Policy     string    `json:"policy"`
	Env        string    `json:"env"`
	Device     string    `json:"device"`
}

type options struct {
	policy, env     string
	episodes, envs  int
	seed            uint64
	sample          bool
	maxEpisodeSteps int
	flags           cli.PolicyFlags
}

func main() {
	var o options
	fs := flag.CommandLine
	fs.StringVar(&o.policy, "policy", "", `ONNX policy file, or "random" (required)`)
	fs.StringVar(&o.env, "env", "", "Gymnasium environment id (required)")
	fs.IntVar(&o.episodes, "episodes", 10, "episodes to run")
	fs.IntVar(&o.envs, "envs", 0, "environments run side by side (default: min(episodes, 16))")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for env resets and action sampling")
	fs.BoolVar(&o.sample, "sample", false, "sample actions instead of taking the most probable one")
	o.flags.Register(fs)
	var lf cli.LogFlags
	lf.Register(fs)
	flag.Parse()
	cli.Main("eval", lf, func(ctx context.Context, log *zap.Logger) error { return run(ctx, os.Stdout, log, o) })
}

func run(ctx context.Context, stdout io.Writer, log *zap.Logger, o options) error {
	if o.policy == "" || o.env == "" {
		return errors.New("--policy and --env are required")
	}
	var policy *batcher.Policy
	if o.policy != "random" {
		cfg, err := o.flags.Config(log)
		if err != nil {
			return err
		}
		if policy, err = batcher.LoadPolicy(ctx, o.policy, o.env, cfg); err != nil {
			return err
		}
	}
	log.Info("evaluating", zap.String("policy", o.policy), zap.String("env", o.env), zap.Int("episodes", o.episodes))
	res, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: o.env, Episodes: o.episodes, Envs: o.envs, Seed: o.seed,
		Deterministic: !o.sample}, policy)
	if err != nil {
		return err
	}
	return cli.Summary(stdout, summary{Episodes: len(res.Returns), ReturnMean: res.ReturnMean, ReturnStd: res.ReturnStd,
		LengthMean: res.LengthMean, Returns: res.Returns, Policy: o.policy, Env: o.env, Device: res.Device})
}

// Command batcher collects experience: W workers each step M envs with an ONNX policy (or
// uniformly random actions), N env steps in total, optionally written as .npz shards.
//
//	batcher --policy P.onnx|random --env ID --envs M --workers W --steps N [--out DIR]
//	        [--deterministic] [--seed S] [--device cpu|cuda|auto] [--rollout T] [--env-threads K]
//
// N is rounded up to a multiple of W·M. --env-threads K steps each worker's M envs on K
// goroutines (same trajectories): with a GPU, one worker with many envs (--workers 1
// --envs 4096 --device cuda --env-threads <cores>) makes one inference call per step. Shards (DIR/shard-NNNNNN.npz, one per rollout of T
// steps) hold the D4RL keys observations, actions, rewards, terminals, timeouts,
// next_observations, plus logp, values and policy_version; each is written under a temporary
// name and renamed when complete. A progress bar goes to stderr; one JSON object to stdout:
// steps, episodes, return_mean, return_std, steps_per_sec, policy, env, device, and the time split.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/internal/cli"
	"go.uber.org/zap"
)

type options struct {
	policy, env, out       string
	envs, workers, rollout int
	envThreads             int
	steps                  int64
	seed                   uint64
	deterministic          bool
	flags                  cli.PolicyFlags
}

type summary struct {
	Steps       int64    `json:"steps"`
	Episodes    int      `json:"episodes"`
	ReturnMean  float64  `json:"return_mean"`
	ReturnStd   float64  `json:"return_std"`
	StepsPerSec float64  `json:"steps_per_sec"`
	Policy      string   `json:"policy"`
	Env         string   `json:"env"`
	Device      string   `json:"device"`
	Workers     int      `json:"workers"`
	Envs        int      `json:"envs_per_worker"`
	EnvThreads  int      `json:"env_threads"`
	Shards      []string `json:"shards,omitempty"`
	Split       split    `json:"time_split"`
}

type split struct {
	Env       float64 `json:"env"`
	Inference float64 `json:"inference"`
	Sampling  float64 `json:"sampling"`
	Buffers   float64 `json:"buffers"`
}

func main() {
	var o options
	fs := flag.CommandLine
	fs.StringVar(&o.policy, "policy", "", `ONNX policy file, or "random" (required)`)
	fs.StringVar(&o.env, "env", "", "Gymnasium environment id, e.g. CartPole-v1 (required)")
	fs.IntVar(&o.envs, "envs", 64, "environments per worker (M)")
	fs.IntVar(&o.workers, "workers", 1, "worker goroutines (W), each with its own ONNX session")
	fs.IntVar(&o.envThreads, "env-threads", 1, "goroutines stepping each worker's envs (K; keep W·K within the cores)")
	fs.Int64Var(&o.steps, "steps", 100000, "total env steps to collect (rounded up to a multiple of W·M)")
	fs.IntVar(&o.rollout, "rollout", 128, "steps per env per rollout (T); one shard per rollout")
	fs.StringVar(&o.out, "out", "", "folder for .npz shards (default: write nothing)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for env resets and action sampling")
	fs.BoolVar(&o.deterministic, "deterministic", false, "take the most probable action instead of sampling")
	o.flags.Register(fs)
	var lf cli.LogFlags
	lf.Register(fs)
	flag.Parse()
	cli.Main("batcher", lf, func(ctx context.Context, log *zap.Logger) error {
		return run(ctx, os.Stdout, os.Stderr, log, o)
	})
}

func run(ctx context.Context, stdout, stderr io.Writer, log *zap.Logger, o options) error {
	switch {
	case o.policy == "":
		return errors.New(`--policy is required (a .onnx file, or "random")`)
	case o.env == "":
		return errors.New("--env is required")
	case o.steps < 1:
		return fmt.Errorf("--steps %d: want at least 1", o.steps)
	case o.envs < 1 || o.workers < 1 || o.rollout < 1:
		return fmt.Errorf("--envs, --workers and --rollout must be at least 1")
	}
	var shards *batcher.ShardWriter
	if o.out != "" {
		var err error
		if shards, err = batcher.NewShardWriter(o.out); err != nil {
			return err
		}
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
	perRound := int64(o.envs * o.workers)
	rounds := (o.steps + perRound - 1) / perRound // steps per env in total
	b, err := batcher.New(ctx, batcher.Config{Env: o.env, Workers: o.workers, EnvsPerWorker: o.envs, EnvThreads: o.envThreads,
		Steps: int(min(int64(o.rollout), rounds)), Seed: o.seed, Deterministic: o.deterministic, Logger: log}, policy)
	if err != nil {
		return err
	}
	defer b.Close()
	total := rounds * perRound
	log.Info("collecting", zap.String("env", o.env), zap.String("policy", o.policy), zap.Int("workers", o.workers),
		zap.Int("envs_per_worker", o.envs), zap.Int64("steps", total))
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(stderr), progressbar.OptionSetItsString("steps"),
		progressbar.OptionShowIts(), progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetDescription("collecting"), progressbar.OptionClearOnFinish())
	sum := summary{Policy: o.policy, Env: o.env, Device: b.Device(), Workers: o.workers, Envs: o.envs, EnvThreads: max(o.envThreads, 1)}
	var stats batcher.Stats
	start := time.Now()
	for done := int64(0); done < rounds; {
		t := int(min(int64(o.rollout), rounds-done))
		r, err := b.Collect(ctx, t)
		if err != nil {
			return err
		}
		done += int64(t)
		for _, e := range r.Episodes {
			stats.Add(e.Return)
		}
		if shards != nil {
			path, err := shards.Write(r)
			if err != nil {
				return err
			}
			sum.Shards = append(sum.Shards, path)
		}
		bar.Add64(int64(t) * perRound)
		bar.Describe(fmt.Sprintf("episodes %d, mean return %.1f", stats.N, stats.Mean()))
	}
	elapsed := time.Since(start)
	bar.Finish()
	tm := b.Timings()
	busy := (tm.Env + tm.Inference + tm.Sampling + tm.Buffers).Seconds()
	if busy > 0 {
		sum.Split = split{Env: tm.Env.Seconds() / busy, Inference: tm.Inference.Seconds() / busy,
			Sampling: tm.Sampling.Seconds() / busy, Buffers: tm.Buffers.Seconds() / busy}
	}
	sum.Steps = total
	sum.Episodes = stats.N
	sum.ReturnMean, sum.ReturnStd = stats.Mean(), stats.Std()
	sum.StepsPerSec = float64(total) / elapsed.Seconds()
	log.Info("done", zap.Int64("steps", total), zap.Int("episodes", sum.Episodes), zap.Float64("steps_per_sec", sum.StepsPerSec))
	return cli.Summary(stdout, sum)
}

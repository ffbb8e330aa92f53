// Command batcher collects experience: W workers each step M envs with an ONNX policy (or
// uniformly random actions), N env steps in total, optionally written as .npz shards.
//
//	batcher --policy P.onnx|random --env ID --envs M --workers W --steps N [--out DIR [--append]]
//	        [--deterministic] [--seed S] [--device cpu|cuda|auto] [--rollout T] [--env-threads K]
//
// N is rounded up to a multiple of W·M. --pipeline steps each worker's M envs in two halves on
// two goroutines that take turns in ONNX Runtime (batcher.Config.Pipeline): one half's env
// steps, sampling and bookkeeping run while the other half's inference does, so a worker's
// inference is no longer held up by them; same shards, about 1.2 cores a worker. --env-threads K steps each worker's M envs on K
// goroutines (same trajectories): with a GPU, one worker with many envs (--workers 1
// --envs 4096 --device cuda --env-threads <cores>) makes one inference call per step.
//
// # Policies from other libraries
//
// Policies exported by Stable-Baselines3 (both documented recipes, SAC, VecNormalize baked
// in), SB3-contrib RecurrentPPO, RLlib (MLP and LSTM), Sample Factory and CleanRL run with no
// extra flag: the head and the tensors carrying it are recognised from the graph (inner
// tensors are exposed as outputs), recurrent states are carried per env (zeroed when an
// episode starts) and seq_lens, episode_starts and dummy inputs are fed; the log says what
// was bound. A fixed batch (exports without dynamic axes) is made dynamic at load and checked
// against the original row by row, so the M envs still take one inference call per step;
// when it cannot be, the log says so and each worker runs the model one fixed batch per call.
// Flags override what was recognised: --head, --logits-output, --logstd-output,
// --value-output, --actions-output, --action-scale env|none, --action-space. A policy with no
// action distribution (only its own actions, or a mean without a log_std) needs
// --deterministic, and its log-probabilities are 0.
//
// SAC's squashed Gaussian (tanh-gaussian) is sampled as u ~ N(mean, σ) and the envs take
// tanh(u) mapped onto their bounds (--action-scale none: as it is). Shards hold the actions
// the envs took, as for every policy; their logp is the Gaussian log-density of u, without
// the tanh correction (batcher.Rollout says why).
//
// # Sizes
//
// Every size is checked before anything is allocated: --envs, --workers, --rollout and
// --steps at least 1, --env-threads at least 1, --threads -1 (one per core) or 1 to the
// cores, and the buffers of W × M envs × T steps (plus the shard writer's) against the memory
// available (MemAvailable in /proc/meminfo, or the cgroup's limit when lower). A size that
// does not fit is an error naming the flags and the most that fits.
//
// # Datasets
//
// With --out, each rollout of T steps becomes a shard DIR/shard-NNNNNN.npz holding the D4RL
// keys observations, actions, rewards, terminals, timeouts, next_observations, plus logp,
// values and policy_version. DIR/manifest.json records every run that wrote into the folder:
// env, observation shape and action space, policy path and sha256 ("random" for the random
// policy), seed, deterministic, workers, envs per worker, rollout, steps, start and end
// times, whether the run completed, and its shards with their row counts.
//
// A folder that already holds shards or a manifest is refused unless --append is given;
// --append numbers the new shards after the highest one there, never replacing one, and adds
// the run to the manifest. An appended run must collect the same env with the same
// observation and action layout as the manifest's runs, and must not repeat one of them (same
// policy bytes, --seed and --deterministic give the same trajectories). Shards that no
// manifest describes (written by an older batcher) cannot be appended to.
//
// The writer holds an exclusive lock (flock on DIR/.lock, which holds its PID) for its whole
// run; a second writer into the same folder is refused with the PID of the first. The run
// enters the manifest before its first shard; a shard is written whole under its final name
// (temporary file, sync, rename), then the manifest listing it replaces the old one
// atomically, so a kill at any moment leaves whole shards: the next writer removes the one
// shard the manifest does not list yet, temporary files, and a run that recorded no shard. A
// run that writes no shard into a folder it made removes the folder.
//
// A progress bar goes to stderr; one JSON object to stdout: steps, episodes, return_mean,
// return_std, steps_per_sec, start_unix and end_unix (the collection's span), policy, env,
// device, the shards, the manifest and the time split.
//
// # Remote batchers
//
//	batcher --connect URL --creds FILE [--env ID] [--workers W] [--env-threads K] [--device D] [--threads N]
//	        [--id NAME] [--ca CA.pem] [--namespace NS] [--codec s2|zstd|none] [--connect-timeout 1m] [--info]
//
// collects for a learner serving on URL (train --serve prints it) with one of the
// credentials it wrote into its run directory (DIR/creds/batcher-K.creds, one per batcher:
// copy it to the batcher's machine; the batcher's ID comes from it). The
// batcher registers with the learner's coordinator, takes a collect task (env, number of
// envs, rollout length, seed, policy version floor), waits for a policy of at least the
// floor, and publishes every rollout to the learner, hot-swapping to each newer policy the
// learner publishes between rollouts. It runs until the learner ends the run, then exits 0;
// the first SIGINT or SIGTERM finishes the rollout under way, hands its task back and exits
// 0 too. The task's envs are spread over the largest number of workers up to --workers that
// divides them. --policy, --steps, --rollout, --envs, --seed, --out, --append and
// --deterministic do not apply (the learner decides them); --env, when given, is declared
// at registration so that a learner whose policy does not fit refuses the batcher at once,
// naming both observation shapes.
//
// Progress lines go to the log every 2 s (rollouts sent and confirmed stored, steps, steps/s,
// policy version, episodes, mean return); one JSON object to stdout at the end: batcher_id,
// session, tasks, rollouts, confirmed, steps, episodes, return_mean, steps_per_sec,
// rollouts_per_sec, policy_version, policy_swaps, bytes, raw_bytes, bytes_per_rollout,
// retries, device, workers, envs_per_worker, ended ("run ended" or "stopped").
//
// A refused credential, an address where nothing answers within --connect-timeout, a
// registration the learner refuses and a missing permission are errors that say what to do.
// Once connected the batcher rides out a learner restart: it reconnects, registers again
// and carries on.
//
// # Watching a learner
//
//	batcher --watch URL --creds FILE [--ca CA.pem] [--namespace NS] [--connect-timeout 1m]
//
// shows the learn-info lines a serving learner publishes (its metrics lines, one JSON object
// an iteration) on the log without collecting: it neither registers nor takes a task. It runs
// until the learner ends the run (a learner restart is ridden out) or the first SIGINT, then
// prints one JSON object: url, lines, last (the newest line), ended, seconds. `--connect URL
// --info` shows the same lines while collecting.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/dataset"
	"github.com/towerrl/towerrl/envs"
	"go.uber.org/zap"
)

type options struct {
	policy, env, out       string
	appendRun              bool
	envs, workers, rollout int
	envThreads             int
	pipeline               bool
	steps                  int64
	seed                   uint64
	deterministic          bool
	flags                  cli.PolicyFlags
	mem                    batcher.Memory  // what the size checks allow; zero: batcher.AvailableMemory()
	jsonLogs               bool            // --log-json: progress as JSON log lines, no bar
	stop                   <-chan struct{} // closed by the first SIGINT/SIGTERM: finish the rollout and stop
	remote                 remoteOptions   // --connect and the flags that go with it
	set                    map[string]bool // flags given on the command line
}

type summary struct {
	Steps       int64    `json:"steps"`
	Episodes    int      `json:"episodes"`
	ReturnMean  *float64 `json:"return_mean"` // null when no episode ended, as train writes
	ReturnStd   *float64 `json:"return_std"`
	StepsPerSec float64  `json:"steps_per_sec"`
	// The collection's span (after set-up) as Unix times in seconds: batchers run at once are
	// compared over the union of their spans (scripts/batcher_bench.sh).
	Start      float64  `json:"start_unix"`
	End        float64  `json:"end_unix"`
	Policy     string   `json:"policy"`
	Env        string   `json:"env"`
	Device     string   `json:"device"`
	Workers    int      `json:"workers"`
	Envs       int      `json:"envs_per_worker"`
	EnvThreads int      `json:"env_threads"`
	Pipeline   bool     `json:"pipeline"`
	Shards     []string `json:"shards,omitempty"`
	Manifest   string   `json:"manifest,omitempty"`
	Split      split    `json:"time_split"`
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
	cli.Usage(fs, "batcher", "collect experience with an ONNX policy into .npz shards, or for a remote learner (docs/tools.md)",
		"bin/batcher --policy policy.onnx --env CartPole-v1 --envs 256 --workers 2 --steps 1000000 --out out/data",
		"bin/batcher --connect nats://learner:4222 --creds runs/r/creds/batcher-0.creds")
	fs.StringVar(&o.policy, "policy", "", `ONNX policy file, or "random" (required)`)
	fs.StringVar(&o.env, "env", "", "Gymnasium environment id, e.g. CartPole-v1 (required)")
	fs.IntVar(&o.envs, "envs", 64, "environments per worker (M)")
	fs.IntVar(&o.workers, "workers", 1, "worker goroutines (W), each with its own ONNX session")
	fs.IntVar(&o.envThreads, "env-threads", 1, "goroutines stepping each worker's envs (K; keep W·K within the cores)")
	fs.BoolVar(&o.pipeline, "pipeline", false, "step each worker's envs in two halves that take turns in ONNX Runtime, one half's env steps and sampling overlapping the other's inference (same trajectories; --envs even)")
	fs.Int64Var(&o.steps, "steps", 100000, "total env steps to collect (rounded up to a multiple of W·M)")
	fs.IntVar(&o.rollout, "rollout", 128, "steps per env per rollout (T); one shard per rollout")
	fs.StringVar(&o.out, "out", "", "folder for .npz shards and manifest.json (default: write nothing); refused if it holds a dataset, unless --append")
	fs.BoolVar(&o.appendRun, "append", false, "add this run's shards to the dataset in --out, numbered after its shards, and record the run in its manifest.json")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for env resets and action sampling")
	fs.BoolVar(&o.deterministic, "deterministic", false, "take the most probable action instead of sampling")
	profile := fs.String("profile", "", "folder to write a CPU profile (cpu.pprof) and a heap profile (heap.pprof) of the run into")
	o.flags.Register(fs)
	o.remote.register(fs)
	var lf cli.LogFlags
	lf.Register(fs)
	flag.Parse()
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	o.jsonLogs = lf.JSON
	cli.MainGraceful("batcher", lf, func(ctx context.Context, stop <-chan struct{}, log *zap.Logger) (err error) {
		if *profile != "" {
			end, err := cli.StartProfile(*profile)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, end()) }()
		}
		o.stop = stop
		if o.set["watch"] {
			return runWatch(ctx, os.Stdout, log, o)
		}
		if o.remote.connect != "" || o.remote.anySet(o.set) {
			return runRemote(ctx, os.Stdout, log, o)
		}
		return run(ctx, os.Stdout, os.Stderr, log, o)
	})
}

// validate checks every flag before anything is allocated, and returns the env's spec and the
// steps per env in all (rounds) and per rollout (the batcher's buffer length).
func validate(o options) (env envs.Spec, rounds int64, rollout int, err error) {
	switch {
	case o.policy == "":
		return env, 0, 0, errors.New(`--policy is required (a .onnx file, or "random")`)
	case o.env == "":
		return env, 0, 0, errors.New("--env is required")
	case o.appendRun && o.out == "":
		return env, 0, 0, errors.New("--append needs --out, the folder to append to")
	case o.steps < 1:
		return env, 0, 0, fmt.Errorf("--steps %d: want at least 1", o.steps)
	case o.envs < 1:
		return env, 0, 0, fmt.Errorf("--envs %d: want at least 1", o.envs)
	case o.workers < 1:
		return env, 0, 0, fmt.Errorf("--workers %d: want at least 1", o.workers)
	case o.rollout < 1:
		return env, 0, 0, fmt.Errorf("--rollout %d: want at least 1", o.rollout)
	case o.envThreads < 0:
		return env, 0, 0, fmt.Errorf("--env-threads %d: want at least 1", o.envThreads)
	case o.pipeline && o.envs%2 != 0:
		return env, 0, 0, fmt.Errorf("--pipeline splits --envs in two halves: --envs %d, want an even number", o.envs)
	case o.pipeline && o.envThreads > 1:
		return env, 0, 0, fmt.Errorf("--pipeline with --env-threads %d: want one of them", o.envThreads)
	}
	if err := o.flags.CheckThreads(); err != nil {
		return env, 0, 0, err
	}
	// Steps per env: the rollout, or fewer when --steps needs fewer. W·M may overflow here;
	// the memory check below then refuses the sizes.
	rollout = o.rollout
	if hi, perRound := bits.Mul64(uint64(o.envs), uint64(o.workers)); hi == 0 && perRound <= math.MaxInt64 {
		rounds = o.steps/int64(perRound) + min(o.steps%int64(perRound), 1)
		rollout = int(min(int64(o.rollout), rounds))
	}
	// The env is resolved once, here where the tool starts, and passed down as its spec.
	if env, err = envs.Lookup(o.env); err != nil {
		return env, 0, 0, err
	}
	cfg := batcher.Config{Env: env, Workers: o.workers, EnvsPerWorker: o.envs, Steps: rollout}
	if o.mem.Source == "" {
		o.mem = batcher.AvailableMemory()
	}
	var me *batcher.MemoryError
	if err := batcher.CheckMemory(cfg, o.out != "", o.mem); errors.As(err, &me) {
		return env, 0, 0, fmt.Errorf("--envs %d --workers %d --rollout %d: %w; %s", o.envs, o.workers, o.rollout, err, whatFits(o, me))
	} else if err != nil {
		return env, 0, 0, err
	}
	perRound := int64(o.envs * o.workers) // fits: the buffers of that many envs fit in memory
	if rounds > math.MaxInt64/perRound {
		return env, 0, 0, fmt.Errorf("--steps %d: rounded up to a multiple of W·M = %d it overflows 64 bits; want at most %d",
			o.steps, perRound, math.MaxInt64/perRound*perRound)
	}
	return env, rounds, rollout, nil
}

// whatFits says which smaller sizes would fit.
func whatFits(o options, e *batcher.MemoryError) string {
	switch {
	case e.FitEnvsPerWorker >= 1:
		return fmt.Sprintf("with --workers %d and rollouts of %d at most --envs %d fits (or lower --workers or --rollout)",
			o.workers, e.Steps, e.FitEnvsPerWorker)
	case e.FitWorkers >= 1:
		return fmt.Sprintf("even --envs 1 does not fit with --workers %d; at most --workers %d fits with --envs %d",
			o.workers, e.FitWorkers, o.envs)
	case e.FitSteps >= 1:
		return fmt.Sprintf("at most --rollout %d fits with --envs %d --workers %d", e.FitSteps, o.envs, o.workers)
	}
	return "lower --envs, --workers and --rollout"
}

func run(ctx context.Context, stdout, stderr io.Writer, log *zap.Logger, o options) error {
	env, rounds, rollout, err := validate(o)
	if err != nil {
		return err
	}
	var data *dataset.Writer
	if o.out != "" {
		data, err = dataset.Open(o.out, env, dataset.Run{Policy: o.policy, Seed: o.seed,
			Deterministic: o.deterministic, Workers: o.workers, EnvsPerWorker: o.envs, Rollout: o.rollout,
			Steps: rounds * int64(o.envs*o.workers)}, o.appendRun)
		if errors.Is(err, dataset.ErrExists) {
			return fmt.Errorf("--out: %w; pass --append to add this run's shards after them (recorded in %s), or choose another --out",
				err, dataset.ManifestName)
		}
		if err != nil {
			return err
		}
		defer data.Close()
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
	if o.pipeline && 2*o.workers > runtime.NumCPU() {
		log.Warn("--pipeline runs each worker on two goroutines, one waiting for the other's inference by spinning; with more of them than cores they take each other's cores: use fewer --workers",
			zap.Int("goroutines", 2*o.workers), zap.Int("cores", runtime.NumCPU()))
	}
	perRound := int64(o.envs * o.workers)
	b, err := batcher.New(ctx, batcher.Config{Env: env, Workers: o.workers, EnvsPerWorker: o.envs, EnvThreads: o.envThreads,
		Pipeline: o.pipeline, Steps: rollout, Seed: o.seed, Deterministic: o.deterministic, Logger: log}, policy)
	if err != nil {
		return err
	}
	defer b.Close()
	total := rounds * perRound
	log.Info("collecting", zap.String("env", o.env), zap.String("policy", o.policy), zap.Int("workers", o.workers),
		zap.Int("envs_per_worker", o.envs), zap.Int64("steps", total))
	barOut := stderr
	if o.jsonLogs {
		barOut = io.Discard // --log-json: stderr holds JSON lines only; progress is logged below
	}
	lastLog := time.Now()
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(barOut), progressbar.OptionSetItsString("steps"),
		progressbar.OptionShowIts(), progressbar.OptionShowCount(), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionSetDescription("collecting"), progressbar.OptionClearOnFinish())
	// Start the bar's clock now: its first rate is then the first rollout's steps over the
	// time they took, not over the microseconds between the bar's first two renders.
	_ = bar.RenderBlank()
	sum := summary{Policy: o.policy, Env: o.env, Device: b.Device(), Workers: o.workers, Envs: o.envs, EnvThreads: max(o.envThreads, 1), Pipeline: o.pipeline}
	if o.policy == "random" {
		sum.Device = "cpu" // no policy runs: the actions are drawn on the CPU
	}
	var stats batcher.Stats
	start := time.Now()
	for done := int64(0); done < rounds; {
		t := int(min(int64(rollout), rounds-done))
		r, err := b.Collect(ctx, t)
		if err != nil {
			return err
		}
		done += int64(t)
		for _, e := range r.Episodes {
			stats.Add(e.Return)
		}
		if data != nil {
			path, err := data.Write(r)
			if err != nil {
				return err
			}
			sum.Shards = append(sum.Shards, path)
		}
		bar.Add64(int64(t) * perRound)
		bar.Describe(fmt.Sprintf("episodes %d, mean return %.1f", stats.N, stats.Mean()))
		if o.jsonLogs && (time.Since(lastLog) > 2*time.Second || done == rounds) {
			log.Info("progress", zap.Int64("steps", done*perRound), zap.Int64("of", total), zap.Int("episodes", stats.N),
				zap.Float64("return_mean", stats.Mean()))
			lastLog = time.Now()
		}
		select {
		case <-o.stop:
			// The first SIGINT/SIGTERM: the rollout just collected is written; stop here with
			// the dataset's manifest marking this run incomplete.
			bar.Finish()
			return fmt.Errorf("stopped by a signal after %d of %d steps; the shards written so far are whole and listed in the manifest", done*perRound, total)
		default:
		}
	}
	end := time.Now()
	elapsed := end.Sub(start)
	sum.Start, sum.End = float64(start.UnixNano())/1e9, float64(end.UnixNano())/1e9
	bar.Finish()
	if data != nil {
		if err := data.Finish(); err != nil {
			return err
		}
		sum.Manifest = filepath.Join(o.out, dataset.ManifestName)
	}
	tm := b.Timings()
	busy := (tm.Env + tm.Inference + tm.Sampling + tm.Buffers).Seconds()
	if busy > 0 {
		sum.Split = split{Env: tm.Env.Seconds() / busy, Inference: tm.Inference.Seconds() / busy,
			Sampling: tm.Sampling.Seconds() / busy, Buffers: tm.Buffers.Seconds() / busy}
	}
	sum.Steps = total
	sum.Episodes = stats.N
	if stats.N > 0 {
		mean, std := stats.Mean(), stats.Std()
		sum.ReturnMean, sum.ReturnStd = &mean, &std
	}
	sum.StepsPerSec = float64(total) / elapsed.Seconds()
	log.Info("done", zap.Int64("steps", total), zap.Int("episodes", sum.Episodes), zap.Float64("steps_per_sec", sum.StepsPerSec))
	return cli.Summary(stdout, sum)
}

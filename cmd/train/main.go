// Command train trains a policy with PPO and exports it as ONNX.
//
//	train --env ID [--algo ppo] [--config file.json] [--out DIR] [--towers N] [--workers W]
//	      [--envs M] [--total-steps N] [--seed S] [--init-policy P] [--resume DIR]
//
// Flags override the config file's fields; unset fields take CleanRL's defaults. A progress
// line per iteration goes to stderr; one JSON object to stdout: eval_return_mean, env_steps,
// wall_seconds, policy (the exported ONNX), and more.
//
// The run directory (--out) must be new or empty: train never writes over files it did not
// create. It is locked while a train or a resume uses it. The first SIGINT or SIGTERM finishes
// the iteration, writes a checkpoint and exits 1 saying how to resume; a second stops at once.
// With --resume DIR, only --total-steps (and the config's eval_episodes, checkpoint_every) may
// differ from the run's config.json; other flags that change the run are refused.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/curve"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner/mpi"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/remote"
	"go.uber.org/zap"
)

func main() {
	fs := flag.CommandLine
	var (
		env        = fs.String("env", "", "Gymnasium environment id (required unless in --config)")
		algoName   = fs.String("algo", "", "algorithm: "+strings.Join(algo.Names(), ", ")+" (default ppo)")
		configPath = fs.String("config", "", "JSON file of engine.Config fields")
		out        = fs.String("out", "", "run directory (default runs/<env>-<seed>)")
		towers     = fs.Int("towers", 0, "learner towers (default 1)")
		workers    = fs.Int("workers", 0, "batcher workers (default 1)")
		envs       = fs.Int("envs", 0, "envs per worker (default 4 for Discrete actions, 1 for Box)")
		total      = fs.Int64("total-steps", 0, "env steps to train for (default 500000 Discrete, 1000000 Box; appo 600000 Discrete, impala 1000000)")
		seed       = fs.Uint64("seed", 0, "seed")
		noSpin     = fs.Bool("no-spin", false, "towers park at once instead of spinning while they wait for each other (machines shared with other work; same results)")
		initPolicy = fs.String("init-policy", "", "pretrained ONNX policy to fine-tune")
		queue      = fs.Int("queue-size", 0, "impala/appo: rollouts buffered between batchers and learner (default 2)")
		broadcast  = fs.Int("broadcast-interval", 0, "impala/appo: learner iterations between weight publishes (default 1)")
		maxLag     = fs.Int64("max-policy-lag", 0, "impala/appo: drop rollouts more policy versions behind than this (default 0: never)")
		epochs     = fs.Int("epochs", 0, "passes over each rollout (num_sgd_iter; default 4 Discrete, 10 Box; appo 3 Discrete, impala 2)")
		minibatch  = fs.Int("minibatches", 0, "minibatches per pass (default 4 Discrete, 32 Box)")
		syncFrac   = fs.Float64("sync-frac", 0, "ddppo: once this fraction of the ranks (rounded up) has finished collecting, the others stop early, keeping at least 25% of the rollout (default 0.6, which on 2 ranks never preempts: use 0.5; 1: off)")
		resume     = fs.String("resume", "", "run directory to resume")
		library    = fs.String("ort-lib", "", "ONNX Runtime library (default: $"+onnx.LibraryEnv+", then the per-user cache)")
		profile    = fs.String("profile", "", "folder to write a CPU profile (cpu.pprof) and a heap profile (heap.pprof) of the run into")
		sf         serveFlags
		lf         cli.LogFlags
		hf         cli.HeadFlags
	)
	fs.StringVar(&sf.addr, "serve", "", "serve remote batchers (batcher --connect) on this host:port, with an embedded NATS server whose store is DIR/nats and whose batcher credential is DIR/batcher.creds; no local batchers unless --local-workers")
	fs.StringVar(&sf.nats, "nats", "", "serve remote batchers through this external NATS server (nats://host:port) instead of an embedded one")
	fs.StringVar(&sf.natsCreds, "nats-creds", "", "the learner's credential for --nats")
	fs.StringVar(&sf.tlsCert, "tls-cert", "", "with --serve: the server's TLS certificate (PEM); batchers then need its CA (batcher --ca)")
	fs.StringVar(&sf.tlsKey, "tls-key", "", "with --serve: the TLS certificate's key (PEM)")
	fs.IntVar(&sf.tasks, "tasks", 2, "with --serve or --nats: collect tasks handed to remote batchers, one per batcher (workers × envs envs of rollout_steps steps each)")
	fs.IntVar(&sf.credits, "credits", -1, "with --serve or --nats: rollouts the batchers may collect ahead of the learner (flow control; 0: off, batchers collect freely; default 1 for ppo, queue_size for impala and appo)")
	fs.IntVar(&sf.localWorkers, "local-workers", 0, "with --serve or --nats: batchers the learner runs itself, each with a collect task of its own (beside --tasks), publishing through the NATS server like remote ones")
	lf.Register(fs)
	hf.Register(fs)
	flag.Parse()
	cli.MainGraceful("train", lf, func(ctx context.Context, stop <-chan struct{}, log *zap.Logger) (err error) {
		if *profile != "" {
			end, err := cli.StartProfile(*profile)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, end()) }()
		}
		// Flags given on the command line override the config file's fields, or, with --resume,
		// the run's own (only engine.ResumeChangeable fields may change).
		override := map[string]func(*engine.Config){
			"env":         func(c *engine.Config) { c.Env = *env },
			"algo":        func(c *engine.Config) { c.Algo = *algoName },
			"towers":      func(c *engine.Config) { c.Towers = *towers },
			"workers":     func(c *engine.Config) { c.Workers = *workers },
			"envs":        func(c *engine.Config) { c.Envs = *envs },
			"total-steps": func(c *engine.Config) { c.TotalSteps = *total },
			"seed":        func(c *engine.Config) { c.Seed = *seed },
			"no-spin":     func(c *engine.Config) { c.NoSpin = *noSpin },
			"init-policy": func(c *engine.Config) { c.InitPolicy = *initPolicy },
			"epochs":      func(c *engine.Config) { c.Epochs = *epochs },
			"minibatches": func(c *engine.Config) { c.Minibatches = *minibatch },
			"sync-frac":   func(c *engine.Config) { c.SyncFrac = *syncFrac },
			// Asynchronous algorithms (impala, appo).
			"queue-size":         func(c *engine.Config) { c.QueueSize = *queue },
			"broadcast-interval": func(c *engine.Config) { c.BroadcastInterval = *broadcast },
			"max-policy-lag":     func(c *engine.Config) { c.MaxPolicyLag = *maxLag },
			// How a foreign --init-policy is bound (as batcher's and eval's flags).
			"head":          func(c *engine.Config) { c.Head = hf.Head },
			"action-space":  func(c *engine.Config) { c.ActionSpace = hf.ActionSpace },
			"logits-output": func(c *engine.Config) { c.LogitsOutput = hf.Params },
			"logstd-output": func(c *engine.Config) { c.LogStdOutput = hf.LogStd },
			"value-output":  func(c *engine.Config) { c.ValueOutput = hf.Value },
		}
		var set []func(*engine.Config)
		fs.Visit(func(f *flag.Flag) {
			if o, ok := override[f.Name]; ok {
				set = append(set, o)
			}
		})
		change := func(c *engine.Config) {
			for _, o := range set {
				o(c)
			}
		}
		if *resume != "" {
			if *configPath != "" || *out != "" {
				return errors.New("--resume DIR continues the run in DIR with its own config.json: drop --config and --out")
			}
			ranks, leave, jerr := joinJob(false)
			if jerr != nil {
				return jerr
			}
			defer leaveJob(ctx, leave, &err)
			return run(ctx, os.Stdout, log, stop, engine.Config{}, change, "", *resume, *library, ranks, sf)
		}
		var cfg engine.Config
		if *configPath != "" {
			b, err := os.ReadFile(*configPath)
			if err == nil {
				cfg, err = engine.ParseConfig(b)
			}
			if err != nil {
				return fmt.Errorf("--config: %w", err)
			}
		}
		change(&cfg)
		dir := *out
		if dir == "" {
			dir = fmt.Sprintf("runs/%s-%d", cfg.Env, cfg.Seed)
		}
		ranks, leave, jerr := joinJob(cfg.Algo == ppo.DDPPOName)
		if jerr != nil {
			return jerr
		}
		defer leaveJob(ctx, leave, &err)
		return run(ctx, os.Stdout, log, stop, cfg, nil, dir, "", *library, ranks, sf)
	})
}

// leaveJob leaves the MPI job (when leave is set), adding its error to *err.
func leaveJob(ctx context.Context, leave func(context.Context) error, err *error) {
	if leave != nil {
		*err = errors.Join(*err, leave(ctx))
	}
}

// run trains cfg into dir, or resumes the run in resume with change applied to its config. In
// a DD-PPO job (ranks), rank 0 alone reports progress; every rank prints its summary (with its
// rank and the hash of its final parameters, the same on every rank).
func run(ctx context.Context, stdout io.Writer, log *zap.Logger, stop <-chan struct{}, cfg engine.Config, change func(*engine.Config), dir, resume, library string, ranks mpi.Group, sf serveFlags) (err error) {
	progress := func(m engine.Metrics) {
		ret := "-"
		if !math.IsNaN(float64(m.ReturnMean)) {
			ret = fmt.Sprintf("%.1f", float64(m.ReturnMean))
		}
		line := fmt.Sprintf("iter %d  steps %d  return %s  pg %.4f  v %.4f  ent %.3f  kl %.4f  clip %.3f  ev %.2f  collect %.0f/s  learn %.0f/s",
			m.Iteration, m.EnvSteps, ret, float64(m.PolicyLoss), float64(m.ValueLoss), float64(m.Entropy), float64(m.ApproxKL),
			float64(m.ClipFrac), float64(m.ExplainedVar), float64(m.CollectSPS), float64(m.LearnSPS))
		if a := m.Async; a != nil {
			line += fmt.Sprintf("  lag %.1f (max %d)  queue %d  idle batchers %.0f%% learner %.0f%%",
				float64(a.PolicyLagMean), a.PolicyLagMax, a.Queue, 100*float64(a.BatcherIdle), 100*float64(a.LearnerIdle))
		}
		log.Info(line)
	}
	opts := engine.Options{Out: dir, Progress: progress, Session: onnx.Config{Library: library, Logger: log}, Stop: stop, Change: change, Plot: curve.Write,
		Ranks: ranks}
	if sf.on() {
		srv, serr := newServing(ctx, sf, cfg, dir, resume, library, log)
		if serr != nil {
			return serr
		}
		opts.Source = srv
		if resume == "" && srv.cfg.Algo != ppo.Name && cfg.MaxPolicyLag == 0 {
			// Remote batchers collect ahead of the learner by the credits (or freely without
			// them): without a bound on the lag it would train on ever older rollouts when
			// they collect faster than it learns. A rollout collected with a credit is at most
			// credits + 1 versions behind when its turn comes.
			cfg.MaxPolicyLag = int64(max(2, srv.credits()+1))
			log.Info(fmt.Sprintf("serving: max_policy_lag %d (rollouts more versions behind are dropped; set --max-policy-lag to change it)", cfg.MaxPolicyLag))
		}
		opts.Progress = func(m engine.Metrics) { progress(m); srv.info(m) }
		defer func() { err = errors.Join(err, srv.end(context.WithoutCancel(ctx), err == nil)) }()
	} else if sf.localWorkers != 0 {
		return errors.New("--local-workers N runs batchers beside remote ones: it needs --serve ADDR or --nats URL (without them the learner collects with its own batchers: --workers)")
	}
	if ranks != nil {
		log = log.With(zap.Int("rank", ranks.Rank()))
		if opts.Slowdown, err = testSlowdown(ranks.Rank()); err != nil {
			return err
		}
	}
	var res engine.Result
	if resume != "" {
		log.Info("resuming", zap.String("dir", resume))
		res, err = engine.Resume(ctx, resume, opts)
	} else {
		if cfg.Env == "" {
			return errors.New("--env is required (or --config with an env, or --resume DIR)")
		}
		res, err = engine.Train(ctx, cfg, opts)
	}
	if err != nil {
		return err
	}
	if srv, ok := opts.Source.(*serving); ok {
		return cli.Summary(stdout, struct {
			engine.Result
			Remote *remote.SourceStats `json:"remote,omitempty"`
		}{res, srv.stats()})
	}
	return cli.Summary(stdout, res)
}

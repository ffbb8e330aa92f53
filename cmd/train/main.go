// Command train trains a policy with PPO and exports it as ONNX.
//
//	train --env ID [--algo ppo] [--preset NAME|none] [--show-preset] [--config file.json]
//	      [--out DIR] [--towers N] [--workers W] [--envs M] [--total-steps N] [--seed S]
//	      [--lr X] [--gamma G] [--norm-obs] [--norm-reward] ... [--init-policy P] [--resume DIR]
//
// With no other flag, --env X trains with towerrl's preset for the algorithm and X (package
// engine/preset, docs/presets.md), if it has one: the preset's fields, then the config file's
// over them, then the flags given; unset fields take CleanRL's defaults. --show-preset prints
// the preset in force and exits; config.json names it. A progress
// line per iteration goes to stderr; one JSON object to stdout: eval_return_mean, env_steps,
// wall_seconds, policy (the exported ONNX), and more.
//
// The run directory (--out) must be new or empty: train never writes over files it did not
// create. It is locked while a train or a resume uses it. The first SIGINT or SIGTERM finishes
// the iteration, writes a checkpoint and exits 1 saying how to resume; a second cancels
// what is under way and the process exits within 2 s (a third: at once).
// With --resume DIR, only --total-steps, --queue-size (impala, appo) and --no-spin (and the
// --eval-episodes, --eval-every, --stop-at-return and --checkpoint-every) may differ from the
// run's config.json; other flags that change the run are refused.
//
// --eval-every N evaluates the policy every N iterations during training on envs of its own,
// keeps the best as best_policy.onnx (best.json records its step and score), and with
// --stop-at-return R ends the run, as a finished one, once an evaluation reaches R.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"

	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/engine/algo"
	_ "github.com/towerrl/towerrl/engine/algos" // the algorithms towerrl ships
	"github.com/towerrl/towerrl/engine/curve"
	"github.com/towerrl/towerrl/engine/gif"
	"github.com/towerrl/towerrl/learner/mpi"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/remote"
	"go.uber.org/zap"
)

func main() {
	fs := flag.CommandLine
	var (
		cf         configFlags
		configPath = fs.String("config", "", "JSON file of engine.Config fields (over the preset's; flags override both)")
		show       = fs.Bool("show-preset", false, "print the preset in force for --env and --algo (with --preset and --config as given) as JSON on stdout, and exit")
		out        = fs.String("out", "", "run directory (default runs/<env>-<seed>)")
		resume     = fs.String("resume", "", "run directory to resume")
		library    = fs.String("ort-lib", "", "ONNX Runtime library (default: $"+onnx.LibraryEnv+", then the per-user cache)")
		profile    = fs.String("profile", "", "folder to write a CPU profile (cpu.pprof) and a heap profile (heap.pprof) of the run into")
		sf         serveFlags
		lf         cli.LogFlags
	)
	cli.Usage(fs, "train", "train a policy with ppo, appo, impala or ddppo, or fine-tune an ONNX policy, into a run directory (docs/tools.md)",
		"bin/train --env CartPole-v1 --seed 1 --out runs/cp",
		"bin/train --resume runs/cp --total-steps 600000",
		"bin/train --env CartPole-v1 --init-policy policy.onnx --out runs/ft")
	cf.register(fs)
	fs.StringVar(&sf.addr, "serve", "", "serve remote batchers (batcher --connect) on this host:port, with an embedded NATS server whose store is DIR/nats and which writes one credential per batcher, DIR/creds/batcher-K.creds (see --batchers); no local batchers unless --local-workers")
	fs.StringVar(&sf.nats, "nats", "", "serve remote batchers through this external NATS server (nats://host:port) instead of an embedded one")
	fs.StringVar(&sf.natsCreds, "nats-creds", "", "the learner's credential for --nats")
	fs.StringVar(&sf.tlsCert, "tls-cert", "", "with --serve: the server's TLS certificate (PEM); batchers then need its CA (batcher --ca)")
	fs.StringVar(&sf.tlsKey, "tls-key", "", "with --serve: the TLS certificate's key (PEM)")
	fs.IntVar(&sf.tasks, "tasks", 2, "with --serve or --nats: collect tasks handed to remote batchers, one per batcher (workers × envs envs of rollout_steps steps each)")
	fs.IntVar(&sf.credits, "credits", -1, "with --serve or --nats: rollouts the batchers may collect ahead of the learner (flow control; 0: off, batchers collect freely; default 1 for ppo, queue_size for impala and appo)")
	fs.IntVar(&sf.batchers, "batchers", 0, "with --serve: batcher credentials to write, DIR/creds/batcher-0.creds … batcher-(N-1).creds, one per remote batcher, each acting as its own batcher ID alone (default: one per --tasks; those of an earlier start are kept)")
	fs.IntVar(&sf.localWorkers, "local-workers", 0, "with --serve or --nats: batchers the learner runs itself, each with a collect task of its own (beside --tasks), publishing through the NATS server like remote ones")
	lf.Register(fs)
	flag.Parse()
	cli.MainGraceful("train", lf, func(ctx context.Context, stop <-chan struct{}, log *zap.Logger) (err error) {
		if *profile != "" {
			end, err := cli.StartProfile(*profile)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, end()) }()
		}
		// Flags given on the command line override the preset's and the config file's fields,
		// or, with --resume, the run's own (only engine.ResumeChangeable fields may change).
		change, err := cf.overrides(fs)
		if err != nil {
			return err
		}
		if *resume != "" {
			if *configPath != "" || *out != "" || cf.preset != "" || *show {
				return errors.New("--resume DIR continues the run in DIR with its own config.json (and the preset it names): drop --config, --out, --preset and --show-preset")
			}
			ranks, leave, jerr := joinJob(false)
			if jerr != nil {
				return jerr
			}
			defer leaveJob(ctx, leave, &err)
			return run(ctx, os.Stdout, log, stop, engine.Config{}, change, "", *resume, *library, ranks, sf)
		}
		file, err := readConfig(*configPath)
		if err != nil {
			return err
		}
		cfg, c, err := resolve(file, change)
		if err != nil {
			return err
		}
		if *show {
			return showPreset(os.Stdout, cfg, c)
		}
		if c.ok {
			log.Info(fmt.Sprintf("preset %s (train --show-preset prints it; flags and --config override its fields; --preset none: the plain defaults)", c.p.Name),
				zap.String("about", c.p.About))
		} else {
			log.Info("preset none: " + c.why)
		}
		if cfg.MatmulPrecision == "bf16" && !engine.BF16Available() {
			log.Warn("matmul_precision bf16: this CPU has no AMX-BF16 (or the OS does not grant its tile state), so the learner's products stay float32")
		}
		dir := *out
		if dir == "" {
			dir = fmt.Sprintf("runs/%s-%d", cfg.Env, cfg.Seed)
		}
		ranks, leave, jerr := joinJob(capabilities(cfg.Algo).Ranks)
		if jerr != nil {
			return jerr
		}
		defer leaveJob(ctx, leave, &err)
		return run(ctx, os.Stdout, log, stop, cfg, nil, dir, "", *library, ranks, sf)
	})
}

// capabilities are what the algorithm registered under name declared (engine/algo): the
// tool decides from them, not from the algorithm's name. An unknown name has none (the
// engine's config refuses it, listing the registered ones).
func capabilities(name string) algo.Capabilities {
	c, _ := algo.CapabilitiesOf(name)
	return c
}

// leaveJob leaves the MPI job (when leave is set), adding its error to *err.
func leaveJob(ctx context.Context, leave func(ctx context.Context, failed bool) error, err *error) {
	if leave != nil {
		*err = errors.Join(*err, leave(ctx, *err != nil))
	}
}

// run trains cfg into dir, or resumes the run in resume with change applied to its config. In
// a DD-PPO job (ranks), rank 0 alone reports progress and prints the summary on stdout (one
// job, one JSON object); the other ranks log theirs at debug level (with their rank and the
// hash of their final parameters, the same on every rank).
func run(ctx context.Context, stdout io.Writer, log *zap.Logger, stop <-chan struct{}, cfg engine.Config, change func(*engine.Config), dir, resume, library string, ranks mpi.Group, sf serveFlags) (err error) {
	progress := func(m engine.Metrics) {
		ret := "-"
		if !math.IsNaN(float64(m.ReturnMean)) {
			ret = fmt.Sprintf("%.1f", float64(m.ReturnMean))
		}
		line := fmt.Sprintf("iter %d  steps %d  return %s  pg %.4f  v %.4f  ent %.3f  kl %.4f  clip %.3f  ev %.2f  collect %.0f/s  learn %.0f/s",
			m.Iteration, m.EnvSteps, ret, float64(m.PolicyLoss), float64(m.ValueLoss), float64(m.Entropy), float64(m.ApproxKL),
			float64(m.ClipFrac), float64(m.ExplainedVar), float64(m.CollectSPS), float64(m.LearnSPS))
		if r := m.Replay; r != nil { // an off-policy run: its own figures
			line = fmt.Sprintf("iter %d  steps %d  return %s  buffer %d  updates %d (%.0f/s)  ε %.3f  collect %.0f/s", m.Iteration, m.EnvSteps, ret,
				r.BufferFill, r.Updates, float64(r.UpdatesPerSec), float64(r.Epsilon), float64(m.CollectSPS))
			for _, k := range slices.Sorted(maps.Keys(m.Stats)) {
				if k != "epsilon" {
					line += fmt.Sprintf("  %s %.4g", k, float64(m.Stats[k]))
				}
			}
		}
		if e := m.Eval; e != nil {
			line += fmt.Sprintf("  eval %.1f ± %.1f (%d episodes)", float64(e.ReturnMean), float64(e.ReturnStd), e.Episodes)
			if e.Best {
				line += " best so far: best_policy.onnx"
			}
		}
		if a := m.Async; a != nil {
			line += fmt.Sprintf("  lag %.1f (max %d)  queue %d  idle batchers %.0f%% learner %.0f%%",
				float64(a.PolicyLagMean), a.PolicyLagMax, a.Queue, 100*float64(a.BatcherIdle), 100*float64(a.LearnerIdle))
		}
		log.Info(line)
	}
	opts := engine.Options{Out: dir, Progress: progress, Session: onnx.Config{Library: library, Logger: log}, Stop: stop, Change: change, Plot: curve.Write, Draw: gif.Drawer,
		Ranks: ranks, NoTensorBoard: *noTensorBoard}
	if sf.on() {
		srv, serr := newServing(ctx, sf, cfg, dir, resume, library, log)
		if serr != nil {
			return serr
		}
		opts.Source = srv
		if resume == "" && !capabilities(srv.cfg.Algo).OnPolicy && cfg.MaxPolicyLag == 0 {
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
	if ranks != nil && ranks.Rank() > 0 {
		log.Debug("rank summary", zap.Any("summary", res))
		return nil
	}
	if res.Complete && res.StoppedEarly == "" {
		log.Info(fmt.Sprintf("the run in %s was complete: all %d iterations were trained before, so nothing was trained now; the summary evaluates its policy.onnx (resume with a larger --total-steps to train on)",
			res.Dir, res.Iterations))
	}
	if res.StoppedEarly != "" {
		log.Info(res.StoppedEarly)
	}
	if b := res.Best; b != nil {
		log.Info(fmt.Sprintf("best policy: %s, found after iteration %d (env step %d), scoring %g ± %g over %d deterministic episodes (eval --episodes %d --seed %d runs them again)",
			orNoFile(b.Path), b.Iteration, b.EnvSteps, b.ReturnMean, b.ReturnStd, b.Episodes, b.Episodes, b.Seed))
	}
	if srv, ok := opts.Source.(*serving); ok {
		return cli.Summary(stdout, struct {
			engine.Result
			Remote *remote.SourceStats `json:"remote,omitempty"`
		}{res, srv.stats()})
	}
	return cli.Summary(stdout, res)
}

// orNoFile is path, or says that no file was written (a run without a directory).
func orNoFile(path string) string {
	if path == "" {
		return "not written (no run directory)"
	}
	return path
}

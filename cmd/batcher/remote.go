package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/remote"
)

// remoteOptions are the flags of a remote batcher (--connect URL).
type remoteOptions struct {
	connect, watch, creds, ca, id, namespace, codec string
	connectTimeout                                  time.Duration
	info                                            bool
}

// remoteOnly names the flags that mean something with --connect only.
var remoteOnly = []string{"creds", "ca", "id", "namespace", "codec", "connect-timeout", "info"}

// watchFlags names the flags that mean something with --watch: the connection's.
var watchFlags = map[string]bool{"watch": true, "creds": true, "ca": true, "id": true, "namespace": true, "connect-timeout": true,
	"log-level": true, "log-json": true, "profile": true}

// localOnly names the flags a remote batcher takes from the learner's task or policy instead.
var localOnly = []string{"policy", "steps", "rollout", "envs", "seed", "out", "append", "deterministic"}

func (r *remoteOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&r.connect, "connect", "", "collect for a learner: its NATS URL (nats://HOST:PORT or tls://HOST:PORT, printed by train --serve); the learner's tasks set env, envs, rollout and seeds, and its policies are hot-swapped")
	fs.StringVar(&r.creds, "creds", "", "with --connect: the credential file: one of those the learner wrote into its run directory, DIR/creds/batcher-K.creds (one per batcher; the batcher's ID comes from it), or a NATS .creds file")
	fs.StringVar(&r.ca, "ca", "", "with --connect: PEM CA bundle that signed the learner's TLS certificate (for tls://)")
	fs.StringVar(&r.id, "id", "", "with --connect or --watch: this batcher's ID in the learner's accounting: the one its learner-written credential names (the default), or with an external NATS the ID its operator granted the credential (default there: host name and PID)")
	fs.StringVar(&r.namespace, "namespace", "", "with --connect: the learner's NATS namespace (default "+remote.DefaultNamespace+")")
	fs.StringVar(&r.codec, "codec", "", "with --connect: rollout compression: s2 (default), zstd or none")
	fs.DurationVar(&r.connectTimeout, "connect-timeout", time.Minute, "with --connect: how long to wait for the learner to answer at the start (0: forever)")
	fs.BoolVar(&r.info, "info", false, "with --connect: log the learner's learn-info lines")
	fs.StringVar(&r.watch, "watch", "", "show the learn-info lines (metrics) of the learner at this NATS URL without collecting, until its run ends (with --creds, and --ca for tls://)")
}

// anySet reports whether a flag of a remote batcher or watcher was given.
func (r *remoteOptions) anySet(set map[string]bool) bool {
	if set["watch"] {
		return true
	}
	for _, name := range remoteOnly {
		if set[name] {
			return true
		}
	}
	return false
}

// remoteConfig checks the flags of a remote batcher and makes its configuration.
func remoteConfig(o options, log *zap.Logger) (remote.BatcherConfig, error) {
	r := o.remote
	if r.connect == "" {
		for _, name := range remoteOnly {
			if o.set[name] {
				return remote.BatcherConfig{}, fmt.Errorf("--%s needs --connect URL (the learner's address)", name)
			}
		}
	}
	for _, name := range localOnly {
		if o.set[name] {
			return remote.BatcherConfig{}, fmt.Errorf("--%s does not apply with --connect: the learner's task sets the env count, rollout length and seeds, and its policies come from the learner (--env, --workers, --env-threads, --device and --threads do apply)", name)
		}
	}
	if err := checkCreds(r, "--connect"); err != nil {
		return remote.BatcherConfig{}, err
	}
	switch {
	case o.workers < 1:
		return remote.BatcherConfig{}, fmt.Errorf("--workers %d: want at least 1", o.workers)
	case o.envThreads < 0:
		return remote.BatcherConfig{}, fmt.Errorf("--env-threads %d: want at least 1", o.envThreads)
	}
	codec, err := remote.ParseCodec(r.codec)
	if err != nil {
		return remote.BatcherConfig{}, fmt.Errorf("--codec: %w", err)
	}
	if r.id != "" {
		if s := remote.SanitizeID(r.id); s != r.id {
			return remote.BatcherConfig{}, fmt.Errorf("--id %q: use letters, digits, '-' and '_' only (e.g. %q), at most 64", r.id, s)
		}
	}
	if err := o.flags.CheckThreads(); err != nil {
		return remote.BatcherConfig{}, err
	}
	pc, err := o.flags.Config(log)
	if err != nil {
		return remote.BatcherConfig{}, err
	}
	// --env is resolved once, here where the tool starts; without it the batcher takes the
	// env of the learner's task.
	var env envs.Spec
	if o.env != "" {
		if env, err = envs.Lookup(o.env); err != nil {
			return remote.BatcherConfig{}, fmt.Errorf("--env: %w", err)
		}
	}
	return remote.BatcherConfig{
		Client:         remote.ClientConfig{Creds: r.creds, CAFile: r.ca, BatcherID: r.id, Namespace: r.namespace, Codec: codec},
		Env:            env,
		Workers:        o.workers,
		EnvThreads:     o.envThreads,
		Policy:         pc,
		ConnectTimeout: connectTimeout(r),
		Stop:           o.stop,
		Logger:         log,
	}, nil
}

// checkCreds checks the connection's flags shared by --connect and --watch (mode).
func checkCreds(r remoteOptions, mode string) error {
	switch {
	case r.creds == "":
		return fmt.Errorf("%s needs --creds FILE: the batcher's credential the learner wrote into its run directory, DIR/creds/batcher-K.creds (one per batcher: copy one to this machine), or the .creds file your NATS operator issued", mode)
	case r.connectTimeout < 0:
		return fmt.Errorf("--connect-timeout %v: want 0 (forever) or more", r.connectTimeout)
	}
	if _, err := os.Stat(r.creds); err != nil {
		return fmt.Errorf("--creds: %w (copy a batcher credential from the learner's run directory, DIR/creds/batcher-K.creds)", err)
	}
	if r.ca != "" {
		if _, err := os.Stat(r.ca); err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
	}
	return nil
}

// connectTimeout is --connect-timeout as the remote package takes it (negative: forever).
func connectTimeout(r remoteOptions) time.Duration {
	if r.connectTimeout == 0 {
		return -1
	}
	return r.connectTimeout
}

// watchConfig checks the flags of a watcher (--watch URL) and makes its configuration.
func watchConfig(o options) (remote.WatchConfig, error) {
	r := o.remote
	if r.watch == "" {
		return remote.WatchConfig{}, errors.New("--watch needs the learner's NATS URL (nats://HOST:PORT or tls://HOST:PORT, printed by train --serve)")
	}
	if r.connect != "" {
		return remote.WatchConfig{}, errors.New("--watch URL shows a learner's learn-info, --connect URL collects for it: give one of them (--connect --info does both)")
	}
	for name := range o.set {
		if !watchFlags[name] {
			return remote.WatchConfig{}, fmt.Errorf("--%s does not apply with --watch, which only shows the learner's learn-info lines (it takes --creds, --ca, --id, --namespace, --connect-timeout)", name)
		}
	}
	if err := checkCreds(r, "--watch"); err != nil {
		return remote.WatchConfig{}, err
	}
	return remote.WatchConfig{
		Client:         remote.ClientConfig{Creds: r.creds, CAFile: r.ca, BatcherID: r.id, Namespace: r.namespace},
		ConnectTimeout: connectTimeout(r),
		Stop:           o.stop,
	}, nil
}

// runWatch shows the learner's learn-info lines on the log until its run ends; the JSON
// summary (lines seen, the last one) goes to stdout.
func runWatch(ctx context.Context, stdout io.Writer, log *zap.Logger, o options) error {
	cfg, err := watchConfig(o)
	if err != nil {
		return err
	}
	cfg.Info = func(line []byte) { log.Info("learner", zap.ByteString("info", line)) }
	log.Info("watching the learner's learn-info", zap.String("url", o.remote.watch))
	sum, err := remote.Watch(ctx, o.remote.watch, cfg)
	if err != nil {
		return err
	}
	return cli.Summary(stdout, sum)
}

// ledgerEnv is a test hook for scripts/remote_chaos.sh: with TOWERRL_TEST_LEDGER=FILE a
// remote batcher appends "SESSION SEQ LAST" to FILE after each rollout it published (SESSION
// in hex; LAST the newest rollout the server confirmed stored, with every one before it),
// and "SESSION 0 LAST" when it ends.
const ledgerEnv = "TOWERRL_TEST_LEDGER"

// runRemote collects for a learner until it ends the run: progress lines on the log every
// few seconds, the JSON summary on stdout.
func runRemote(ctx context.Context, stdout io.Writer, log *zap.Logger, o options) error {
	cfg, err := remoteConfig(o, log)
	if err != nil {
		return err
	}
	var ledger *os.File
	if name := os.Getenv(ledgerEnv); name != "" {
		if ledger, err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return fmt.Errorf("%s: %w", ledgerEnv, err)
		}
		defer ledger.Close()
	}
	var last time.Time
	cfg.Progress = func(p remote.BatcherProgress) {
		if ledger != nil {
			fmt.Fprintf(ledger, "%x %d %d\n", p.Session, p.Seq, p.LastConfirmed)
		}
		if time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		log.Info("progress", zap.String("task", p.Task), zap.Int64("rollouts", p.Rollouts), zap.Int64("confirmed", p.Confirmed),
			zap.Int64("steps", p.Steps), zap.Float64("steps_per_sec", p.StepsPerSec()), zap.Int64("policy_version", p.PolicyVersion),
			zap.Int("episodes", p.Episodes), zap.Float64("return_mean", p.ReturnMean))
	}
	if o.remote.info {
		cfg.Info = func(line []byte) { log.Info("learner", zap.ByteString("info", line)) }
	}
	sum, err := remote.RunBatcher(ctx, o.remote.connect, cfg)
	if err != nil {
		return err
	}
	if ledger != nil {
		fmt.Fprintf(ledger, "%s 0 %d\n", sum.Session, sum.LastConfirmed)
	}
	log.Info("done", zap.String("ended", sum.Ended), zap.Int64("rollouts", sum.Rollouts), zap.Int64("steps", sum.Steps),
		zap.Float64("steps_per_sec", sum.StepsPerSec))
	return cli.Summary(stdout, sum)
}

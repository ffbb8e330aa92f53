package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/remote"
)

// serveFlags are train's flags for serving remote batchers.
type serveFlags struct {
	addr, nats, natsCreds, tlsCert, tlsKey string
	tasks                                  int
}

func (f serveFlags) on() bool { return f.addr != "" || f.nats != "" }

// serving is the learner's side of remote collection (issue: batchers on any machine): an
// embedded NATS server with JetStream (or a connection to an external one), a collect task per
// remote batcher, and the rollouts they publish, as an engine.RolloutSource. The server starts
// with the first policy, once the run directory exists: its store is DIR/nats and the
// batchers' credential DIR/batcher.creds.
type serving struct {
	f   serveFlags
	dir string // the run directory
	log *zap.Logger

	mu   sync.Mutex // guards srv and src while they start
	cfg  engine.Config
	srv  *remote.Server
	src  *remote.Source
	base context.Context // the run's: the server lives as long as it
}

var _ engine.RolloutSource = (*serving)(nil)

// newServing checks the flags and prepares serving for the run in dir (or the resumed run
// in resume, whose configuration is read from its config.json).
func newServing(ctx context.Context, f serveFlags, cfg engine.Config, dir, resume string, log *zap.Logger) (*serving, error) {
	switch {
	case f.addr != "" && f.nats != "":
		return nil, errors.New("--serve ADDR embeds a NATS server, --nats URL uses an external one: give one of them")
	case f.nats == "" && f.natsCreds != "":
		return nil, errors.New("--nats-creds is the credential for --nats URL; --serve writes its own (DIR/batcher.creds)")
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case f.tasks < 1:
		return nil, fmt.Errorf("--tasks %d: at least one collect task (one per remote batcher)", f.tasks)
	}
	if resume != "" {
		dir = resume
		b, err := os.ReadFile(filepath.Join(resume, "config.json"))
		if err == nil {
			cfg, err = engine.ParseConfig(b)
		}
		if err != nil {
			return nil, fmt.Errorf("--serve: reading the run's config: %w", err)
		}
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Algo == ppo.DDPPOName {
		return nil, errors.New("--serve feeds one learner from remote batchers; ddppo ranks collect with their own: drop --serve or use --algo appo|impala|ppo")
	}
	return &serving{f: f, dir: dir, log: log, cfg: cfg, base: ctx}, nil
}

func (s *serving) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	env := s.cfg.Env
	// Remote batchers never wait for the learner: a bound on the chunks stored makes them
	// wait (and retry) once 16 rollout chunks per task are queued, instead of filling the
	// store with rollouts the learner would drop as too old.
	sc := remote.ServeConfig{Addr: s.f.addr, StoreDir: filepath.Join(s.dir, "nats"), CredsDir: s.dir, TLSCert: s.f.tlsCert, TLSKey: s.f.tlsKey,
		StreamMaxMsgs: int64(max(64, 16*s.f.tasks)),
		Logger:        s.log, Admit: func(r remote.Registration) error {
			if r.EnvID != "" && r.EnvID != env {
				return fmt.Errorf("this run trains on %s, the batcher runs %s: start it without --env, or with --env %s", env, r.EnvID, env)
			}
			return nil
		}}
	var err error
	if s.f.nats != "" {
		sc.StoreDir, sc.CredsDir = "", ""
		s.srv, err = remote.Connect(s.base, s.f.nats, s.f.natsCreds, sc)
	} else {
		s.srv, err = remote.Serve(s.base, sc)
	}
	if err != nil {
		return fmt.Errorf("--serve: %w", err)
	}
	n := s.cfg.Workers * s.cfg.Envs
	for k := range s.f.tasks {
		t := remote.Task{ID: fmt.Sprintf("collect-%d", k), EnvID: env, Seed: s.cfg.Seed + uint64(k+1)*0x9e3779b97f4a7c15,
			Envs: n, RolloutLen: s.cfg.RolloutSteps}
		if err := s.srv.AddTask(t); err != nil {
			return errors.Join(err, s.srv.Close())
		}
	}
	if s.src, err = remote.NewSource(s.base, s.srv); err != nil {
		return errors.Join(err, s.srv.Close())
	}
	s.log.Info(fmt.Sprintf("serving %d collect tasks (%s, %d envs × %d steps each): batcher --connect %s --creds %s",
		s.f.tasks, env, n, s.cfg.RolloutSteps, s.srv.URL(), s.srv.CredsFile()))
	return nil
}

// Publish implements engine.RolloutSource: the policy goes into the object store and the
// batchers' "latest" pointer moves to it.
func (s *serving) Publish(ctx context.Context, version int64, model []byte) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	return s.srv.PublishPolicy(ctx, version, model)
}

// Next implements engine.RolloutSource.
func (s *serving) Next(ctx context.Context) (engine.Received, error) {
	if err := s.start(ctx); err != nil {
		return engine.Received{}, err
	}
	r, err := s.src.Next(ctx)
	if err != nil {
		return engine.Received{}, err
	}
	return engine.Received{Rollout: r.Rollout, Ack: r.Ack, Bytes: r.Bytes, Latency: r.Latency}, nil
}

// info sends a metrics line to the batchers that watch learn-info.
func (s *serving) info(m engine.Metrics) {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return
	}
	if b, err := json.Marshal(m); err == nil {
		if err := srv.PublishInfo(b); err != nil {
			s.log.Debug("learn-info", zap.Error(err))
		}
	}
}

// stats are the server's counters (rollouts delivered, acknowledged, duplicates dropped, per
// batcher), nil before it started.
func (s *serving) stats() *remote.SourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.src == nil {
		return nil
	}
	st := s.src.Stats()
	return &st
}

// end announces the end of the run (the batchers exit 0) and stops serving.
func (s *serving) end(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	st := s.src.Stats()
	s.log.Info("remote collection", zap.Int64("delivered", st.Delivered), zap.Int64("acked", st.Acked),
		zap.Int64("duplicates", st.Duplicates), zap.Int64("malformed", st.Malformed))
	return errors.Join(s.srv.End(ctx), s.src.Close(), s.srv.Close())
}

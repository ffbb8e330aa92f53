package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/remote"
)

// serveFlags are train's flags for serving remote batchers.
type serveFlags struct {
	addr, nats, natsCreds, tlsCert, tlsKey string
	tasks                                  int
	// localWorkers is the number of batchers the learner runs itself (--local-workers): each
	// takes a collect task of its own and publishes through the learner's NATS server like a
	// remote one.
	localWorkers int
	// credits is the flow control (--credits): rollouts the batchers may collect that the
	// learner has not taken yet; 0 turns it off, negative picks it (creditsFor).
	credits int
	// batchers is how many batcher credentials --serve writes (--batchers; 0: one per task),
	// DIR/creds/batcher-K.creds: each lets one batcher act as batcher-K alone.
	batchers int
}

func (f serveFlags) on() bool { return f.addr != "" || f.nats != "" }

// ledgerEnv is a test hook for scripts/remote_chaos.sh (the learner SIGKILLed and resumed):
// with TOWERRL_TEST_LEDGER=FILE a serving learner appends a line to FILE for each rollout it
// is handed ("delivered BATCHER SESSION SEQ", the session in hex), before and after its
// acknowledgement ("acking …", "acked …"), and, when the run has finished, for each complete
// rollout still in the stream ("left …", handed out and not acknowledged: it stays there).
const ledgerEnv = "TOWERRL_TEST_LEDGER"

// serving is the learner's side of remote collection (issue: batchers on any machine): an
// embedded NATS server with JetStream (or a connection to an external one), a collect task per
// remote batcher, and the rollouts they publish, as an engine.RolloutSource. The server starts
// with the first policy, once the run directory exists: its store is DIR/nats and the
// batchers' credentials DIR/creds/batcher-K.creds, one per batcher (--batchers, default one
// per task): a credential lets its holder act as its own batcher ID alone, so no batcher
// reads another's replies or takes its ID.
//
// With --local-workers N the learner also runs N batchers itself (remote.RunBatcher in this
// process, with the batcher credential, over the server's address): they take N more collect
// tasks and their rollouts go through the stream like those of remote batchers — the same
// acknowledgement, de-duplication, accounting (batcher IDs local-0, local-1, …) and policy
// hot swap — at the cost of the loopback transport — each with an identity that exists only
// in the learner's process (remote.Server.LocalClient).
type serving struct {
	f       serveFlags
	dir     string // the run directory
	library string // ONNX Runtime, for the local batchers
	log     *zap.Logger
	ledger  *ledger // nil unless ledgerEnv is set

	mu    sync.Mutex // guards srv, src and local while they start and stop
	cfg   engine.Config
	spec  engine.RolloutSpec // what the run trains on (Expect): every rollout is held against it
	srv   *remote.Server
	src   *remote.Source
	local *localBatchers
	base  context.Context // the run's: the server lives as long as it

	// acking is the last rollout's acknowledgement under way (lateAcks), nil when none;
	// only the trainer's goroutine (Next, its Ack, Publish, end) touches it.
	acking *pendingAck
}

// pendingAck is an acknowledgement a goroutine of serving waits for.
type pendingAck struct {
	done chan struct{}
	err  error // written before done is closed
}

// lateAcks reports whether the trainer's acknowledgements may complete in the background,
// while it learns. The trainer (engine.trainer.iterate) acknowledges a rollout once its rows
// are in the batch, then learns, then publishes, then writes any checkpoint; a rollout whose
// update a checkpoint holds must be acknowledged for good by then, or a learner resumed from
// that checkpoint would be handed it again and train it twice. Publish waits for the
// acknowledgement, so that holds when every iteration publishes: ppo, and appo and impala with
// broadcast_interval 1 (the default). Otherwise Ack waits, as remote.Received.Ack does.
func (s *serving) lateAcks() bool {
	return capabilities(s.cfg.Algo).OnPolicy || s.cfg.BroadcastInterval == 1
}

// ack acknowledges r for the trainer: at once, or in the background (lateAcks); ledger
// lines go out around it.
func (s *serving) ack(ctx context.Context, r *remote.Received) error {
	if err := s.waitAck(ctx); err != nil {
		return err
	}
	do := func(ctx context.Context) error {
		if s.ledger != nil {
			s.ledger.note("acking", r)
		}
		if err := r.Ack(ctx); err != nil {
			return err
		}
		if s.ledger != nil {
			s.ledger.note("acked", r)
		}
		return nil
	}
	if !s.lateAcks() {
		return do(ctx)
	}
	p := &pendingAck{done: make(chan struct{})}
	s.acking = p
	go func() {
		defer close(p.done)
		p.err = do(context.WithoutCancel(ctx))
	}()
	return nil
}

// waitAck waits for the acknowledgement under way, if any, and returns its error.
func (s *serving) waitAck(ctx context.Context) error {
	p := s.acking
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.acking = nil
	if p.err != nil {
		return fmt.Errorf("acknowledging a rollout the learner took: %w", p.err)
	}
	return nil
}

var _ engine.RolloutSource = (*serving)(nil)

// newServing checks the flags and prepares serving for the run in dir (or the resumed run
// in resume, whose configuration is read from its config.json).
func newServing(ctx context.Context, f serveFlags, cfg engine.Config, dir, resume, library string, log *zap.Logger) (*serving, error) {
	switch {
	case f.addr != "" && f.nats != "":
		return nil, errors.New("--serve ADDR embeds a NATS server, --nats URL uses an external one: give one of them")
	case f.nats == "" && f.natsCreds != "":
		return nil, errors.New("--nats-creds is the credential for --nats URL; --serve writes its batchers' own (DIR/creds/batcher-K.creds)")
	case f.nats != "" && f.batchers != 0:
		return nil, errors.New("--batchers N writes credentials for --serve's embedded NATS server; with --nats URL the server's operator issues one per batcher (see docs/distributed.md)")
	case f.batchers < 0:
		return nil, fmt.Errorf("--batchers %d: want 0 (one credential per task) or more", f.batchers)
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case f.tasks < 0 || f.localWorkers < 0:
		return nil, fmt.Errorf("--tasks %d, --local-workers %d: neither may be negative", f.tasks, f.localWorkers)
	case f.tasks+f.localWorkers < 1:
		return nil, fmt.Errorf("--tasks %d with --local-workers %d: at least one collect task (one per remote batcher, or --local-workers N)", f.tasks, f.localWorkers)
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
	if capabilities(cfg.Algo).Ranks {
		return nil, errors.New("--serve feeds one learner from remote batchers; ddppo ranks collect with their own: drop --serve or use --algo appo|impala|ppo")
	}
	s := &serving{f: f, dir: dir, library: library, log: log, cfg: cfg, base: ctx}
	if name := os.Getenv(ledgerEnv); name != "" {
		if s.ledger, err = openLedger(name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *serving) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return nil
	}
	env := s.cfg.Env
	tasks := s.f.tasks + s.f.localWorkers
	// Remote batchers never wait for the learner: a bound on the chunks stored makes them
	// wait (and retry) once 16 rollout chunks per task are queued, instead of filling the
	// store with rollouts the learner would drop as too old.
	sc := remote.ServeConfig{Addr: s.f.addr, StoreDir: filepath.Join(s.dir, "nats"), CredsDir: filepath.Join(s.dir, credsDir),
		Batchers: s.batcherIDs(), TLSCert: s.f.tlsCert, TLSKey: s.f.tlsKey,
		StreamMaxMsgs: int64(max(64, 16*tasks)),
		Credits:       s.credits(), OnPolicy: capabilities(s.cfg.Algo).OnPolicy,
		Logger: s.log, Admit: func(r remote.Registration) error {
			if r.EnvID != "" && r.EnvID != env {
				return fmt.Errorf("this run trains on %s, the batcher runs %s: start it without --env, or with --env %s", env, r.EnvID, env)
			}
			return nil
		}}
	if s.spec.T > 0 { // every rollout is held against the run's spec (Expect)
		sc.Spec = &remote.Spec{Env: s.spec.Env, T: s.spec.T, N: s.spec.N}
		for _, st := range s.spec.States {
			sc.Spec.States = append(sc.Spec.States, remote.StateSpec{Name: st.Name, Dim: st.Dim})
		}
	}
	var err error
	if s.f.nats != "" {
		sc.StoreDir, sc.CredsDir, sc.Batchers = "", "", nil
		s.srv, err = remote.Connect(s.base, s.f.nats, s.f.natsCreds, sc)
	} else {
		s.warnSharedCreds()
		s.srv, err = remote.Serve(s.base, sc)
	}
	if err != nil {
		return fmt.Errorf("--serve: %w", err)
	}
	n := s.cfg.Workers * s.cfg.Envs
	for k := range tasks {
		t := remote.Task{ID: fmt.Sprintf("collect-%d", k), EnvID: env, Seed: s.cfg.Seed + uint64(k+1)*0x9e3779b97f4a7c15,
			Envs: n, RolloutLen: s.cfg.RolloutSteps}
		if err := s.srv.AddTask(t); err != nil {
			return errors.Join(err, s.srv.Close())
		}
	}
	if s.src, err = remote.NewSource(s.base, s.srv); err != nil {
		return errors.Join(err, s.srv.Close())
	}
	if s.ledger != nil { // a rollout the source drops is acknowledged too
		s.src.OnDrop(func(id string, session, seq uint64) {
			s.ledger.line("acked", id, session, seq)
		})
	}
	s.log.Info(fmt.Sprintf("serving %d collect tasks (%s, %d envs × %d steps each): batcher --connect %s --creds %s",
		tasks, env, n, s.cfg.RolloutSteps, s.srv.URL(), s.credsHint()))
	if s.f.localWorkers > 0 {
		if s.local, err = s.startLocal(); err != nil {
			return errors.Join(err, s.src.Close(), s.srv.Close())
		}
	}
	return nil
}

// credsDir is the folder of the run directory that holds the batchers' credentials.
const credsDir = "creds"

// batcherIDs are the batchers --serve writes credentials for: batcher-0 … batcher-(K-1), K
// the --batchers, or one per remote task.
func (s *serving) batcherIDs() []string {
	k := s.f.batchers
	if k == 0 {
		k = s.f.tasks
	}
	ids := make([]string, k)
	for i := range ids {
		ids[i] = fmt.Sprintf("batcher-%d", i)
	}
	return ids
}

// credsHint names the credentials batchers connect with, for the log: the files the embedded
// server wrote, or with --nats those the operator issued.
func (s *serving) credsHint() string {
	dir := s.srv.CredsDir()
	if dir == "" {
		return "FILE (one per batcher, from the NATS operator: a user per batcher ID with remote.BatcherPermissions; pass --id ID)"
	}
	ids := s.batcherIDs()
	switch len(ids) {
	case 0:
		return filepath.Join(dir, "ID.creds")
	case 1:
		return filepath.Join(dir, ids[0]+remote.CredsExt)
	}
	return fmt.Sprintf("%s (K = 0…%d, one per batcher)", filepath.Join(dir, "batcher-K"+remote.CredsExt), len(ids)-1)
}

// warnSharedCreds warns of the one batcher credential earlier versions wrote for every
// batcher (DIR/batcher.creds), which no longer connects: a resumed run of theirs has new ones.
func (s *serving) warnSharedCreds() {
	old := filepath.Join(s.dir, "batcher.creds")
	if _, err := os.Stat(old); err == nil {
		s.log.Warn(fmt.Sprintf("%s, the one credential all batchers shared, is no longer accepted: give each batcher its own, %s (delete the old one)",
			old, filepath.Join(s.dir, credsDir, "batcher-K"+remote.CredsExt)))
	}
}

// credits is the credit pool (remote.ServeConfig.Credits): --credits, or by default one for
// ppo (it trains one rollout of each policy version: a second would be of an old one) and
// the queue size for impala and appo (a rollout collected while one waits and one is
// trained is at most about that many versions behind when its turn comes).
func (s *serving) credits() int {
	switch {
	case s.f.credits >= 0:
		return s.f.credits
	case capabilities(s.cfg.Algo).OnPolicy:
		return 1
	}
	return max(1, s.cfg.QueueSize)
}

// localBatchers are the batchers a serving learner runs itself (--local-workers).
type localBatchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// failed is cancelled with the first local batcher's error: the learner's Next fails
	// with it rather than wait for rollouts that will not come.
	failed context.Context
	fail   context.CancelCauseFunc
	mu     sync.Mutex // guards errs and quit
	errs   []error    // each batcher's, once it returned
	quit   bool       // stop was called: an error now is not a failure of the run
}

// startLocal starts the --local-workers batchers; stopLocal (end) waits for them.
func (s *serving) startLocal() (*localBatchers, error) {
	ca := ""
	if s.f.tlsCert != "" {
		ca = s.f.tlsCert // a self-signed certificate is its own CA
	}
	clients := make([]remote.ClientConfig, s.f.localWorkers)
	for i := range clients {
		var err error
		if clients[i], err = s.srv.LocalClient(fmt.Sprintf("local-%d", i)); err != nil {
			return nil, fmt.Errorf("--local-workers: %w", err)
		}
		clients[i].CAFile = ca
	}
	ctx, cancel := context.WithCancel(s.base)
	failed, fail := context.WithCancelCause(context.Background())
	l := &localBatchers{cancel: cancel, failed: failed, fail: fail, errs: make([]error, s.f.localWorkers)}
	for i := range s.f.localWorkers {
		cfg := remote.BatcherConfig{
			Client:  clients[i],
			Env:     s.spec.Env, // the zero Spec before Expect: the tasks' env
			Workers: s.cfg.Workers,
			Logger:  s.log.Named(fmt.Sprintf("local-%d", i)),
		}
		cfg.Policy.Session = onnx.Config{Library: s.library, Logger: cfg.Logger}
		url := s.srv.URL()
		l.wg.Go(func() {
			_, err := remote.RunBatcher(ctx, url, cfg)
			l.mu.Lock()
			l.errs[i] = err
			quit := l.quit
			l.mu.Unlock()
			if err != nil && !quit {
				l.fail(fmt.Errorf("--local-workers: batcher local-%d: %w", i, err))
			}
		})
	}
	return l, nil
}

// stop waits for the local batchers: after the run's end (ended) they finish on their own
// (remote.RunBatcher returns once the learner ends the run); otherwise they are cancelled.
func (l *localBatchers) stop(ended bool) error {
	l.mu.Lock()
	l.quit = true
	l.mu.Unlock()
	if !ended {
		l.cancel()
	}
	l.wg.Wait()
	l.cancel()
	l.fail(nil)
	if !ended {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}

// Expect implements engine.RolloutSource.
func (s *serving) Expect(sp engine.RolloutSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spec = sp
	return nil
}

// Publish implements engine.RolloutSource: the policy goes into the object store and the
// batchers' "latest" pointer moves to it, in the background (remote.Source.Publish): the
// learner goes on training meanwhile.
func (s *serving) Publish(ctx context.Context, version int64, model []byte) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	if err := s.waitAck(ctx); err != nil { // before the trainer checkpoints this iteration
		return err
	}
	return s.src.Publish(ctx, version, model)
}

// Next implements engine.RolloutSource.
func (s *serving) Next(ctx context.Context) (engine.Received, error) {
	if err := s.start(ctx); err != nil {
		return engine.Received{}, err
	}
	if s.local != nil { // a local batcher that fails ends the wait
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(s.local.failed, func() { cancel(context.Cause(s.local.failed)) })
		defer stop()
	}
	r, err := s.src.Next(ctx)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, err) {
			return engine.Received{}, cause
		}
		return engine.Received{}, err
	}
	if s.ledger != nil {
		s.ledger.note("delivered", r)
	}
	ack := func(ctx context.Context) error { return s.ack(ctx, r) }
	return engine.Received{Rollout: r.Rollout, Ack: ack, Bytes: r.Bytes, Latency: r.Latency}, nil
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

// end stops serving. A run that finished (ended) announces its end first, so that the
// batchers flush and exit 0; a run stopped or failed does not: a resumed learner serving the
// same store takes over, and the batchers, which reconnect by themselves, carry on.
func (s *serving) end(ctx context.Context, ended bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.srv != nil {
		errs = append(errs, s.waitAck(ctx))
		st := s.src.Stats()
		s.log.Info("remote collection", zap.Int64("delivered", st.Delivered), zap.Int64("acked", st.Acked),
			zap.Int64("duplicates", st.Duplicates), zap.Int64("refused", st.Refused), zap.Any("refused_reasons", st.RefusedReasons),
			zap.Any("refused_batchers", st.RefusedBatchers))
		if ended {
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			errs = append(errs, s.src.Flush(fctx), s.srv.End(ctx))
			cancel()
		} else {
			s.log.Info("the run did not finish: the batchers wait for a learner that resumes it (train --resume DIR --serve ADDR)")
		}
		if s.local != nil {
			errs = append(errs, s.local.stop(ended))
		}
		if ended && s.ledger != nil {
			errs = append(errs, s.drain(ctx))
		}
		errs = append(errs, s.src.Close(), s.srv.Close())
	}
	if s.ledger != nil {
		errs = append(errs, s.ledger.close())
	}
	return errors.Join(errs...)
}

// drain notes in the ledger the complete rollouts left in the stream at the end of the run,
// taking them until none comes for 2 s, without acknowledging them.
func (s *serving) drain(ctx context.Context) error {
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := s.src.Next(dctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: draining the stream: %w", ledgerEnv, err)
		}
		s.ledger.note("left", r)
	}
}

// ledger is the test hook's file (ledgerEnv). Each line goes out in one write, so a SIGKILL
// leaves whole lines or a cut last one.
type ledger struct {
	mu sync.Mutex // guards f
	f  *os.File
}

func openLedger(name string) (*ledger, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ledgerEnv, err)
	}
	return &ledger{f: f}, nil
}

func (l *ledger) note(what string, r *remote.Received) { l.line(what, r.BatcherID, r.Session, r.Seq) }

func (l *ledger) line(what, batcherID string, session, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.f, "%s %s %x %d\n", what, batcherID, session, seq)
}

func (l *ledger) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

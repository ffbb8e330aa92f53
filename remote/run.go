package remote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/onnx"
)

// BatcherConfig configures RunBatcher, a remote batcher's whole life (batcher --connect URL
// --creds FILE). The zero value works once Client.Creds names the credential.
type BatcherConfig struct {
	// Client configures the connection: the credential (Creds, required by a learner's
	// server), CAFile for TLS, BatcherID, Namespace, Codec, in-flight bound. Its Logger
	// defaults to Logger.
	Client ClientConfig
	// Env, when set, is the env this batcher declares at registration, with its observation
	// shape and action space, so that a learner whose policy does not fit refuses it at
	// once; a task for another env is then an error. The zero Spec (no ID): the env of the
	// task it is given (it registers again with that env's shapes before collecting). The
	// tool resolves it (envs.Lookup) where it starts; a task's env, named by the learner, is
	// resolved once when the task starts.
	Env envs.Spec
	// Workers is the most worker goroutines (default 1): the task's envs are spread over
	// the largest number of workers up to Workers that divides them evenly. Trajectories
	// do not depend on it (the order of a rollout's Episodes does: worker, then step).
	Workers int
	// EnvThreads steps each worker's envs on this many goroutines (batcher.Config.EnvThreads).
	EnvThreads int
	// Policy says how to run the learner's ONNX policies (device, threads, head overrides).
	Policy bind.Config
	// ConnectTimeout bounds the wait for the learner to answer at all, at the start (default
	// 1 min; negative: wait forever). Once connected, a batcher waits for a restarting
	// learner forever.
	ConnectTimeout time.Duration
	// FlushTimeout bounds the wait, at the end, for the server to confirm the rollouts in
	// flight (default 10 s).
	FlushTimeout time.Duration
	// Progress, when set, is called after each rollout is published, one call at a time,
	// from the goroutine that publishes (the next rollout is collected meanwhile).
	Progress func(BatcherProgress)
	// Info, when set, receives the learner's learn-info lines, on RunBatcher's goroutine
	// between rollouts.
	Info func(line []byte)
	// Stop, when closed, ends the run cleanly after the rollout under way is published
	// (the first SIGINT or SIGTERM): RunBatcher flushes, leaves the coordinator (freeing its
	// task at once) and returns nil. Cancelling ctx instead stops at once.
	Stop <-chan struct{}
	// Host is reported to the coordinator (default: the host name).
	Host string
	// Logger receives connection, task and policy notes (default: none).
	Logger *zap.Logger
}

// BatcherProgress is RunBatcher's state after a rollout was published.
type BatcherProgress struct {
	BatcherID     string
	Session       uint64
	Task          string
	Seq           uint64        // the rollout's sequence number
	Rollouts      int64         // published by this session
	Confirmed     int64         // rollouts the server confirmed stored (ClientStats.Confirmed)
	LastConfirmed uint64        // the newest of them (ClientStats.LastConfirmed)
	Steps         int64         // env steps collected and published
	Episodes      int           // episodes that ended
	ReturnMean    float64       // their mean return
	PolicyVersion int64         // of the policy collecting now
	Elapsed       time.Duration // since the first rollout started
}

// StepsPerSec is the collection rate so far.
func (p BatcherProgress) StepsPerSec() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Steps) / p.Elapsed.Seconds()
}

// BatcherSummary is what RunBatcher did, as cmd/batcher prints it.
type BatcherSummary struct {
	BatcherID      string   `json:"batcher_id"`
	Session        string   `json:"session"` // hex
	URL            string   `json:"url"`
	Env            string   `json:"env"`
	Tasks          []string `json:"tasks"` // IDs of the tasks held, in order (a task lost and given again repeats)
	Rollouts       int64    `json:"rollouts"`
	Confirmed      int64    `json:"confirmed"`      // stored by the server
	LastConfirmed  uint64   `json:"last_confirmed"` // sequence number of the newest of them
	Steps          int64    `json:"steps"`
	Episodes       int      `json:"episodes"`
	ReturnMean     float64  `json:"return_mean"`
	ReturnStd      float64  `json:"return_std"`
	StepsPerSec    float64  `json:"steps_per_sec"`
	RolloutsPerSec float64  `json:"rollouts_per_sec"`
	PolicyVersion  int64    `json:"policy_version"` // the last one collecting
	PolicySwaps    int      `json:"policy_swaps"`   // hot swaps between rollouts
	// PolicySwapsInPlace counts the swaps to a version that differs from the one collecting
	// only in its weights: its weights were copied into the sessions (batcher.Batcher.Publish)
	// instead of new sessions being built.
	PolicySwapsInPlace int     `json:"policy_swaps_in_place"`
	Bytes              int64   `json:"bytes"`     // wire bytes confirmed stored
	RawBytes           int64   `json:"raw_bytes"` // uncompressed column bytes published
	BytesPerRollout    float64 `json:"bytes_per_rollout"`
	Retries            int64   `json:"retries"` // publishes sent again (backpressure, timeouts, reconnections)
	Device             string  `json:"device"`
	Workers            int     `json:"workers"`
	EnvsPerWorker      int     `json:"envs_per_worker"`
	Ended              string  `json:"ended"` // "run ended" (the learner's End) or "stopped" (BatcherConfig.Stop)
	Seconds            float64 `json:"seconds"`
	// CollectSeconds is the time spent collecting (batcher.Collect); HandoffSeconds the time
	// collection waited on the transport (a copy of each rollout, and waits while the
	// publishing goroutine is behind); PublishSeconds the time that goroutine spent encoding
	// and publishing (PublishRollout, which waits when MaxInFlight chunks are unconfirmed),
	// overlapped with collection.
	CollectSeconds float64 `json:"collect_seconds"`
	HandoffSeconds float64 `json:"handoff_seconds"`
	PublishSeconds float64 `json:"publish_seconds"`
	// CreditSeconds is the time spent waiting for the learner's credits (ServeConfig.Credits)
	// and the policy versions they asked for: the learner was the bottleneck meanwhile.
	CreditSeconds float64 `json:"credit_seconds"`
}

// TaskSeed is the seed a batcher collects a task with: Task.Seed for its first assignment,
// and a different seed, drawn from (Seed, Attempt), each time the task is given to another
// batcher, so that a reassigned task does not repeat episodes.
func TaskSeed(t Task) uint64 {
	if t.Attempt == 0 {
		return t.Seed
	}
	z := t.Seed + uint64(t.Attempt)*0x9e3779b97f4a7c15 // SplitMix64
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// RunBatcher is a remote batcher: it dials the learner's NATS at url, registers, takes a
// collect task, waits for a policy of at least the task's version floor, builds a local
// batcher (bind.New from the ONNX bytes, batcher.New with the task's env, envs,
// rollout length and TaskSeed), then collects rollouts and publishes each (Pack), until the
// learner ends the run (then it returns nil with Ended "run ended"), cfg.Stop closes
// ("stopped"), or ctx ends (ctx's error). Between rollouts it hot-swaps to the newest
// policy the learner published (batcher.UpdatePolicy). Heartbeats run all along; a task the
// coordinator gave to another batcher (this one was presumed dead) is dropped and a new one
// taken. At the end it waits up to FlushTimeout for the rollouts in flight to be stored and
// leaves the coordinator.
//
// Errors say what to do: a refused credential (ErrUnauthorized), no answer within
// ConnectTimeout (ErrUnreachable), a registration the learner refused (ErrRefused, with both
// shapes), a missing permission (ErrPermission), a policy or task this batcher cannot run.
func RunBatcher(ctx context.Context, url string, cfg BatcherConfig) (BatcherSummary, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Client.Logger == nil {
		cfg.Client.Logger = cfg.Logger
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = time.Minute
	}
	if cfg.FlushTimeout == 0 {
		cfg.FlushTimeout = 10 * time.Second
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	sum := BatcherSummary{URL: url, Env: cfg.Env.ID}
	switch {
	case cfg.Workers < 0:
		return sum, fmt.Errorf("remote: BatcherConfig.Workers = %d, want ≥ 1", cfg.Workers)
	case cfg.EnvThreads < 0:
		return sum, fmt.Errorf("remote: BatcherConfig.EnvThreads = %d, want ≥ 1", cfg.EnvThreads)
	case cfg.FlushTimeout < 0:
		return sum, fmt.Errorf("remote: BatcherConfig.FlushTimeout = %v, want > 0", cfg.FlushTimeout)
	}
	start := time.Now()
	c, err := dialWithin(ctx, url, cfg.Client, cfg.ConnectTimeout)
	if err != nil {
		return sum, err
	}
	sum.BatcherID, sum.Session = c.ID(), strconv.FormatUint(c.Session(), 16)
	cfg.Logger.Info("remote: connected to the learner", zap.String("url", url), zap.String("batcher", c.ID()))
	r := &runner{cfg: cfg, c: c, sum: &sum}
	err = r.run(ctx)

	// Flush what is in flight (also after the run's end: the stream stores it), then leave.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.FlushTimeout)
	if ctx.Err() == nil {
		if ferr := c.Flush(fctx); ferr != nil && err == nil {
			if errors.Is(ferr, context.DeadlineExceeded) {
				cfg.Logger.Warn("remote: rollouts still in flight at the end were not confirmed stored", zap.Duration("waited", cfg.FlushTimeout))
			} else {
				err = publishError(ferr)
			}
		}
	}
	fcancel()
	st := c.Stats()
	err = errors.Join(err, c.Close())
	secs := time.Since(start).Seconds()
	sum.Rollouts, sum.Confirmed, sum.LastConfirmed = st.Rollouts, st.Confirmed, st.LastConfirmed
	sum.Bytes, sum.RawBytes, sum.Retries = st.Bytes, st.RawBytes, st.Retries
	if st.Confirmed > 0 {
		sum.BytesPerRollout = float64(st.Bytes) / float64(st.Confirmed)
	}
	sum.Seconds = secs
	sum.CollectSeconds, sum.HandoffSeconds, sum.PublishSeconds = r.collect.Seconds(), r.handoff.Seconds(), r.publish.Seconds()
	sum.CreditSeconds = r.credit.Seconds()
	if r.elapsed > 0 {
		sum.StepsPerSec = float64(sum.Steps) / r.elapsed.Seconds()
		sum.RolloutsPerSec = float64(sum.Rollouts) / r.elapsed.Seconds()
	}
	sum.Episodes, sum.ReturnMean, sum.ReturnStd = r.returns.N, r.returns.Mean(), r.returns.Std()
	return sum, err
}

// dialWithin dials url, waiting at most wait for the learner's server to answer (negative:
// forever); its errors say what to do (dialError).
func dialWithin(ctx context.Context, url string, cfg ClientConfig, wait time.Duration) (*Client, error) {
	dctx, cancel := connectContext(ctx, wait)
	defer cancel()
	c, err := Dial(dctx, url, cfg)
	if err != nil {
		return nil, dialError(ctx, url, wait, err)
	}
	return c, nil
}

func connectContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// dialError adds to Dial's error what to do about it.
func dialError(ctx context.Context, url string, wait time.Duration, err error) error {
	switch {
	case errors.Is(err, ErrUnauthorized):
		return err
	case ctx.Err() != nil:
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w at %s within %v: is the learner serving there (train --serve ADDR prints the URL) and is its address reachable from this machine (firewall, 127.0.0.1 vs a public address)? --connect-timeout waits longer: %w",
			ErrUnreachable, url, wait, err)
	}
	return fmt.Errorf("remote: connecting to the learner at %s: %w", url, err)
}

// publishError adds to a permanent publish error what to do about it.
func publishError(err error) error {
	if errors.Is(err, ErrPermission) {
		return fmt.Errorf("%w: the credential may not publish rollouts as this batcher; use a batcher credential of this run (DIR/creds/<id>.creds, whose ID the batcher takes), or (an external NATS) pass --id with the batcher ID its operator granted this user (remote.BatcherPermissions)", err)
	}
	return err
}

// runner is one RunBatcher's state; only RunBatcher's goroutine uses it.
type runner struct {
	cfg      BatcherConfig
	c        *Client
	sum      *BatcherSummary
	reg      Registration
	policies <-chan Policy
	info     <-chan []byte
	latest   Policy // newest policy received (Version -1 before the first)
	returns  batcher.Stats
	begin    time.Time     // the first rollout's start
	elapsed  time.Duration // from begin to the last rollout published
	collect  time.Duration // in Collect
	handoff  time.Duration // handing rollouts to the publisher (a copy, and a wait while it is behind)
	publish  time.Duration // in PublishRollout (the publisher's goroutine)
	credit   time.Duration // waiting for credits and their policy floors
}

// Ends of a task's collection other than an error.
var (
	errLost    = errors.New("remote: task lost")
	errEnded   = errors.New("remote: run ended")
	errStopped = errors.New("remote: stopped")
)

// registration is what this batcher declares for env (the zero Spec: any env).
func (r *runner) registration(spec envs.Spec) Registration {
	reg := Registration{Host: r.cfg.Host, EnvID: spec.ID, Agent: "towerrl batcher", Envs: 0}
	if spec.ID == "" {
		return reg
	}
	reg.ObsShape = append([]int(nil), spec.Observation.Shape...)
	reg.ActionSpace = spec.Action.String()
	return reg
}

func (r *runner) register(ctx context.Context, spec envs.Spec) error {
	reg, env := r.registration(spec), spec.ID
	rctx, cancel := connectContext(ctx, r.cfg.ConnectTimeout)
	defer cancel()
	if err := r.c.Register(rctx, reg); err != nil {
		if errors.Is(err, ErrRefused) {
			return fmt.Errorf("%w (this batcher: env %s, observations %v, actions %s)", err, orAny(env), reg.ObsShape, orAny(reg.ActionSpace))
		}
		if errors.Is(err, ErrPermission) {
			return fmt.Errorf("%w: the credential may not talk to the coordinator as batcher %s; use a batcher credential of this run (DIR/creds/<id>.creds, whose ID the batcher takes), or (an external NATS) pass --id with the batcher ID its operator granted this user (remote.BatcherPermissions)", err, r.c.ID())
		}
		return err
	}
	r.reg = reg
	r.cfg.Logger.Info("remote: registered", zap.String("env", orAny(env)))
	return nil
}

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}

func (r *runner) run(ctx context.Context) error {
	err := r.register(ctx, r.cfg.Env)
	if errors.Is(err, ErrRunEnded) {
		r.sum.Ended = "run ended"
		return nil
	}
	if err != nil {
		return err
	}
	r.latest = Policy{Version: -1}
	r.policies = r.c.WatchPolicy(ctx)
	if r.cfg.Info != nil {
		r.info = r.c.Info(ctx)
	}
	for {
		err := r.task(ctx)
		switch {
		case errors.Is(err, errLost):
			continue
		case errors.Is(err, errEnded) || errors.Is(err, ErrRunEnded):
			r.sum.Ended = "run ended"
			r.cfg.Logger.Info("remote: the learner ended the run")
			return nil
		case errors.Is(err, errStopped):
			r.sum.Ended = "stopped"
			return nil
		}
		return err
	}
}

// stopped returns why collection must end now, if it must: ctx, the run's end, cfg.Stop or
// the task being lost.
func (r *runner) stopped(ctx context.Context, lost <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.c.Done():
		return errEnded
	case <-r.cfg.Stop:
		return errStopped
	case <-lost:
		return errLost
	default:
		return nil
	}
}

// drain takes waiting learn-info lines and the newest policy, without blocking.
func (r *runner) drain() {
	for {
		select {
		case line, ok := <-r.info:
			if !ok {
				r.info = nil
				continue
			}
			r.cfg.Info(line)
			continue
		case p, ok := <-r.policies:
			if !ok {
				r.policies = nil
				continue
			}
			r.latest = p
			continue
		default:
		}
		return
	}
}

// task takes a task and collects it until it ends.
func (r *runner) task(ctx context.Context) (err error) {
	a, err := r.c.Task(ctx)
	if err != nil {
		return err
	}
	r.sum.Tasks = append(r.sum.Tasks, a.ID)
	log := r.cfg.Logger.With(zap.String("task", a.ID))
	log.Info("remote: task", zap.String("env", a.EnvID), zap.Int("envs", a.Envs), zap.Int("rollout", a.RolloutLen),
		zap.Uint64("seed", a.Seed), zap.Int("attempt", a.Attempt), zap.Int64("policy_floor", a.PolicyFloor))
	switch {
	case r.cfg.Env.ID != "" && a.EnvID != r.cfg.Env.ID:
		return fmt.Errorf("remote: the learner's task %s runs %s, and this batcher was started for %s (--env): start it without --env, or with --env %s",
			a.ID, a.EnvID, r.cfg.Env.ID, a.EnvID)
	case a.Envs < 1 || a.RolloutLen < 1:
		return fmt.Errorf("remote: the learner's task %s asks for %d envs and rollouts of %d steps; both must be at least 1 (a learner bug)",
			a.ID, a.Envs, a.RolloutLen)
	}
	spec, err := envs.Lookup(a.EnvID)
	if err != nil {
		return fmt.Errorf("remote: the learner's task %s: %w (this batcher's build does not have it; use a batcher of the learner's version)", a.ID, err)
	}
	if r.reg.EnvID != a.EnvID {
		if err := r.register(ctx, spec); err != nil {
			return err
		}
	}
	r.sum.Env = a.EnvID

	// A policy of at least the floor.
	wctx, wcancel := withStop(ctx, r.c.Done(), r.cfg.Stop, a.Lost)
	defer wcancel()
	if err := r.waitPolicy(ctx, wctx, a.PolicyFloor, a.Lost, log); err != nil {
		return err
	}
	// A hot swap binds the same graph again: its notes (what was bound) were logged for the
	// task's first policy; warnings still go out.
	ps := &policies{spec: spec, cfg: r.cfg.Policy, quiet: r.cfg.Policy, log: log}
	if l := ps.quiet.Session.Logger; l != nil {
		ps.quiet.Session.Logger = l.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	}
	pol, err := ps.build(ctx, r.latest, ps.cfg)
	if err != nil {
		return fmt.Errorf("remote: the learner's policy version %d does not run here: %w", r.latest.Version, err)
	}
	workers := r.cfg.Workers
	for a.Envs%workers != 0 {
		workers--
	}
	b, err := batcher.New(ctx, batcher.Config{Env: spec, Workers: workers, EnvsPerWorker: a.Envs / workers,
		EnvThreads: r.cfg.EnvThreads, Steps: a.RolloutLen, Seed: TaskSeed(a.Task), Logger: r.cfg.Logger}, pol)
	if err != nil {
		return fmt.Errorf("remote: starting the batcher for task %s: %w", a.ID, err)
	}
	defer b.Close()
	r.sum.Device, r.sum.Workers, r.sum.EnvsPerWorker = b.Device(), workers, a.Envs/workers
	version := r.latest.Version
	r.sum.PolicyVersion = version
	log.Info("remote: collecting", zap.Int64("policy", version), zap.Int("workers", workers), zap.String("device", b.Device()))

	// Collection stops at once when the run ends or the task is lost; publishing when the
	// run ends (a rollout collected for a task lost since is still good experience).
	tctx, cancel := withStop(ctx, r.c.Done(), a.Lost)
	defer cancel()
	pctx, pcancel := withStop(ctx, r.c.Done())
	defer pcancel()
	pub := r.startPublisher(pctx, a.ID)
	defer func() {
		if perr := pub.close(); perr != nil {
			err = perr // a publishing error wins over how collection ended
		}
	}()
	for {
		if err := r.stopped(ctx, a.Lost); err != nil {
			return err
		}
		if a.Credited { // the learner's permission, and its policy floor
			t0 := time.Now()
			floor, err := r.c.Credit(wctx)
			if err == nil {
				err = r.waitPolicy(ctx, wctx, floor, a.Lost, log)
			}
			r.credit += time.Since(t0)
			if err != nil {
				if stop := r.stopped(ctx, a.Lost); stop != nil {
					return stop
				}
				return err
			}
		}
		r.drain()
		if p := r.latest; p.Version != version {
			inPlace, err := ps.swap(ctx, b, p)
			if err != nil {
				return fmt.Errorf("remote: swapping to the learner's policy version %d: %w", p.Version, err)
			}
			log.Debug("remote: policy swapped", zap.Int64("from", version), zap.Int64("to", p.Version), zap.Bool("in_place", inPlace))
			version = p.Version
			r.sum.PolicyVersion = version
			r.sum.PolicySwaps++
			if inPlace {
				r.sum.PolicySwapsInPlace++
			}
		}
		if r.begin.IsZero() {
			r.begin = time.Now()
		}
		t0 := time.Now()
		roll, err := b.Collect(tctx, a.RolloutLen)
		r.collect += time.Since(t0)
		if err == nil {
			var m RolloutMsg
			if m, err = Pack(a.EnvID, roll); err == nil {
				t1 := time.Now()
				err = pub.send(m, roll, version)
				r.handoff += time.Since(t1)
				if err == nil {
					if a.Credited {
						r.c.spendCredit()
					}
					continue
				}
			}
		}
		if stop := r.stopped(ctx, a.Lost); stop != nil {
			return stop
		}
		return err
	}
}

// policies builds a task's policies: the first with its weights laid out for in-place
// swaps (bind.Config.Publish) when the graph allows it, and each later version in place when
// it differs from the one collecting only in its weights, else as new sessions.
type policies struct {
	spec       envs.Spec
	cfg, quiet bind.Config // quiet: for swaps (the binding notes were logged once)
	log        *zap.Logger
	w          *modelWeights // the collecting policy's weights; nil: not published in place
}

// build makes p's policy with cfg, its weights laid out for Batcher.Publish when it can.
func (ps *policies) build(ctx context.Context, p Policy, cfg bind.Config) (*bind.Policy, error) {
	ps.w = nil
	m, err := onnx.Parse(p.ONNX) // once, for the weights and the bindings below
	if err != nil {
		return nil, err
	}
	if w, err := weightsOf(m); err == nil && len(w.names) > 0 && len(cfg.Publish) == 0 {
		lcfg := cfg
		lcfg.Publish = w.layout()
		pol, err := bind.FromModel(ctx, m, p.Version, ps.spec, lcfg)
		if err == nil {
			ps.w = &w
			return pol, nil
		}
		ps.log.Debug("remote: the policy's weights cannot be published in place; swaps build new sessions", zap.Error(err))
	}
	return bind.FromModel(ctx, m, p.Version, ps.spec, cfg)
}

// swap makes p the policy b collects with, in place when it can (inPlace).
func (ps *policies) swap(ctx context.Context, b *batcher.Batcher, p Policy) (inPlace bool, err error) {
	if ps.w != nil {
		if w, err := readWeights(p.ONNX); err == nil && ps.w.sameLayout(w) {
			return true, b.Publish(ctx, p.Version, w.flat)
		}
	}
	next, err := ps.build(ctx, p, ps.quiet)
	if err != nil {
		return false, err
	}
	return false, b.UpdatePolicy(ctx, next)
}

// waitPolicy waits until the newest policy received is of at least version floor (taking
// the policies and learn-info lines that arrive meanwhile), or wctx ends (then it returns why:
// ctx, the run's end, Stop or the task lost).
func (r *runner) waitPolicy(ctx, wctx context.Context, floor int64, lost <-chan struct{}, log *zap.Logger) error {
	var waitLog time.Time
	for r.drain(); r.latest.Version < floor || r.latest.ONNX == nil; r.drain() {
		if time.Since(waitLog) > 10*time.Second {
			if !waitLog.IsZero() {
				log.Info("remote: waiting for a policy", zap.Int64("floor", floor), zap.Int64("have", r.latest.Version))
			}
			waitLog = time.Now()
		}
		select {
		case <-wctx.Done():
			return r.stopped(ctx, lost)
		case p, ok := <-r.policies:
			if !ok {
				if err := r.stopped(ctx, lost); err != nil {
					return err
				}
				return errEnded
			}
			r.latest = p
		case <-time.After(time.Second):
		}
	}
	return nil
}

// publisher publishes a task's rollouts on a goroutine of its own, so that the next rollout
// is collected while the last one is encoded and published: send copies a packed rollout
// into one of two message buffers (the batcher reuses its rollout) and hands it over,
// waiting only while both buffers are being published.
type publisher struct {
	r      *runner
	task   string
	jobs   chan pubJob
	free   chan *RolloutMsg
	failed chan struct{} // closed when the goroutine stopped on an error
	err    error         // written before failed or done is closed
	done   chan struct{}
}

type pubJob struct {
	m       *RolloutMsg
	steps   int64
	returns []float64
	version int64
}

func (r *runner) startPublisher(ctx context.Context, task string) *publisher {
	p := &publisher{r: r, task: task, jobs: make(chan pubJob), free: make(chan *RolloutMsg, 2),
		failed: make(chan struct{}), done: make(chan struct{})}
	p.free <- new(RolloutMsg)
	p.free <- new(RolloutMsg)
	go p.run(ctx)
	return p
}

func (p *publisher) run(ctx context.Context) {
	defer close(p.done)
	r := p.r
	for job := range p.jobs {
		t0 := time.Now()
		seq, err := r.c.PublishRollout(ctx, *job.m)
		r.publish += time.Since(t0)
		p.free <- job.m
		if err != nil {
			p.err = publishError(err)
			close(p.failed)
			for range p.jobs { // until close: send sees failed
			}
			return
		}
		r.sum.Steps += job.steps
		for _, ret := range job.returns {
			r.returns.Add(ret)
		}
		r.elapsed = time.Since(r.begin)
		if r.cfg.Progress != nil {
			st := r.c.Stats()
			r.cfg.Progress(BatcherProgress{BatcherID: r.c.ID(), Session: r.c.Session(), Task: p.task, Seq: seq,
				Rollouts: st.Rollouts, Confirmed: st.Confirmed, LastConfirmed: st.LastConfirmed, Steps: r.sum.Steps,
				Episodes: r.returns.N, ReturnMean: r.returns.Mean(), PolicyVersion: job.version, Elapsed: r.elapsed})
		}
	}
}

// send hands a packed rollout over; m may alias roll's buffers, which send no longer needs
// when it returns.
func (p *publisher) send(m RolloutMsg, roll *batcher.Rollout, version int64) error {
	var buf *RolloutMsg
	select {
	case buf = <-p.free:
	case <-p.failed:
		return p.err
	}
	copyMsg(buf, &m)
	job := pubJob{m: buf, steps: int64(roll.T * roll.N), version: version}
	for _, e := range roll.Episodes {
		job.returns = append(job.returns, e.Return)
	}
	select {
	case p.jobs <- job:
		return nil
	case <-p.failed:
		return p.err
	}
}

// close waits for the rollouts handed over to be published and returns the publishing
// error, if any (ErrRunEnded and context errors are for the caller to tell).
func (p *publisher) close() error {
	close(p.jobs)
	<-p.done
	select {
	case <-p.failed:
		if errors.Is(p.err, ErrRunEnded) || errors.Is(p.err, context.Canceled) {
			return nil
		}
		return p.err
	default:
		return nil
	}
}

// copyMsg makes dst a copy of src, reusing dst's column buffers.
func copyMsg(dst, src *RolloutMsg) {
	cols := dst.Columns
	*dst = *src
	dst.Columns = cols[:0]
	for i := range src.Columns {
		sc := &src.Columns[i]
		var c Column
		if i < len(cols) {
			c = cols[i]
		}
		c.Name = sc.Name
		switch sc.DType() {
		case Float32:
			c.F32, c.I64, c.F64 = append(c.F32[:0:cap(c.F32)], sc.F32...), nil, nil
			if c.F32 == nil {
				c.F32 = []float32{}
			}
		case Int64:
			c.F32, c.I64, c.F64 = nil, append(c.I64[:0:cap(c.I64)], sc.I64...), nil
			if c.I64 == nil {
				c.I64 = []int64{}
			}
		case Float64:
			c.F32, c.I64, c.F64 = nil, nil, append(c.F64[:0:cap(c.F64)], sc.F64...)
			if c.F64 == nil {
				c.F64 = []float64{}
			}
		}
		dst.Columns = append(dst.Columns, c)
	}
}

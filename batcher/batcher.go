package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
	"go.uber.org/zap"
)

// ErrConfig is wrapped by errors about an invalid Config field.
var ErrConfig = errors.New("batcher: invalid config")

// ErrClosed is returned by calls on a closed Batcher.
var ErrClosed = errors.New("batcher: closed")

// Config configures a Batcher. The zero value needs only Env.
type Config struct {
	// Env is the environment's spec (required), resolved once where the run or tool starts
	// (envs.Lookup) and passed down, not looked up again by id.
	Env envs.Spec
	// Workers is the number of worker goroutines W. Default 1.
	Workers int
	// EnvsPerWorker is M, the envs each worker steps with one inference call. Default 64.
	EnvsPerWorker int
	// EnvThreads steps each worker's M envs in this many shards on their own goroutines
	// (envs.Config.Threads), the trajectories unchanged: one worker with many envs and one
	// inference call per step (a GPU), its envs stepped on several cores, as rlstructures
	// recommends. Keep Workers × EnvThreads within the cores. Snapshot needs 1. Default 1.
	EnvThreads int
	// Pipeline splits each worker's M envs into two halves of M/2, each stepped on its own
	// goroutine with its own session, that take turns in ONNX Runtime: one half's sampling,
	// env step and bookkeeping run while the other half's inference does, so the worker's
	// inference runs one call at a time, as without, and its other work moves off that
	// call's path onto a second core. The trajectories, the rollout's rows and the order of
	// its Episodes are those without (a row's outputs do not depend on the batch it ran in).
	// Each inference call runs M/2 rows. It needs M even and EnvThreads 1; Snapshot refuses
	// it. Default false.
	Pipeline bool
	// NoSpin makes the env shards' goroutines (EnvThreads > 1) park at once between steps
	// instead of spinning briefly (envs.Config.NoSpin). Default false.
	NoSpin bool
	// Steps is the largest rollout (steps per env) Collect is asked for; buffers are sized
	// for it. Default 128.
	Steps int
	// Seed selects the envs' reset streams and the agents' sampling streams; env i's
	// streams depend on (Seed, i) only, not on how envs are spread over workers. Default 0.
	Seed uint64
	// Deterministic takes the most probable action (the mean of a Gaussian) instead of sampling.
	Deterministic bool
	// MaxEpisodeSteps overrides the registered time limit when > 0.
	MaxEpisodeSteps int
	// Logger receives progress messages. Default: none.
	Logger *zap.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.EnvsPerWorker == 0 {
		c.EnvsPerWorker = 64
	}
	if c.Steps == 0 {
		c.Steps = 128
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	switch {
	case c.Env.ID == "":
		return c, fmt.Errorf("%w: Env is required", ErrConfig)
	case c.Workers < 0:
		return c, fmt.Errorf("%w: Workers = %d, want >= 1", ErrConfig, c.Workers)
	case c.EnvsPerWorker < 0:
		return c, fmt.Errorf("%w: EnvsPerWorker = %d, want >= 1", ErrConfig, c.EnvsPerWorker)
	case c.EnvThreads < 0:
		return c, fmt.Errorf("%w: EnvThreads = %d, want >= 1", ErrConfig, c.EnvThreads)
	case c.Steps < 0:
		return c, fmt.Errorf("%w: Steps = %d, want >= 1", ErrConfig, c.Steps)
	case c.Pipeline && c.EnvsPerWorker%2 != 0:
		return c, fmt.Errorf("%w: Pipeline splits EnvsPerWorker in two halves; EnvsPerWorker = %d, want an even number", ErrConfig, c.EnvsPerWorker)
	case c.Pipeline && c.EnvThreads > 1:
		return c, fmt.Errorf("%w: Pipeline with EnvThreads = %d; want one of them", ErrConfig, c.EnvThreads)
	}
	return c, nil
}

// Timings splits the workers' time, summed over workers, since the Batcher started.
type Timings struct {
	Env       time.Duration // VecEnv.Step
	Inference time.Duration // ONNX Runtime
	Sampling  time.Duration // the policy head (Agent.Act less inference)
	Buffers   time.Duration // copying into the rollout and episode bookkeeping
	Wall      time.Duration // Collect calls and closed streams, wall clock
	Steps     int64         // env steps
}

// Batcher steps W workers × M envs with a policy and collects rollouts, one at a time
// (Collect) or continuously into a ring of buffers (Stream). Collect, Stream, UpdatePolicy,
// Publish and Close may be called from different goroutines; Collect calls are serialised.
type Batcher struct {
	cfg  Config
	spec envs.Spec
	// workers are the goroutines: Config.Workers of them, or with Config.Pipeline twice as
	// many, each worker's two halves in turn (2k and 2k+1 sharing a turn in ONNX Runtime).
	workers []*worker
	rollout *Rollout
	wg      sync.WaitGroup

	device string // where the workers' policy runs: "cpu", "cuda", or "random" for no policy
	states string // the policy's recurrent state layout (bind.Policy.StateLayout); a new policy must match

	mu      sync.Mutex // guards closed and stream and serialises Collect; held while a rollout runs
	closed  bool
	stream  *Stream // the running stream, nil in Collect mode
	timings Timings // written under mu
	cut     cutter  // the end of a CollectPreemptible rollout, reset under mu

	// newest is the version of the latest policy handed to the workers: New's, then each
	// Publish's or UpdatePolicy's. A stream measures policy lag from it.
	newest atomic.Int64

	pubMu     sync.Mutex // serialises Publish and UpdatePolicy's hand-over, guards pubClosed; taken after mu
	pubClosed bool
}

// worker owns one VecEnv, its agent and the agent's buffers; it runs on its own goroutine.
type worker struct {
	index, m int
	env      envs.VecEnv
	agent    Agent
	rngs     []*rand.Rand // sampling stream of each of its envs
	pcgs     []*rand.PCG  // their sources, for snapshots
	in       AgentInput
	out      AgentOutput
	acts     envs.Actions
	fin      []float32 // final observations of truncated episodes, gathered for their values
	finRow   []int     // their rows in the rollout
	finV     []float32 // their values
	// Recurrent state: in.State holds each env's state before the next step, out.State
	// receives the state after it; the two swap after every step. stIn and stOut are their
	// host memory, finSt the states of truncated episodes gathered for their values.
	stIn, stOut [][]float32
	stSize      []int // elements of one env's state, per state
	finSt       [][]float32
	starts      []float32     // host memory of in.Starts: 1 where an env's episode starts
	ret         []float64     // running return per env
	length      []int         // running length per env
	episodes    []Episode     // of the last Collect
	oldest      int64         // the oldest version in the worker's rows of its last rollout
	timings     Timings       // written by the worker's goroutine only
	slowDebt    time.Duration // Preempt.Slowdown's wait not slept yet
	yielded     time.Time     // when the worker last yielded its thread (see yieldEvery)
	turn        *turn         // with Config.Pipeline, held by the half whose inference runs; else nil
	reqs        chan request
	done        chan error

	sharedMu sync.Mutex // guards shared
	shared   Timings    // a copy of timings as of the worker's last rollout, for Timings

	phys *envs.PhysicsAccess // env's qpos and qvel, for a simulated env (else nil)

	pendingMu sync.Mutex  // guards pending, and agent against other goroutines (the worker reads it freely)
	pending   Agent       // next agent, installed between steps
	hasNext   atomic.Bool // pending != nil, read without the lock every step
}

// request is a worker's next job: one rollout of steps into Batcher.rollout (Collect), or,
// when stream is set, rollouts of steps into the stream's slots until ctx ends.
type request struct {
	ctx    context.Context
	steps  int
	stream *Stream
	cut    *cutter // a CollectPreemptible rollout's shared end, else nil
}

// New makes the envs and one agent per worker, resets the envs, and starts the workers.
// policy nil acts uniformly at random.
func New(ctx context.Context, cfg Config, policy *bind.Policy) (*Batcher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := CheckMemory(cfg, false, AvailableMemory()); err != nil {
		return nil, err
	}
	spec := cfg.Env
	actDim, discrete := spec.Action.Dim(), false
	if _, ok := spec.Action.(envs.Discrete); ok {
		actDim, discrete = 1, true
	}
	if policy != nil && !cfg.Deterministic {
		if err := policy.Stochastic(); err != nil {
			return nil, err
		}
	}
	b := &Batcher{cfg: cfg, spec: spec}
	n := cfg.Workers * cfg.EnvsPerWorker
	b.rollout = newRollout(cfg.Steps, n, spec.Observation.Shape, actDim, discrete)
	if policy != nil {
		b.states = policy.StateLayout()
		b.newest.Store(policy.Version())
		for _, st := range policy.States() {
			b.rollout.StateNames = append(b.rollout.StateNames, st.Name)
			b.rollout.StateShapes = append(b.rollout.StateShapes, st.Row)
		}
		b.rollout.allocStates()
	}
	goroutines, m := cfg.Workers, cfg.EnvsPerWorker
	if cfg.Pipeline {
		goroutines, m = 2*cfg.Workers, m/2
	}
	var tn *turn
	for w := range goroutines {
		if cfg.Pipeline && w%2 == 0 {
			tn = new(turn)
		}
		wk, err := b.newWorker(ctx, w, m, tn, policy, actDim, discrete)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("batcher: worker %d: %w", w, err), b.closeWorkers())
		}
		b.workers = append(b.workers, wk)
	}
	if ph := b.workers[0].phys; ph != nil {
		b.rollout.allocPhysics(ph.NQ(), ph.NV())
	}
	b.device = "random"
	if a, ok := b.workers[0].agent.(*onnxAgent); ok {
		b.device = string(a.r.Provider())
	}
	for _, w := range b.workers {
		b.wg.Add(1)
		go w.run(&b.wg, b.rollout)
	}
	return b, nil
}

// Device is where the workers' policy runs: "cpu" or "cuda" (the provider the sessions got,
// after any fallback of "auto"), or "random" without a policy.
func (b *Batcher) Device() string { return b.device }

// samplingStream seeds env i's action-sampling stream, apart from its reset stream.
func samplingStream(seed uint64, i int) (*rand.Rand, *rand.PCG) {
	src := rand.NewPCG(seed^0x5851f42d4c957f2d, uint64(i)*0x9e3779b97f4a7c15+0x632be59bd9b4e019)
	return rand.New(src), src
}

// newWorker makes goroutine w's worker, stepping envs w·m to (w+1)·m; turn is its pair's
// (Config.Pipeline), else nil.
func (b *Batcher) newWorker(ctx context.Context, w, m int, turn *turn, policy *bind.Policy, actDim int, discrete bool) (*worker, error) {
	od := b.spec.Observation.Dim()
	wk := &worker{index: w, m: m, turn: turn, rngs: make([]*rand.Rand, m), pcgs: make([]*rand.PCG, m), ret: make([]float64, m),
		fin: make([]float32, m*od), finRow: make([]int, 0, m), finV: make([]float32, m),
		length: make([]int, m), reqs: make(chan request), done: make(chan error)}
	for i := range m {
		wk.rngs[i], wk.pcgs[i] = samplingStream(b.cfg.Seed, w*m+i)
	}
	env, err := envs.Make(b.cfg.Env.ID, envs.Config{NumEnvs: m, Seed: b.cfg.Seed, Offset: w * m,
		MaxEpisodeSteps: b.cfg.MaxEpisodeSteps, Threads: b.cfg.EnvThreads, NoSpin: b.cfg.NoSpin})
	if err != nil {
		return nil, err
	}
	wk.env = env
	wk.phys, _ = envs.PhysicsOf(env)
	if policy == nil {
		wk.agent = &randomAgent{space: b.spec.Action, rngs: wk.rngs}
	} else if wk.agent, err = newWorkerAgent(ctx, policy, wk, b.cfg.Deterministic); err != nil {
		return nil, errors.Join(err, env.Close())
	}
	if err := env.Reset(); err != nil {
		return nil, errors.Join(err, wk.close())
	}
	cpu := device.CPU()
	shape := append([]int{m}, b.spec.Observation.Shape...)
	mk := func(name string, n int, shape ...int) *device.Tensor {
		t, _ := cpu.Mirror(name, make([]float32, n), shape...)
		return t
	}
	wk.in.N = m
	wk.in.Obs, err = cpu.Mirror("obs", env.Buffers().Obs, shape...)
	if err != nil {
		return nil, errors.Join(err, wk.close())
	}
	wk.starts = make([]float32, m)
	wk.in.Starts, _ = cpu.Mirror("episode_starts", wk.starts, m)

	wk.out = AgentOutput{
		Actions:    mk("actions", m*actDim, m, actDim),
		EnvActions: mk("env_actions", m*actDim, m, actDim),
		LogP:       mk("logp", m, m),
		Value:      mk("value", m, m),
	}
	if err := wk.initState(); err != nil {
		return nil, errors.Join(err, wk.close())
	}
	if discrete {
		wk.acts.Discrete = make([]int, m)
	} else {
		wk.acts.Box = make([]float32, m*actDim)
	}
	return wk, nil
}

// initState makes the agent's recurrent states (zero) and their double buffer.
func (w *worker) initState() error {
	var err error
	if w.in.State, err = w.agent.Initial(w.m); err != nil {
		return err
	}
	if w.out.State, err = w.agent.Initial(w.m); err != nil {
		return err
	}
	k := len(w.in.State)
	w.stIn, w.stOut, w.finSt, w.stSize = make([][]float32, k), make([][]float32, k), make([][]float32, k), make([]int, k)
	for j := range k {
		if w.stIn[j], err = host(w.in.State[j]); err != nil {
			return err
		}
		if w.stOut[j], err = host(w.out.State[j]); err != nil {
			return err
		}
		w.stSize[j] = len(w.stIn[j]) / w.m
		w.finSt[j] = make([]float32, len(w.stIn[j]))
	}
	return nil
}

func (w *worker) close() error {
	var errs []error
	if w.agent != nil {
		errs = append(errs, w.agent.Close())
	}
	if w.pending != nil {
		errs = append(errs, w.pending.Close())
	}
	if w.env != nil {
		errs = append(errs, w.env.Close())
	}
	return errors.Join(errs...)
}

func (b *Batcher) closeWorkers() error {
	var errs []error
	for _, w := range b.workers {
		errs = append(errs, w.close())
	}
	return errors.Join(errs...)
}

// Spec is the environment's spec.
func (b *Batcher) Spec() envs.Spec { return b.spec }

// NumEnvs is W·M.
func (b *Batcher) NumEnvs() int { return b.rollout.N }

// Collect runs steps (1..Config.Steps) steps on every env and returns the rollout, which
// stays valid until the next Collect. Workers run in parallel. While a Stream runs it
// returns an error wrapping ErrStreaming.
func (b *Batcher) Collect(ctx context.Context, steps int) (*Rollout, error) {
	return b.collect(ctx, steps, nil)
}

// collect is Collect, preemptible when p is set (CollectPreemptible).
func (b *Batcher) collect(ctx context.Context, steps int, p *Preempt) (*Rollout, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.stream != nil {
		return nil, fmt.Errorf("%w: Collect refused; close the stream (Stream.Close) to collect again", ErrStreaming)
	}
	if err := b.checkSteps(steps); err != nil {
		return nil, err
	}
	start := time.Now()
	r := b.rollout
	var cut *cutter
	if p != nil {
		cut = &b.cut
		cut.reset(steps, len(b.workers), p)
	}
	for _, w := range b.workers {
		w.reqs <- request{ctx: ctx, steps: steps, cut: cut}
	}
	var errs []error
	for _, w := range b.workers {
		if err := <-w.done; err != nil {
			errs = append(errs, fmt.Errorf("batcher: worker %d: %w", w.index, err))
		}
	}
	r.T = steps
	if cut != nil {
		r.T = cut.steps()
	}
	r.Episodes = b.rolloutEpisodes(r.Episodes[:0], r, func(k int) []Episode { return b.workers[k].episodes })
	b.timings.Wall += time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// Timings reports where the workers' time went. It waits for a running Collect; while a
// stream runs it counts the rollouts the workers have finished.
func (b *Batcher) Timings() Timings {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.timings
	for _, w := range b.workers {
		w.sharedMu.Lock()
		s := w.shared
		w.sharedMu.Unlock()
		t.Env += s.Env
		t.Inference += s.Inference
		t.Sampling += s.Sampling
		t.Buffers += s.Buffers
		t.Steps += s.Steps
	}
	return t
}

// UpdatePolicy installs a new policy on every worker. It builds the workers' sessions first,
// then hands each worker its agent; a worker switches between two steps, so collection never
// pauses and no step mixes versions. The policy must fit the environment (see NewPolicy).
// After Close it returns ErrClosed.
func (b *Batcher) UpdatePolicy(ctx context.Context, policy *bind.Policy) error {
	if policy == nil {
		return errors.New("batcher: UpdatePolicy needs a policy")
	}
	if l := policy.StateLayout(); l != b.states {
		return fmt.Errorf("%w: the new policy's recurrent states (%s) are not the batcher's (%s); make a new Batcher for it",
			bind.ErrPolicy, orNone(l), orNone(b.states))
	}
	if !b.cfg.Deterministic {
		if err := policy.Stochastic(); err != nil {
			return err
		}
	}
	agents := make([]Agent, len(b.workers))
	for i, w := range b.workers {
		a, err := newWorkerAgent(ctx, policy, w, b.cfg.Deterministic)
		if err != nil {
			for _, a := range agents[:i] {
				a.Close()
			}
			return err
		}
		agents[i] = a
	}
	b.pubMu.Lock() // hand over in the same order as Publish calls
	defer b.pubMu.Unlock()
	if b.pubClosed {
		var errs []error
		for _, a := range agents {
			errs = append(errs, a.Close())
		}
		return errors.Join(ErrClosed, errors.Join(errs...))
	}
	var errs []error
	for i, w := range b.workers {
		w.pendingMu.Lock()
		if w.pending != nil { // a newer policy replaces one the worker has not picked up yet
			errs = append(errs, w.pending.Close())
		}
		w.pending = agents[i]
		w.hasNext.Store(true)
		w.pendingMu.Unlock()
	}
	b.newest.Store(policy.Version())
	return errors.Join(errs...)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Close stops the workers (closing a running stream first), waits for them and releases envs
// and sessions. It is idempotent.
func (b *Batcher) Close() error {
	var errs []error
	b.mu.Lock()
	for b.stream != nil { // a stream started meanwhile is closed too
		s := b.stream
		b.mu.Unlock()
		errs = append(errs, s.Close())
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.closed {
		return errors.Join(errs...)
	}
	b.closed = true
	b.pubMu.Lock()
	b.pubClosed = true
	b.pubMu.Unlock()
	for _, w := range b.workers {
		close(w.reqs)
	}
	b.wg.Wait()
	return errors.Join(append(errs, b.closeWorkers())...)
}

func (w *worker) run(wg *sync.WaitGroup, r *Rollout) {
	defer wg.Done()
	for req := range w.reqs {
		if req.stream != nil {
			w.done <- w.stream(req.ctx, req.stream, req.steps)
			continue
		}
		err := w.rollout(req.ctx, r, req.steps, &w.episodes, req.cut)
		w.shareTimings()
		w.done <- err
	}
}

// shareTimings copies the worker's timings for Timings, on the worker's goroutine.
func (w *worker) shareTimings() {
	w.sharedMu.Lock()
	w.shared = w.timings
	w.sharedMu.Unlock()
}

// swap installs a pending agent, between steps.
func (w *worker) swap() error {
	w.pendingMu.Lock()
	old := w.agent
	w.agent = w.pending
	w.pending = nil
	w.hasNext.Store(false)
	w.pendingMu.Unlock()
	return old.Close()
}

// rollout runs steps steps of the worker's envs into its rows of r, and the episodes that end
// into *episodes (emptied first). It stops with ctx's error at a step boundary, and, with a
// cutter, at the step the cutter ends the rollout at.
func (w *worker) rollout(ctx context.Context, r *Rollout, steps int, episodes *[]Episode, cut *cutter) error {
	n, m, off, od, ad := r.N, w.m, w.index*w.m, r.ObsDim, r.ActDim
	bufs := w.env.Buffers()
	acts, _ := w.out.Actions.Host()
	envActs, _ := w.out.EnvActions.Host()
	logp, _ := w.out.LogP.Host()
	value, _ := w.out.Value.Host()
	*episodes = (*episodes)[:0]
	w.oldest = math.MaxInt64
	var inf0 time.Duration
	if a, ok := w.agent.(timed); ok {
		inf0 = a.inferenceTime()
	}
	for t := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if cut != nil && !cut.take(w.index, t) {
			break
		}
		if w.hasNext.Load() {
			w.accountInference(&inf0)
			if err := w.swap(); err != nil {
				return err
			}
			if a, ok := w.agent.(timed); ok {
				inf0 = a.inferenceTime()
			}
		}
		if a, ok := w.agent.(*onnxAgent); ok {
			if err := a.r.TakeWeights(); err != nil { // weights a Publish staged
				return err
			}
		}
		t0 := time.Now()
		base := t*n + off
		copy(r.Obs[base*od:(base+m)*od], bufs.Obs)
		if w.phys != nil && r.QPos != nil {
			nq, nv := r.NQ, r.NV
			for i := range m {
				w.phys.State(i, r.QPos[(base+i)*nq:(base+i+1)*nq], r.QVel[(base+i)*nv:(base+i+1)*nv])
			}
		}
		markStarts(w.starts, r.EpisodeStarts[base:base+m], w.length)
		for j, st := range w.stIn {
			sz := w.stSize[j]
			copy(r.States[j][base*sz:(base+m)*sz], st)
		}
		t1 := time.Now()
		if err := w.agent.Act(w.in, w.out); err != nil {
			return err
		}
		t2 := time.Now()
		w.in.State, w.out.State = w.out.State, w.in.State
		w.stIn, w.stOut = w.stOut, w.stIn
		version := w.agent.Version()
		w.oldest = min(w.oldest, version)
		copy(r.Actions[base*ad:(base+m)*ad], acts)
		copy(r.EnvActions[base*ad:(base+m)*ad], envActs)
		copy(r.LogP[base:base+m], logp)
		copy(r.Values[base:base+m], value)
		w.envActions(r.Version[base:base+m], version, envActs)
		t3 := time.Now()
		if err := w.env.Step(w.acts); err != nil {
			return err
		}
		t4 := time.Now()
		copy(r.Rewards[base:base+m], bufs.Rewards)
		copy(r.Terminated[base:base+m], bufs.Terminated)
		copy(r.Truncated[base:base+m], bufs.Truncated)
		w.tally(r, base, version, bufs, episodes)
		t5 := time.Now()
		if err := w.truncationValues(r); err != nil {
			return err
		}
		w.resetStates(bufs.Terminated, bufs.Truncated)
		if t5.Sub(w.yielded) >= yieldEvery {
			w.yielded = t5
			runtime.Gosched()
		}
		w.timings.Env += t4.Sub(t3)
		w.timings.Sampling += t2.Sub(t1) + time.Since(t5) // inference is moved out below
		w.timings.Buffers += t1.Sub(t0) + t3.Sub(t2) + t5.Sub(t4)
		w.timings.Steps += int64(m)
		if cut != nil && cut.slowdown > 1 {
			w.pace(cut.slowdown, time.Since(t0))
		}
	}
	copy(r.LastObs[off*od:(off+m)*od], bufs.Obs)
	tl := time.Now()
	if v, ok := w.agent.(valuer); ok {
		markStarts(w.starts, nil, w.length)
		if err := v.values(bufs.Obs, w.stIn, w.starts, m, r.LastValues[off:off+m]); err != nil {
			return err
		}
	} else {
		clear(r.LastValues[off : off+m])
	}
	w.timings.Sampling += time.Since(tl) // the inference in it is moved out next
	w.accountInference(&inf0)
	return nil
}

// yieldEvery is how often a worker yields to Go's scheduler between steps. A goroutine that
// runs 10 ms without a scheduling point is preempted by sysmon, which then takes the P of a
// worker inside ONNX Runtime and, having found work to do, polls every 20 µs again for the
// next millisecond: 1.8k wake-ups a second with one worker, each a timer armed in the kernel
// (a few percent of the worker's CPU on a VM). A yield every 5 ms, a scheduling point sysmon
// sees, keeps it backing off to its 10 ms sleep.
const yieldEvery = 5 * time.Millisecond

// markStarts sets starts[i] (and dst[i], unless dst is nil) to 1 where an env's episode has
// not taken a step yet (its length is 0), else 0.
func markStarts(starts, dst []float32, length []int) {
	starts = starts[:len(length)]
	if dst == nil {
		dst = starts
	}
	dst = dst[:len(length)]
	for i, l := range length {
		var s float32
		if l == 0 {
			s = 1
		}
		starts[i], dst[i] = s, s
	}
}

// envActions writes the step's policy version into ver (the worker's rows of Rollout.Version)
// and the env actions envActs into w.acts, in one pass for a Discrete space.
func (w *worker) envActions(ver []int64, version int64, envActs []float32) {
	d := w.acts.Discrete
	if d == nil {
		for i := range ver {
			ver[i] = version
		}
		copy(w.acts.Box, envActs)
		return
	}
	d, envActs = d[:len(ver)], envActs[:len(ver)]
	for i := range ver {
		ver[i], d[i] = version, int(envActs[i])
	}
}

// tally adds the step's rewards to the running returns and lengths, and for each episode that
// ended (in env order) keeps its final observation in row base+i of r, records it in
// *episodes and, when it was truncated and not terminated and the agent gives values, gathers
// it for truncationValues.
func (w *worker) tally(r *Rollout, base int, version int64, bufs envs.Buffers, episodes *[]Episode) {
	_, values := w.agent.(valuer)
	w.finRow = w.finRow[:0]
	ret, length := w.ret, w.length[:len(w.ret)]
	rew, term, trunc := bufs.Rewards[:len(ret)], bufs.Terminated[:len(ret)], bufs.Truncated[:len(ret)]
	for i := range ret {
		ret[i] += float64(rew[i])
		length[i]++
		if term[i] != 0 || trunc[i] != 0 {
			w.endEpisode(r, base, i, version, values && term[i] == 0, bufs.FinalObs, episodes)
		}
	}
}

// endEpisode records env i's episode, which ended at this step (see tally).
func (w *worker) endEpisode(r *Rollout, base, i int, version int64, truncated bool, finalObs []float32, episodes *[]Episode) {
	od, row := r.ObsDim, base+i
	final := finalObs[i*od : (i+1)*od]
	copy(r.FinalObs[row*od:(row+1)*od], final)
	*episodes = append(*episodes, Episode{Env: w.index*w.m + i, Return: w.ret[i], Length: w.length[i], Version: version})
	w.ret[i], w.length[i] = 0, 0
	if !truncated {
		return
	}
	k := len(w.finRow)
	copy(w.fin[k*od:(k+1)*od], final)
	for j, sz := range w.stSize { // the state the episode's last step left
		copy(w.finSt[j][k*sz:(k+1)*sz], w.stIn[j][i*sz:(i+1)*sz])
	}
	w.finRow = append(w.finRow, row)
}

// truncationValues evaluates, with the agent that acted, the final observations of this
// step's episodes that were truncated and not terminated, which tally gathered.
func (w *worker) truncationValues(r *Rollout) error {
	v, ok := w.agent.(valuer)
	if !ok || len(w.finRow) == 0 {
		return nil
	}
	if err := v.values(w.fin, w.finSt, nil, len(w.finRow), w.finV); err != nil {
		return err
	}
	for k, row := range w.finRow {
		r.FinalValues[row] = w.finV[k]
	}
	return nil
}

// resetStates zeroes the recurrent state of every env whose episode just ended: the env was
// reset, and its next step starts an episode.
func (w *worker) resetStates(terminated, truncated []float32) {
	for j, sz := range w.stSize {
		for i := range w.m {
			if terminated[i] != 0 || truncated[i] != 0 {
				clear(w.stIn[j][i*sz : (i+1)*sz])
			}
		}
	}
}

// accountInference moves the agent's inference time since *since from Sampling to Inference.
func (w *worker) accountInference(since *time.Duration) {
	if a, ok := w.agent.(timed); ok {
		d := a.inferenceTime() - *since
		w.timings.Inference += d
		w.timings.Sampling -= d
		*since = a.inferenceTime()
	}
}

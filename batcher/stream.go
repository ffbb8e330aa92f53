package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrStreaming is wrapped by the errors of calls refused while a Stream runs: Collect,
// Snapshot, Restore and a second Stream.
var ErrStreaming = errors.New("batcher: a stream is running")

// ErrStreamClosed is returned by Stream.Next after Stream.Close.
var ErrStreamClosed = errors.New("batcher: stream closed")

// ErrSlot is wrapped by the error of Stream.Release for a slot the caller does not hold: out
// of range, never handed out by Next, or released already.
var ErrSlot = errors.New("batcher: not a slot held from Stream.Next")

// StreamConfig configures a Stream. The zero value streams rollouts of Config.Steps steps
// through 2 slots and never drops one.
type StreamConfig struct {
	// Slots is the number of rollout buffers in the ring, each a whole Rollout of Steps
	// steps of every env, allocated when the stream starts: at most Slots rollouts exist
	// at once, filling, filled or held by the caller. Default 2; at least 2.
	Slots int
	// Steps is the steps per env of each rollout, 1 to Config.Steps. Default Config.Steps.
	Steps int
	// MaxPolicyLag, when > 0, drops a filled rollout at hand-out when the oldest version in
	// its rows is more than MaxPolicyLag versions behind the newest published one (see
	// Stream.Next). Default 0: never drop.
	MaxPolicyLag int64
}

func (c StreamConfig) withDefaults(maxSteps int) (StreamConfig, error) {
	if c.Slots == 0 {
		c.Slots = 2
	}
	if c.Steps == 0 {
		c.Steps = maxSteps
	}
	switch {
	case c.Slots < 2:
		return c, fmt.Errorf("%w: StreamConfig.Slots = %d, want >= 2 (one filling while the caller holds another)", ErrConfig, c.Slots)
	case c.Steps < 1 || c.Steps > maxSteps:
		return c, fmt.Errorf("%w: StreamConfig.Steps = %d, Config.Steps allows 1 to %d", ErrConfig, c.Steps, maxSteps)
	case c.MaxPolicyLag < 0:
		return c, fmt.Errorf("%w: StreamConfig.MaxPolicyLag = %d, want >= 0 (0 never drops)", ErrConfig, c.MaxPolicyLag)
	}
	return c, nil
}

// StreamStats describes a stream since it started.
type StreamStats struct {
	Slots, Workers int
	Filled         int64 // rollouts the workers completed
	HandedOut      int64 // rollouts Next returned
	Dropped        int64 // filled rollouts Next dropped for their policy lag (MaxPolicyLag)
	Ready          int   // now: filled rollouts waiting for Next
	Held           int   // now: rollouts handed out and not yet released
	// Blocked is the time workers waited for a free slot, summed over workers; a wait in
	// progress counts up to now. A worker waits when every slot is filled or held by the
	// caller (backpressure) or still being filled by slower workers (a worker a whole ring
	// ahead of another); more Slots shorten the second kind.
	Blocked time.Duration
	Elapsed time.Duration // since the stream started, until Close
	// MeanLag and MaxLag are the policy lag of the rollouts handed out, in versions: the
	// newest published version at hand-out less the oldest version in the rollout's rows
	// (0 where versions were published out of order).
	MeanLag float64
	MaxLag  int64
}

// IdleFraction is the share of the workers' time spent blocked on backpressure:
// Blocked / (Workers · Elapsed).
func (s StreamStats) IdleFraction() float64 {
	if s.Workers == 0 || s.Elapsed <= 0 {
		return 0
	}
	return s.Blocked.Seconds() / (float64(s.Workers) * s.Elapsed.Seconds())
}

// Stream collects rollouts continuously into a ring of preallocated buffers (slots) that it
// hands to the caller by ownership. See Batcher.Stream. Next, Release, Stats and Close may be
// called from any goroutine; Next calls are served one at a time.
type Stream struct {
	b       *Batcher
	cfg     StreamConfig
	start   time.Time
	cancel  context.CancelFunc // stops the workers' stream requests
	slots   []streamSlot
	assign  []chan int    // per worker: the slots to fill, in rollout order; capacity Slots
	ready   chan struct{} // capacity 1: a worker finished a slot or stopped; Next looks again
	nextSem chan struct{} // capacity 1: held by the Next being served
	stopped chan struct{} // closed by Close
	blocked []workerWait  // per worker, written by the worker's goroutine

	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex // guards the fields below and the slots' bookkeeping
	closed    bool
	closedAt  time.Time
	err       error // why the workers stopped, other than Close
	queue     []int // slots assigned to rollouts not yet handed out, oldest first (capacity Slots)
	filled    int64
	handedOut int64
	dropped   int64
	lagSum    int64
	lagMax    int64
}

// streamSlot is one buffer of the ring and its bookkeeping (guarded by Stream.mu).
type streamSlot struct {
	r         *Rollout
	episodes  [][]Episode // per worker, written by that worker while it fills the slot
	remaining int         // workers yet to finish the rollout in the slot
	oldest    int64       // the oldest version in the rows the finished workers wrote
	held      bool        // handed out by Next, not yet released
}

// workerWait is one worker's backpressure.
type workerWait struct {
	mu    sync.Mutex    // guards total, since and seen
	total time.Duration // the waits finished
	since time.Time     // the start of the wait in progress; zero for none
	seen  time.Duration // the most read has returned
}

// begin and end bracket a wait, on the worker's goroutine.
func (w *workerWait) begin(t time.Time) {
	w.mu.Lock()
	w.since = t
	w.mu.Unlock()
}

func (w *workerWait) end(t time.Time) {
	w.mu.Lock()
	w.total += t.Sub(w.since)
	w.since = time.Time{}
	w.mu.Unlock()
}

// read returns the waits up to now, the one in progress included, and never less than it
// returned before: a wait's end is timed on the worker before it takes the lock, so a read
// between the two, with a later now, counts the wait as longer than it will be recorded, and
// a counter that went back would give a negative idle time (engine's batcher_idle, -0.07
// once under load).
func (w *workerWait) read(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.total
	if !w.since.IsZero() {
		v += max(0, now.Sub(w.since))
	}
	w.seen = max(w.seen, v)
	return w.seen
}

// Stream switches the workers to continuous collection: they fill StreamConfig.Slots rollout
// buffers, allocated now, one rollout of StreamConfig.Steps steps after another, each worker
// moving on to the next free slot as soon as it finished its rows of the previous one, and
// block when every slot is filled or held (backpressure, counted in StreamStats.Blocked). Next
// hands the filled rollouts out in the order they were collected; Release gives a buffer
// back. Consecutive rollouts continue each other exactly as consecutive Collects of Steps
// would (envs, episode bookkeeping, recurrent states and sampling streams carry over), and
// Publish and UpdatePolicy reach the workers between two steps as they do during Collect.
// Steady-state streaming allocates nothing and copies no rollout data.
//
// ctx bounds the stream: when it ends, the workers stop after their current step and Next
// returns an error wrapping ctx's. Close returns the workers to Collect mode; until then
// Collect, Snapshot, Restore and another Stream are refused with ErrStreaming.
func (b *Batcher) Stream(ctx context.Context, cfg StreamConfig) (*Stream, error) {
	cfg, err := cfg.withDefaults(b.cfg.Steps)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.stream != nil {
		return nil, fmt.Errorf("%w: Stream refused; close the running one (Stream.Close) first", ErrStreaming)
	}
	if err := b.checkStreamMemory(cfg, AvailableMemory()); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Stream{b: b, cfg: cfg, start: time.Now(), slots: make([]streamSlot, cfg.Slots),
		assign: make([]chan int, len(b.workers)), ready: make(chan struct{}, 1), nextSem: make(chan struct{}, 1),
		stopped: make(chan struct{}), blocked: make([]workerWait, len(b.workers)), queue: make([]int, 0, cfg.Slots)}
	for i := range s.slots {
		s.slots[i].r = b.rollout.like(cfg.Steps)
		s.slots[i].episodes = make([][]Episode, len(b.workers))
		for w := range s.slots[i].episodes {
			s.slots[i].episodes[w] = make([]Episode, 0, b.cfg.EnvsPerWorker)
		}
	}
	for w := range s.assign {
		s.assign[w] = make(chan int, cfg.Slots)
	}
	s.mu.Lock()
	for i := range s.slots {
		s.assignLocked(i)
	}
	s.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	for _, w := range b.workers { // idle: Collect holds mu while they work
		w.reqs <- request{ctx: sctx, steps: cfg.Steps, stream: s}
	}
	b.stream = s
	return s, nil
}

// checkStreamMemory checks that cfg.Slots rollouts of cfg.Steps fit in mem.
func (b *Batcher) checkStreamMemory(cfg StreamConfig, mem Memory) error {
	r := b.rollout
	perRow := uint64(8*r.ObsDim + 8*r.ActDim + 36) // Obs, FinalObs, Actions, EnvActions, seven 4-byte columns, Version
	for k := range r.States {
		perRow += 4 * uint64(len(r.States[k])/(b.cfg.Steps*r.N))
	}
	need := mulSat(mulSat(uint64(cfg.Slots), uint64(cfg.Steps)), mulSat(uint64(r.N), perRow))
	if need > mem.Available {
		return fmt.Errorf("%w: a stream of %s × %s × %s needs about %s, and %s is available (%s); use fewer StreamConfig.Slots or Steps",
			ErrMemory, plural(cfg.Slots, "slot"), plural(cfg.Steps, "step"), plural(r.N, "env"), formatBytes(need), formatBytes(mem.Available), mem.Source)
	}
	return nil
}

// like returns a new Rollout of steps steps shaped as r, with its recurrent states.
func (r *Rollout) like(steps int) *Rollout {
	out := newRollout(steps, r.N, r.ObsShape, r.ActDim, r.Discrete)
	out.StateNames, out.StateShapes = r.StateNames, r.StateShapes
	out.allocStates()
	if r.QPos != nil {
		out.allocPhysics(r.NQ, r.NV)
	}
	return out
}

// assignLocked makes slot the buffer of the next rollout and hands it to every worker. The
// sends never block: a worker's channel holds only slots in the queue, at most Slots.
func (s *Stream) assignLocked(slot int) {
	st := &s.slots[slot]
	st.remaining, st.oldest, st.held = len(s.assign), math.MaxInt64, false
	s.queue = append(s.queue, slot)
	for _, ch := range s.assign {
		ch <- slot
	}
}

// notify wakes a Next waiting for a change.
func (s *Stream) notify() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Next returns the oldest filled rollout and its slot, waiting for one. The rollout belongs
// to the caller, and nothing writes it, until Release(slot) hands its buffer back; its T is
// StreamConfig.Steps and its Episodes are those that ended in it.
//
// With MaxPolicyLag > 0, a filled rollout is dropped instead (its buffer goes straight back
// to the workers and StreamStats.Dropped counts it) when, at hand-out, V − v > MaxPolicyLag,
// where V is the version of the latest policy published (New's, Publish's or UpdatePolicy's;
// the workers may not have installed it yet) and v the smallest Version of the rollout's
// rows; Next then waits for the next one. (Publishing more than MaxPolicyLag versions
// during every rollout drops them all.)
//
// Next returns ctx's error when ctx ends first, ErrStreamClosed after Close, and the error
// that stopped the workers (a worker's failure, or the end of Stream's context) after that.
func (s *Stream) Next(ctx context.Context) (slot int, r *Rollout, err error) {
	select {
	case s.nextSem <- struct{}{}:
	case <-ctx.Done():
		return -1, nil, ctx.Err()
	case <-s.stopped:
		return -1, nil, ErrStreamClosed
	}
	defer func() { <-s.nextSem }()
	for {
		if slot, r, err := s.take(); slot >= 0 || err != nil {
			return slot, r, err
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return -1, nil, ctx.Err()
		case <-s.stopped:
			return -1, nil, ErrStreamClosed
		}
	}
}

// take hands out the oldest rollout if it is filled, dropping those that lag too far; -1
// when none is filled.
func (s *Stream) take() (int, *Rollout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case s.closed:
			return -1, nil, ErrStreamClosed
		case s.err != nil:
			return -1, nil, s.err
		case len(s.queue) == 0 || s.slots[s.queue[0]].remaining > 0:
			return -1, nil, nil
		}
		slot := s.queue[0]
		s.queue = s.queue[:copy(s.queue, s.queue[1:])]
		st := &s.slots[slot]
		lag := max(0, s.b.newest.Load()-st.oldest)
		if s.cfg.MaxPolicyLag > 0 && lag > s.cfg.MaxPolicyLag {
			s.dropped++
			s.assignLocked(slot)
			continue
		}
		st.held = true
		s.handedOut++
		s.lagSum += lag
		s.lagMax = max(s.lagMax, lag)
		r := st.r
		r.Episodes = s.b.rolloutEpisodes(r.Episodes[:0], r, func(k int) []Episode { return st.episodes[k] })
		return slot, r, nil
	}
}

// Release hands the buffer of slot, from Next, back to the workers, which fill it with a
// later rollout: the caller must not use the Rollout any more. A slot the caller does not
// hold is an error wrapping ErrSlot. After Close a release only ends the caller's hold.
func (s *Stream) Release(slot int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case slot < 0 || slot >= len(s.slots):
		return fmt.Errorf("%w: Release(%d), and the stream's slots are 0 to %d", ErrSlot, slot, len(s.slots)-1)
	case !s.slots[slot].held:
		return fmt.Errorf("%w: Release(%d) of a slot not held (released already, or not returned by Next)", ErrSlot, slot)
	}
	s.slots[slot].held = false
	if !s.closed {
		s.assignLocked(slot)
	}
	return nil
}

// Stats reports the stream's counters.
func (s *Stream) Stats() StreamStats {
	now := time.Now()
	st := StreamStats{Slots: len(s.slots), Workers: len(s.blocked)}
	for i := range s.blocked {
		st.Blocked += s.blocked[i].read(now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Filled, st.HandedOut, st.Dropped, st.MaxLag = s.filled, s.handedOut, s.dropped, s.lagMax
	if s.handedOut > 0 {
		st.MeanLag = float64(s.lagSum) / float64(s.handedOut)
	}
	for _, slot := range s.queue {
		if s.slots[slot].remaining == 0 {
			st.Ready++
		}
	}
	for i := range s.slots {
		if s.slots[i].held {
			st.Held++
		}
	}
	st.Elapsed = now.Sub(s.start)
	if s.closed {
		st.Elapsed = s.closedAt.Sub(s.start)
	}
	return st
}

// Close stops the workers after their current step (a rollout they had not finished is
// lost), waits for them and returns them to Collect mode, which continues from where the
// envs are. Rollouts still held stay valid: nothing writes them again. It returns the errors
// that stopped workers, and is idempotent.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed, s.closedAt = true, time.Now()
		s.mu.Unlock()
		close(s.stopped)
		s.cancel()
		var errs []error
		for _, w := range s.b.workers {
			errs = append(errs, <-w.done) // a worker's error names it
		}
		s.closeErr = errors.Join(errs...)
		s.b.mu.Lock()
		s.b.stream = nil
		s.b.timings.Wall += s.closedAt.Sub(s.start)
		s.b.mu.Unlock()
	})
	return s.closeErr
}

// stop records why the workers stopped, when Close did not stop them, and wakes Next.
func (s *Stream) stop(err error) {
	s.mu.Lock()
	if !s.closed && s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancel() // the other workers stop too
	s.notify()
}

// stream fills the slots s assigns the worker, one rollout of steps after another, until ctx
// ends (nil) or a rollout fails (its error, also recorded in s).
func (w *worker) stream(ctx context.Context, s *Stream, steps int) error {
	ch, wait := s.assign[w.index], &s.blocked[w.index]
	for {
		var slot int
		select {
		case slot = <-ch:
		default: // backpressure: every slot is filled or held
			wait.begin(time.Now())
			var stopped bool
			select {
			case slot = <-ch:
			case <-ctx.Done():
				stopped = true
			}
			wait.end(time.Now())
			if stopped {
				s.stop(fmt.Errorf("batcher: stream stopped: %w", ctx.Err()))
				return nil
			}
		}
		st := &s.slots[slot]
		err := w.rollout(ctx, st.r, steps, &st.episodes[w.index], nil)
		w.shareTimings()
		if err != nil {
			if ctx.Err() != nil {
				s.stop(fmt.Errorf("batcher: stream stopped: %w", ctx.Err()))
				return nil
			}
			err = fmt.Errorf("batcher: worker %d: %w", w.index, err)
			s.stop(err)
			return err
		}
		s.mu.Lock()
		st.oldest = min(st.oldest, w.oldest)
		if st.remaining--; st.remaining == 0 {
			s.filled++
		}
		s.mu.Unlock()
		s.notify()
	}
}

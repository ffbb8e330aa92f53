// Package spin hands events between goroutines that each run on their own CPU: a waiter polls
// for a short while before it parks, because waking a parked thread costs tens of µs on a VM
// (docs/benchmarks.md), more than many steps of work it waits for. Towers (learner) and env shards (envs) use it.
//
// Spinning is decided per use by a Mode: Auto (the zero value) spins only when every waiting
// goroutine can have its own P and CPU (Allowed), Off never spins, for machines shared with
// other work or to measure without it. The Mode is passed in (WithMode, Mode.Spins); the
// package reads no environment and holds no setting.
//
// A Signal has any number of waiters and posters. A Barrier holds a fixed number of goroutines
// until all have arrived, round after round. A Pool's goroutines belong to it: Close stops
// them and waits for them; Run and Close are called from one goroutine at a time.
package spin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// For is how long a waiter spins before it parks: far longer than the gaps between the steps
// of a busy loop (a learner's serial update part, a batcher's inference call), so busy
// goroutines never park, and idle ones park after For.
const For = 500 * time.Microsecond

// Mode says whether goroutines waiting for each other may spin before they park.
type Mode int

const (
	// Auto spins when Allowed: each waiting goroutine can have its own P and CPU. The default.
	Auto Mode = iota
	// Off never spins: a waiter parks at once. Every hand-off then pays a thread wake-up
	// (tens of µs on a VM), and no CPU burns while goroutines wait.
	Off
)

// ErrMode is returned by ParseMode and UnmarshalText for a name that is not a Mode.
var ErrMode = errors.New("spin: unknown mode")

// Spins reports whether n goroutines waiting for each other spin under m.
func (m Mode) Spins(n int) bool { return m == Auto && Allowed(n) }

// ModeFor is the Mode of a NoSpin setting (learner's TowersConfig, envs' Config): Off when
// noSpin, else Auto.
func ModeFor(noSpin bool) Mode {
	if noSpin {
		return Off
	}
	return Auto
}

// String is the mode's name: "auto" or "off".
func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Off:
		return "off"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode is the Mode named s: "auto" (or "") or "off".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "auto":
		return Auto, nil
	case "off":
		return Off, nil
	}
	return Auto, fmt.Errorf("%w %q: use \"auto\" or \"off\"", ErrMode, s)
}

// MarshalText is the mode's name, so a Mode can be a field of a JSON configuration.
func (m Mode) MarshalText() ([]byte, error) {
	if m != Auto && m != Off {
		return nil, fmt.Errorf("%w %d", ErrMode, int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText sets m to the mode named by text (see ParseMode).
func (m *Mode) UnmarshalText(text []byte) error {
	v, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Allowed reports whether n goroutines may spin while they wait for each other: only when each
// can have its own P and its own CPU (spinning on a shared one would starve the goroutine being
// waited for).
func Allowed(n int) bool { return runtime.GOMAXPROCS(0) >= n && runtime.NumCPU() >= n }

// Signal counts events that goroutines wait for. Post publishes everything written before it
// to the goroutines whose Wait it satisfies. Any number of goroutines may wait at once. Waits
// allocate nothing, but for a parked one with a context that can end.
type Signal struct {
	n      atomic.Uint64
	parked atomic.Int32 // waiters blocked (or about to block) on cond
	mu     sync.Mutex   // the lock of cond
	cond   sync.Cond    // broadcast by a Post that finds a waiter parked, or by a context's end
}

// New makes a Signal with no events.
func New() *Signal {
	s := &Signal{}
	s.cond.L = &s.mu
	return s
}

// Post counts one event and wakes the waiters that have parked.
func (s *Signal) Post() {
	s.n.Add(1)
	if s.parked.Load() > 0 {
		s.wake()
	}
}

func (s *Signal) wake() {
	s.mu.Lock()
	s.cond.Broadcast()
	s.mu.Unlock()
}

// Load is the number of events posted so far.
func (s *Signal) Load() uint64 { return s.n.Load() }

// Wait returns nil once want events have been posted, or ctx's error if it ends first. With
// spin it first polls for up to For, yielding its P now and then.
func (s *Signal) Wait(ctx context.Context, want uint64, spin bool) error {
	if s.n.Load() >= want || spin && Until(func() bool { return s.n.Load() >= want }) {
		return nil
	}
	// parked is raised before the count is read again under the lock, and Post adds before it
	// reads parked: either that read sees the event, or the Post's broadcast, which takes the
	// lock, comes after this waiter has joined cond.
	s.parked.Add(1)
	defer s.parked.Add(-1)
	if ctx.Done() != nil {
		defer context.AfterFunc(ctx, s.wake)()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.n.Load() < want {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
}

// Barrier holds n goroutines until all n have called Wait, round after round: a cyclic
// barrier. Waiters spin before they park when the barrier's Mode spins for n goroutines.
type Barrier struct {
	n       uint64
	spin    bool
	arrived atomic.Uint64 // calls of Wait so far
	rounds  *Signal       // rounds completed
}

// NewBarrier makes a barrier for n ≥ 1 goroutines.
func NewBarrier(n int, m Mode) *Barrier {
	return &Barrier{n: uint64(max(n, 1)), spin: m.Spins(n), rounds: New()}
}

// Wait returns once all n goroutines have called Wait in this round. The last to arrive calls
// last (when not nil) before any of them returns, and Wait reports whether the caller was it.
// Everything written before a goroutine's Wait is visible to all of them after it.
func (b *Barrier) Wait(last func()) bool {
	a := b.arrived.Add(1)
	if a%b.n == 0 {
		if last != nil {
			last()
		}
		b.rounds.Post()
		return true
	}
	// No context: every goroutine of a round arrives, so the wait is bounded by the slowest.
	_ = b.rounds.Wait(context.Background(), (a+b.n-1)/b.n, b.spin)
	return false
}

// Until polls done for up to For, yielding its P now and then, and reports whether done became
// true.
func Until(done func() bool) bool {
	deadline := time.Now().Add(For)
	for i := 1; ; i++ {
		if done() {
			return true
		}
		if i%64 == 0 {
			if time.Now().After(deadline) {
				return false
			}
			runtime.Gosched()
		}
	}
}

// Pool runs one function on k shards at once: shard 0 on the goroutine calling Run, shards
// 1..k-1 each on a goroutine of its own, which waits for the next Run spinning (when the
// pool's Mode spins for k goroutines) and then parked. Learner towers and env shards use it,
// one Pool per set.
type Pool struct {
	k         int
	work      func(shard int)
	spin      bool      // waits spin first: Mode.Spins(k)
	jobs, fin []*Signal // per shard ≥ 1: a Run (or, with stop set, the end) is posted; it is done
	runs      uint64    // Runs so far; Run's goroutine only
	stop      atomic.Bool
	wg        sync.WaitGroup
	closed    bool // Close was called; Run's and Close's goroutine only
}

// Option configures a Pool.
type Option func(*Pool)

// WithMode sets whether the pool's waits spin; the default is Auto.
func WithMode(m Mode) Option { return func(p *Pool) { p.spin = m.Spins(p.k) } }

// NewPool starts the goroutines of shards 1..k-1 (k ≥ 1) running work.
func NewPool(k int, work func(shard int), opts ...Option) *Pool {
	p := &Pool{k: k, work: work, spin: Auto.Spins(k), jobs: make([]*Signal, k), fin: make([]*Signal, k)}
	for _, o := range opts {
		o(p)
	}
	for s := 1; s < k; s++ {
		p.jobs[s], p.fin[s] = New(), New()
		p.wg.Add(1)
		go p.run(s)
	}
	return p
}

func (p *Pool) run(s int) {
	defer p.wg.Done()
	for n := uint64(1); ; n++ {
		_ = p.jobs[s].Wait(context.Background(), n, p.spin)
		if p.stop.Load() {
			return
		}
		p.work(s)
		p.fin[s].Post()
	}
}

// Run calls work(s) for every shard s in parallel and returns when all have returned.
// Everything written before Run is visible to work, and everything work writes is visible
// after Run. Not concurrent with itself or Close; it panics after Close (its goroutines are
// gone, so it would wait forever).
func (p *Pool) Run() {
	if p.closed {
		panic("spin: Run on a closed Pool")
	}
	p.runs++
	for s := 1; s < p.k; s++ {
		p.jobs[s].Post()
	}
	p.work(0)
	for s := 1; s < p.k; s++ {
		_ = p.fin[s].Wait(context.Background(), p.runs, p.spin)
	}
}

// Close stops the goroutines and waits for them. Idempotent; not concurrent with Run. Its
// error is always nil: a pool's goroutines have nothing that can fail (work's failures are
// work's to report); it returns one so that a Pool is an io.Closer like its owners.
func (p *Pool) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.stop.Store(true)
	for s := 1; s < p.k; s++ {
		p.jobs[s].Post()
	}
	p.wg.Wait()
	return nil
}

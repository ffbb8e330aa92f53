package learner

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// spinFor is how long a tower waiting for its next job, or for the others to finish theirs,
// spins before it parks. Waking a parked thread takes tens of µs on a VM (60 µs measured on the
// 2-core machine this project is benchmarked on), which is a quarter of a CartPole tower's
// step; an update's serial part (clipping, the optimiser step) is far shorter than spinFor, so
// towers kept busy never park, and idle ones park after spinFor.
const spinFor = 500 * time.Microsecond

// canSpin reports whether n goroutines may spin while they wait for each other: only when each
// can have its own P and its own CPU (spinning on a shared one would starve the goroutine being
// waited for).
func canSpin(n int) bool { return runtime.GOMAXPROCS(0) >= n && runtime.NumCPU() >= n }

// signal counts events that one goroutine waits for. post publishes everything written
// before it to the goroutine whose wait it satisfies.
type signal struct {
	n      atomic.Uint64
	parked atomic.Bool   // the waiter is (about to be) blocked on wake
	wake   chan struct{} // capacity 1: a token for a parked waiter
}

func newSignal() *signal { return &signal{wake: make(chan struct{}, 1)} }

// post counts one event and wakes the waiter if it has parked.
func (s *signal) post() {
	s.n.Add(1)
	if s.parked.Load() {
		select {
		case s.wake <- struct{}{}:
		default: // a token is already there
		}
	}
}

// wait returns nil once want events have been posted, or ctx's error if it ends first. With
// spin it first polls for up to spinFor, yielding its P now and then.
func (s *signal) wait(ctx context.Context, want uint64, spin bool) error {
	if spin {
		deadline := time.Now().Add(spinFor)
		for i := 1; ; i++ {
			if s.n.Load() >= want {
				return nil
			}
			if i%64 == 0 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
	}
	for {
		// parked is set before the count is read again and post adds before it reads parked,
		// so either this read sees the event or post sees parked and leaves a token.
		s.parked.Store(true)
		if s.n.Load() >= want {
			s.parked.Store(false)
			return nil
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			s.parked.Store(false)
			return ctx.Err()
		}
		s.parked.Store(false)
		if s.n.Load() >= want {
			return nil
		}
	}
}

package learner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/towerrl/towerrl/internal/spin"
)

// Collective averages flat float32 buffers across the members of a group: the towers of one
// process, or (later) the processes of a DD-PPO run. Tower code sees only this interface.
type Collective interface {
	// AllReduce replaces buf with the element-wise mean of every member's buf. Each member
	// calls it once per round with its own index and a buffer of the same length; it returns
	// when the round is complete. The sum is taken in member order, so results are
	// deterministic.
	AllReduce(ctx context.Context, member int, buf []float32) error
	// Members is the size of the group.
	Members() int
}

// Local is the in-process Collective: the last member to arrive averages every member's buffer
// in member order and writes the mean into all of them. Members that arrive earlier spin
// briefly before they park (see spin.For), so towers finishing within microseconds of each
// other pay no thread wake-up. Safe for concurrent use by its members.
type Local struct {
	n     int
	mu    sync.Mutex // guards bufs, count, round, err
	bufs  [][]float32
	count int
	round chan struct{} // closed when the current round completes
	err   error
	done  atomic.Uint64 // rounds completed; advanced under mu
}

// NewLocal makes an in-process group of n members.
func NewLocal(n int) *Local {
	return &Local{n: n, bufs: make([][]float32, n), round: make(chan struct{})}
}

// Members is the size of the group.
func (l *Local) Members() int { return l.n }

// AllReduce implements Collective.
func (l *Local) AllReduce(ctx context.Context, member int, buf []float32) error {
	if member < 0 || member >= l.n {
		return fmt.Errorf("%w: member %d of a group of %d", ErrConfig, member, l.n)
	}
	l.mu.Lock()
	if l.bufs[member] != nil {
		l.mu.Unlock()
		return fmt.Errorf("%w: member %d called AllReduce twice in one round", ErrConfig, member)
	}
	l.bufs[member] = buf
	l.count++
	round := l.round
	if l.count < l.n {
		next := l.done.Load() + 1
		l.mu.Unlock()
		if !spin.Allowed(l.n) || !spin.Until(func() bool { return l.done.Load() >= next }) {
			select {
			case <-round:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		return err
	}
	// Last to arrive: reduce in member order.
	err := reduceMean(l.bufs)
	l.err = err
	clear(l.bufs)
	l.count = 0
	l.round = make(chan struct{})
	l.done.Add(1)
	l.mu.Unlock()
	close(round)
	return err
}

func reduceMean(bufs [][]float32) error {
	n := len(bufs[0])
	for i, b := range bufs {
		if len(b) != n {
			return fmt.Errorf("%w: member %d reduced %d values, member 0 %d", ErrConfig, i, len(b), n)
		}
	}
	acc := bufs[0]
	if len(bufs) == 2 {
		// One pass instead of three (the same operations, so the same bits).
		b := bufs[1][:len(acc)]
		for j, x := range b {
			m := (acc[j] + x) * 0.5
			acc[j], b[j] = m, m
		}
		return nil
	}
	for _, b := range bufs[1:] {
		for j, x := range b {
			acc[j] += x
		}
	}
	inv := 1 / float32(len(bufs))
	for j := range acc {
		acc[j] *= inv
	}
	for _, b := range bufs[1:] {
		copy(b, acc)
	}
	return nil
}

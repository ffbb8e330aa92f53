package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/towerrl/towerrl/internal/spin"
	"github.com/towerrl/towerrl/learner"
)

// crossReducer is the cross-process step of a Collective: World in production, an in-process
// stand-in of several ranks in tests.
type crossReducer interface {
	AllReduceWeighted(ctx context.Context, buf []float32, weight float64) error
}

// Collective is the two-level learner.Collective of a DD-PPO rank: its towers average their
// buffers locally (a learner.Local), then the last tower to arrive runs one weighted all-reduce
// across the ranks (World.AllReduceWeighted) with this rank's weight and writes the result
// into every tower's buffer. With each rank's weight set to its sample count, the result is the
// mean over every sample of every rank, however unequal the ranks' batches.
//
// Members is the number of towers of this rank. Safe for concurrent use by its members; every
// rank's towers must call AllReduce the same number of times with buffers of one length.
type Collective struct {
	cross  crossReducer
	local  *learner.Local // nil with one tower
	n      int
	weight atomic.Uint64 // math.Float64bits of the rank's weight
	rounds atomic.Uint64 // cross-process steps taken
	crossT atomic.Int64  // ns spent in them

	mu     sync.Mutex // guards bufs, count, round, err, broken; held through the cross-process step
	bufs   [][]float32
	count  int
	round  chan struct{} // closed when the current round completes
	err    error         // the current round's
	broken error         // set when a round stalls or a member leaves one: every later call fails
	done   atomic.Uint64 // rounds completed; advanced under mu
}

var _ learner.Collective = (*Collective)(nil)

// NewCollective makes the Collective of a rank with the given number of towers, over group
// (a *World, or one of InProcess's ranks). Its weight starts at 1 (every rank counts the
// same) until SetWeight.
func NewCollective(group Group, towers int) (*Collective, error) {
	if w, ok := group.(*World); group == nil || ok && w == nil {
		return nil, fmt.Errorf("%w: NewCollective needs a World (from Init) or a Group", ErrArgument)
	}
	return newCollective(group, towers)
}

// AllReduceSum replaces buf with the element-wise sum of every rank's buf (statistics such as
// advantage counts and sums: learner.Towers standardise a DD-PPO minibatch's advantages over
// every rank's rows with it). A rank whose weight is 0 has no rows in the round (straggler
// preemption left it fewer minibatches than the others; it still takes part in every call):
// it adds zeros, so its placeholder rows take no part in the statistics. Called by one
// goroutine of the rank, between updates.
func (c *Collective) AllReduceSum(ctx context.Context, buf []float64) error {
	g, ok := c.cross.(interface {
		AllReduceFloat64(ctx context.Context, op Op, buf []float64) error
	})
	if !ok {
		return fmt.Errorf("%w: this collective's ranks cannot sum float64 statistics", ErrArgument)
	}
	if c.Weight() == 0 {
		clear(buf)
	}
	return g.AllReduceFloat64(ctx, Sum, buf)
}

func newCollective(cross crossReducer, towers int) (*Collective, error) {
	if towers < 1 {
		return nil, fmt.Errorf("%w: %d towers: a rank needs at least one", ErrArgument, towers)
	}
	c := &Collective{cross: cross, n: towers, bufs: make([][]float32, towers), round: make(chan struct{})}
	if towers > 1 {
		c.local = learner.NewLocal(towers)
	}
	c.weight.Store(math.Float64bits(1))
	return c, nil
}

// SetWeight sets this rank's weight for the rounds that start after it: its sample count for
// the iteration (after straggler preemption, the rows it actually collected). Call it between
// rounds, from any goroutine.
func (c *Collective) SetWeight(w float64) error {
	if !validWeight(w) {
		return fmt.Errorf("%w: weight %v: a rank's weight is its sample count, finite and not negative",
			ErrArgument, w)
	}
	c.weight.Store(math.Float64bits(w))
	return nil
}

// Weight is the weight the next round will use.
func (c *Collective) Weight() float64 { return math.Float64frombits(c.weight.Load()) }

// Members is the number of towers of this rank.
func (c *Collective) Members() int { return c.n }

// AllReduce implements learner.Collective: buf becomes the weighted mean, over the ranks, of
// each rank's mean over its towers.
func (c *Collective) AllReduce(ctx context.Context, member int, buf []float32) error {
	if member < 0 || member >= c.n {
		return fmt.Errorf("%w: member %d of a rank with %d towers", ErrArgument, member, c.n)
	}
	if c.local == nil { // the World itself refuses calls after a failure
		return c.crossStep(ctx, buf)
	}
	c.mu.Lock()
	broken := c.broken
	c.mu.Unlock()
	if broken != nil {
		return broken
	}
	if err := c.local.AllReduce(ctx, member, buf); err != nil {
		return fmt.Errorf("local all-reduce of tower %d: %w", member, err)
	}
	// Every tower now holds the same local mean; the last to arrive sends it across.
	c.mu.Lock()
	if c.broken != nil {
		c.mu.Unlock()
		return c.broken
	}
	if c.bufs[member] != nil {
		c.mu.Unlock()
		return fmt.Errorf("%w: member %d called AllReduce twice in one round", ErrArgument, member)
	}
	c.bufs[member] = buf
	c.count++
	if c.count < c.n {
		round := c.round
		next := c.done.Load() + 1
		c.mu.Unlock()
		return c.wait(ctx, member, round, next)
	}
	err := c.crossStep(ctx, buf)
	for i, b := range c.bufs {
		if i != member && b != nil && err == nil {
			copy(b, buf)
		}
	}
	c.err = err
	if err != nil && !errors.Is(err, ErrArgument) { // a refused weight leaves the ranks in step
		c.broken = fmt.Errorf("%w: an earlier cross-process all-reduce failed: %w", ErrBroken, err)
	}
	clear(c.bufs)
	c.count = 0
	round := c.round
	c.round = make(chan struct{})
	c.done.Add(1)
	c.mu.Unlock()
	close(round)
	return err
}

// crossStep is the timed cross-process all-reduce of a round.
func (c *Collective) crossStep(ctx context.Context, buf []float32) error {
	t := time.Now()
	err := c.cross.AllReduceWeighted(ctx, buf, c.Weight())
	c.crossT.Add(int64(time.Since(t)))
	c.rounds.Add(1)
	return err
}

// Timing is the number of cross-process all-reduces this rank has run and the time spent in
// them, waiting for the other ranks included: per update, the figure DD-PPO's metrics report.
// Safe to call at any time.
func (c *Collective) Timing() (rounds uint64, cross time.Duration) {
	return c.rounds.Load(), time.Duration(c.crossT.Load())
}

// wait is a member's wait for the round's last member to finish the cross-process step.
func (c *Collective) wait(ctx context.Context, member int, round chan struct{}, next uint64) error {
	if !spin.Allowed(c.n) || !spin.Until(func() bool { return c.done.Load() >= next }) {
		select {
		case <-round:
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.done.Load() >= next { // finished meanwhile: the result is in buf
				return c.err
			}
			c.bufs[member] = nil // the last member must not write into buf after we return
			err := fmt.Errorf("tower %d waiting for the cross-process all-reduce: %w", member, ctx.Err())
			c.broken = fmt.Errorf("%w: %w", ErrBroken, err)
			return err
		}
	}
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	return err
}

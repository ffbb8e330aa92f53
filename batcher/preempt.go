package batcher

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Preempt lets a rollout end early: DD-PPO's straggler preemption, where a process that is
// still collecting when most of the others have finished stops where it is instead of making
// them wait. The zero value never stops early.
type Preempt struct {
	// MinSteps is the fewest steps a rollout ends with (DD-PPO keeps at least a quarter of
	// it). Values below 1 mean 1.
	MinSteps int
	// Stop is asked, by each worker before each of its steps once the worker has taken
	// MinSteps, whether to stop. Once it returns true, every worker ends the rollout at the
	// same step: the furthest any of them had begun, and no earlier than MinSteps. It may be
	// called by several workers at once. Nil: never.
	Stop func() bool
	// Slowdown is a test hook that makes this batcher a straggler on purpose: after each step,
	// a worker waits (Slowdown−1) times as long as the step took, so its steps take Slowdown
	// times as long. Values of 1 or less: no wait.
	Slowdown float64
}

// CollectPreemptible is Collect of at most steps steps that ends early when p.Stop says so:
// the rollout then holds T < steps steps of every env (T ≥ p.MinSteps), time-major as
// always, with LastObs and LastValues the observations after step T and their values, to
// bootstrap from as from the end of any rollout (the cut ends no episode). Without a stop it
// is Collect. It allocates nothing.
func (b *Batcher) CollectPreemptible(ctx context.Context, steps int, p Preempt) (*Rollout, error) {
	if p.Stop == nil && p.Slowdown <= 1 {
		return b.Collect(ctx, steps)
	}
	return b.collect(ctx, steps, &p)
}

// cutter is a rollout's shared end: the step every worker stops at, lowered once when Stop
// fires. A worker claims each step before taking it, so the end is set past every step
// already begun and every worker takes exactly as many steps.
type cutter struct {
	min      int
	stop     func() bool
	slowdown float64
	fired    atomic.Bool // Stop returned true; read without the lock before asking it again

	mu    sync.Mutex // guards end and begun
	end   int        // steps every worker takes
	begun []int      // per worker: steps begun
}

// reset prepares c for a rollout of steps steps under p.
func (c *cutter) reset(steps, workers int, p *Preempt) {
	if cap(c.begun) < workers {
		c.begun = make([]int, workers)
	}
	c.begun = c.begun[:workers]
	clear(c.begun)
	c.min = min(max(p.MinSteps, 1), steps)
	c.stop, c.slowdown, c.end = p.Stop, p.Slowdown, steps
	c.fired.Store(false)
}

// take reports whether worker w may take step t (counting from 0), and claims it.
func (c *cutter) take(w, t int) bool {
	if c.stop != nil && t >= c.min && !c.fired.Load() && c.stop() {
		c.mu.Lock()
		if !c.fired.Load() {
			c.fired.Store(true)
			c.end = c.min
			for _, b := range c.begun {
				c.end = max(c.end, b)
			}
		}
		c.mu.Unlock()
	}
	c.mu.Lock()
	ok := t < c.end
	if ok {
		c.begun[w] = t + 1
	}
	c.mu.Unlock()
	return ok
}

// steps is the length of the rollout, once every worker has finished it.
func (c *cutter) steps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.end
}

// pace is the Slowdown test hook: it adds (slowdown−1)·took to the worker's debt and sleeps
// it off once it reaches a millisecond (sleeps shorter than that overshoot by more than they
// last); an oversleep is carried over as a negative debt.
func (w *worker) pace(slowdown float64, took time.Duration) {
	w.slowDebt += time.Duration((slowdown - 1) * float64(took))
	if w.slowDebt < time.Millisecond {
		return
	}
	t := time.Now()
	time.Sleep(w.slowDebt)
	w.slowDebt -= time.Since(t)
}

// checkSteps refuses a rollout length outside 1..Config.Steps.
func (b *Batcher) checkSteps(steps int) error {
	if steps < 1 || steps > b.cfg.Steps {
		return fmt.Errorf("%w: Collect of %d steps, Config.Steps allows 1 to %d", ErrConfig, steps, b.cfg.Steps)
	}
	return nil
}

package learner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures the asynchronous Learner. The zero value needs TrainBatch.
type Config struct {
	// TrainBatch is the capacity of a tower stack, in rows: the largest batch Submit takes.
	TrainBatch int
	// SGDIters is the number of shuffled passes over each loaded batch (num_sgd_iter). Default 1.
	SGDIters int
	// Stacks is the number of tower stacks (loaded batches waiting or training). Default 2.
	Stacks int
	// Loaders is the number of loader goroutines. Default 1.
	Loaders int
	// Inqueue bounds the batches waiting to be loaded; Submit blocks beyond it. Default 2.
	Inqueue int
	// Outqueue bounds the results waiting to be read; the learner blocks beyond it. Default 16.
	Outqueue int
	// Seed seeds the shuffling of minibatches: batch k is shuffled from the stream (Seed, k).
	Seed uint64
	// FirstBatch is the index k of the first batch submitted; a resumed run passes the number
	// of batches trained before, so that shuffles continue as they would have. Default 0.
	FirstBatch uint64
	// Load copies a submitted batch into a stack (on a device, this is the host-to-device
	// transfer). Default: copy the rows.
	Load func(ctx context.Context, stack, batch *SampleBatch) error
}

// Timers are cumulative durations of the learner's phases.
type Timers struct {
	QueueWait time.Duration // loaders waiting for a submitted batch
	Load      time.Duration // loading batches into stacks
	Grad      time.Duration // towers computing, averaging and applying gradients
	StackWait time.Duration // the learner waiting for a loaded stack
}

// Result reports one loaded batch trained SGDIters times.
type Result struct {
	Samples int       // rows the batch held
	Trained int       // row-updates applied (Samples·SGDIters when minibatches divide evenly)
	Updates int       // optimiser steps
	Stats   []float64 // towers' statistics averaged over the updates, in StatNames order
	Version int64     // parameter version after the last update
	Err     error     // a failure that stopped training this batch
}

// Add counts one update's statistics into r (its Stats summed until Mean).
func (r *Result) Add(st UpdateStats) {
	r.Trained += st.Rows
	r.Updates++
	for k, v := range st.Stats {
		r.Stats[k] += v
	}
}

// Mean turns r's summed Stats into their means over its updates.
func (r *Result) Mean() {
	for k := range r.Stats {
		r.Stats[k] /= float64(max(r.Updates, 1))
	}
}

// Learner is the asynchronous learner of RLlib's MultiGPULearnerThread: Submit puts sample
// batches on a bounded inqueue; loader goroutines take a batch and an idle tower stack and load
// it; the learner goroutine takes loaded stacks, runs SGDIters shuffled passes of minibatches
// through the Towers, returns the stack to idle and posts a Result. Submit, Weights, Timers and
// Close are safe for concurrent use.
type Learner struct {
	cfg      Config
	towers   *Towers
	stacks   []*SampleBatch
	inqueue  chan *SampleBatch
	released chan *SampleBatch
	results  chan Result
	idle     chan int
	ready    chan int
	quit     chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   atomic.Bool

	queueWait, load, grad, stackWait atomic.Int64 // nanoseconds
}

// New starts the loaders and the learner goroutine over towers; layout gives the
// batches' column widths. Close stops them.
func New(cfg Config, towers *Towers, layout *SampleBatch) (*Learner, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.SGDIters, 1)
	def(&cfg.Stacks, 2)
	def(&cfg.Loaders, 1)
	def(&cfg.Inqueue, 2)
	def(&cfg.Outqueue, 16)
	for _, f := range []struct {
		name string
		v    int
	}{{"TrainBatch", cfg.TrainBatch}, {"SGDIters", cfg.SGDIters}, {"Stacks", cfg.Stacks}, {"Loaders", cfg.Loaders},
		{"Inqueue", cfg.Inqueue}, {"Outqueue", cfg.Outqueue}} {
		if f.v < 1 {
			return nil, fmt.Errorf("%w: %s = %d, want >= 1", ErrConfig, f.name, f.v)
		}
	}
	if cfg.Load == nil {
		cfg.Load = func(_ context.Context, stack, batch *SampleBatch) error {
			stack.Reset()
			return stack.Append(batch)
		}
	}
	l := &Learner{cfg: cfg, towers: towers,
		inqueue: make(chan *SampleBatch, cfg.Inqueue), released: make(chan *SampleBatch, cfg.Inqueue+cfg.Loaders+cfg.Stacks),
		results: make(chan Result, cfg.Outqueue), idle: make(chan int, cfg.Stacks), ready: make(chan int, cfg.Stacks),
		quit: make(chan struct{})}
	for i := range cfg.Stacks {
		l.stacks = append(l.stacks, layout.NewLike(cfg.TrainBatch))
		l.idle <- i
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	for range cfg.Loaders {
		l.wg.Add(1)
		go l.loader(ctx)
	}
	l.wg.Add(1)
	go l.learn(ctx)
	return l, nil
}

// Submit hands b to the learner; it blocks while the inqueue is full. The learner owns b until
// it comes back on Released.
func (l *Learner) Submit(ctx context.Context, b *SampleBatch) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if b.Len() > l.cfg.TrainBatch {
		return fmt.Errorf("%w: a batch of %d rows, TrainBatch is %d", ErrBatch, b.Len(), l.cfg.TrainBatch)
	}
	select {
	case l.inqueue <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.quit:
		return ErrClosed
	}
}

// Released gives back submitted batches once they are loaded, for reuse. Reading it is
// optional: batches not read are dropped when its buffer is full.
func (l *Learner) Released() <-chan *SampleBatch { return l.released }

// Results is the outqueue; read it, or the learner stops when it is full.
func (l *Learner) Results() <-chan Result { return l.results }

// Weights copies the latest parameters into dst without stopping the learner (see Towers.Weights).
func (l *Learner) Weights(dst []float32) (int64, error) { return l.towers.Weights(dst) }

// Timers reports the cumulative phase durations.
func (l *Learner) Timers() Timers {
	return Timers{QueueWait: time.Duration(l.queueWait.Load()), Load: time.Duration(l.load.Load()),
		Grad: time.Duration(l.grad.Load()), StackWait: time.Duration(l.stackWait.Load())}
}

func (l *Learner) loader(ctx context.Context) {
	defer l.wg.Done()
	for {
		t0 := time.Now()
		var b *SampleBatch
		select {
		case b = <-l.inqueue:
		case <-l.quit:
			return
		}
		var s int
		select {
		case s = <-l.idle:
		case <-l.quit:
			return
		}
		t1 := time.Now()
		l.queueWait.Add(int64(t1.Sub(t0)))
		err := l.cfg.Load(ctx, l.stacks[s], b)
		l.load.Add(int64(time.Since(t1)))
		select {
		case l.released <- b:
		default:
		}
		if err != nil {
			l.idle <- s
			l.post(Result{Samples: b.Len(), Err: fmt.Errorf("learner: loading a batch: %w", err)})
			continue
		}
		l.ready <- s
	}
}

func (l *Learner) post(r Result) {
	select {
	case l.results <- r:
	case <-l.quit:
	}
}

func (l *Learner) learn(ctx context.Context) {
	defer l.wg.Done()
	// Only a stack of sequences is shuffled in place, with scratch as large as the stack. A
	// feed-forward stack is not: order, the permutations of its passes so far composed, tells
	// the towers which rows to gather (Towers.UpdateRows). Every stack holds up to TrainBatch
	// rows.
	var shuffler *Shuffler
	if l.stacks[0].Recurrent() {
		shuffler = NewShuffler(l.stacks[0])
	}
	order := NewRowOrder(l.cfg.TrainBatch)
	mb := l.towers.cfg.Minibatch
	src := rand.NewPCG(0, 0)
	rng := rand.New(src)
	for k := l.cfg.FirstBatch; ; k++ {
		src.Seed(l.cfg.Seed, k^0x6c6561726e6572)
		t0 := time.Now()
		var s int
		select {
		case s = <-l.ready:
		case <-l.quit:
			return
		}
		l.stackWait.Add(int64(time.Since(t0)))
		stack := l.stacks[s]
		res := Result{Samples: stack.Len(), Stats: make([]float64, len(l.towers.StatNames()))}
		units, rows := stack.Len(), !stack.Recurrent()
		if !rows {
			units = len(stack.SeqLens)
		}
		if rows {
			order.Reset(units)
		}
	passes:
		for range l.cfg.SGDIters {
			if rows {
				order.Shuffle(rng) // what Shuffler.Shuffle would do to the stack
			} else if err := shuffler.Shuffle(rng, stack); err != nil {
				res.Err = err
				break
			}
			for lo := 0; lo < units; lo += mb {
				hi := min(lo+mb, units)
				if hi-lo < l.towers.N() {
					break // a remainder too small to split over the towers
				}
				var st UpdateStats
				var err error
				if rows {
					st, err = l.towers.UpdateRows(ctx, stack, order.Rows(), lo, hi)
				} else {
					st, err = l.towers.Update(ctx, stack, lo, hi)
				}
				if err != nil {
					res.Err = err
					break passes
				}
				l.grad.Add(int64(st.Grad))
				res.Add(st)
			}
		}
		res.Mean()
		res.Version = l.towers.Version()
		l.idle <- s
		l.post(res)
	}
}

// Close stops the loaders and the learner, waits for them, and closes the towers. Batches still
// queued are dropped. It is idempotent.
func (l *Learner) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.quit)
	l.cancel()
	l.wg.Wait()
	return errors.Join(l.towers.Close())
}

package ddppo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/learner"
)

// Straggler preemption (DD-PPO, Wijmans et al. 2019, habitat-lab's sync_frac): a rank still
// collecting when ceil(SyncFrac·N) of the N ranks have finished their rollouts stops where it
// is, keeping at least a quarter of RolloutSteps (SHORT_ROLLOUT_THRESHOLD) and one minibatch.
// Every rank then tells the others how many steps it took (mpi.Group.FinishRollout: one message
// from every rank to every other per iteration, which a collecting rank counts between its env
// steps with RolloutsFinished), and the ranks train on rollouts of different lengths.
//
// The towers are built for minibatches of a fixed size, so a rank trains the whole minibatches
// its rows fill (after the shuffle; the rows left over sit out that pass) and still steps
// through every update of the schedule: in an update it has no minibatch for, it computes a
// gradient on placeholder rows with weight 0, adding nothing to the weighted all-reduce and
// nothing to the advantage statistics (mpi.Collective). Update k is then the one a single
// process would make on the union of the ranks' minibatches k.

// DefaultSyncFrac is Config.SyncFrac's default for ddppo: the paper's.
const DefaultSyncFrac = 0.6

// shortRollout is the smallest fraction of RolloutSteps a preempted rollout keeps (habitat-lab's
// SHORT_ROLLOUT_THRESHOLD).
const shortRollout = 0.25

// preemptSalt seeds the shuffles of the minibatch passes a preempting rank runs itself.
const preemptSalt = 0x707265656d7074

// PreemptConfig is what a rank's straggler preemption needs of its run.
type PreemptConfig struct {
	SyncFrac      float64 // the fraction of ranks that must finish before the others stop early
	Epochs        int     // passes over each rollout
	Seed          uint64  // the run's seed (the passes' shuffles)
	Envs, Rollout int     // the rank's envs, and the steps of a whole rollout
}

// Preempt readies the rank's straggler preemption for a run of c, and reports whether it has
// one: a rank neither preempts (a threshold every rank must reach) nor is slowed down on
// purpose without. It is for a rank that collects whole rollouts with its own batchers,
// feed-forward (the engine does not ask it for an asynchronous algorithm or a recurrent
// policy, whose sequences need whole rollouts). Prepare completes it once the towers exist;
// Collect is then the rank's collect.
func (r *Rank) Preempt(c PreemptConfig) bool {
	p := &preemption{need: syncRanks(c.SyncFrac, r.n), slowdown: r.slowdown,
		epochs: c.Epochs, seed: c.Seed, envs: c.Envs, rollouts: c.Rollout}
	p.on = c.SyncFrac > 0 && p.need < r.n
	if !p.on && p.slowdown <= 1 {
		return false
	}
	r.pre = p
	return true
}

// Prepare completes the rank's preemption, when it has one, once the towers (of minibatch
// rows, training batch) exist.
func (r *Rank) Prepare(towers *learner.Towers, batch *learner.SampleBatch, minibatch int) {
	p := r.pre
	if p == nil {
		return
	}
	p.towers, p.mb = towers, minibatch
	if !p.on {
		return
	}
	// A quarter of the rollout, and one minibatch: the towers train whole minibatches.
	p.floor = max(int(math.Ceil(shortRollout*float64(p.rollouts))), (minibatch+p.envs-1)/p.envs)
	p.updates = p.rollouts * p.envs / minibatch
	p.src = rand.NewPCG(0, 0)
	p.rng = rand.New(p.src)
	p.order = learner.NewRowOrder(batch.Cap())
	p.spare = batch.NewLike(minibatch)
	g := r.g
	p.stop = func() bool {
		n, err := g.RolloutsFinished()
		if err != nil {
			p.errMu.Lock()
			p.err = err
			p.errMu.Unlock()
			return true
		}
		return n >= p.need
	}
}

// Collect is the rank's rollout of steps steps with its preemption (Preempt): one that stops
// early once enough ranks have finished theirs, followed by the exchange of every rank's
// steps.
func (r *Rank) Collect(ctx context.Context, b *batcher.Batcher, steps int) (*batcher.Rollout, error) {
	p := r.pre
	pre := batcher.Preempt{Slowdown: p.slowdown}
	if p.on {
		pre.MinSteps, pre.Stop = p.floor, p.stop
	}
	ro, err := b.CollectPreemptible(ctx, steps, pre)
	p.errMu.Lock()
	err, p.err = errors.Join(err, p.err), nil
	p.errMu.Unlock()
	if err != nil || !p.on {
		return ro, err
	}
	w0 := time.Now()
	if p.steps, err = r.g.FinishRollout(ctx, int64(ro.T)); err != nil {
		return nil, fmt.Errorf("engine: rank %d: waiting for the other ranks to finish collecting: %w", r.id, err)
	}
	p.wait = time.Since(w0)
	return ro, nil
}

// Preemption describes the iteration's straggler preemption: each rank's rollout as a
// fraction of a whole one (in rank order), how many ranks stopped early, and how long this
// rank waited, its own rollout done, for the others; ok is false without preemption.
func (r *Rank) Preemption() (collected []float64, preempted int, wait time.Duration, ok bool) {
	p := r.pre
	if p == nil || !p.on {
		return nil, 0, 0, false
	}
	collected = make([]float64, len(p.steps))
	for k, s := range p.steps {
		collected[k] = float64(s) / float64(p.rollouts)
		if int(s) < p.rollouts {
			preempted++
		}
	}
	return collected, preempted, p.wait, true
}

// syncRanks is ceil(frac·n): the ranks that must have finished collecting before the others
// stop early (a hair below, so that 0.7·10 is 7, not 8).
func syncRanks(frac float64, n int) int {
	return max(int(math.Ceil(frac*float64(n)-1e-9)), 1)
}

// preemption is a DD-PPO rank's straggler preemption, and the Options.Slowdown test hook.
type preemption struct {
	on       bool    // the rank stops early when need other ranks have finished
	need     int     // ceil(SyncFrac·N)
	floor    int     // the fewest steps a rollout keeps
	slowdown float64 // Options.Slowdown
	stop     func() bool

	errMu sync.Mutex // guards err, written by the batcher's workers through stop
	err   error

	// The iteration's rollout lengths (every rank's, in rank order) and this rank's wait for
	// the others to finish collecting.
	steps []int64
	wait  time.Duration

	// Training on rows of this rank's own number: the schedule of every rank (updates of mb
	// rows per pass), the shuffle, and placeholder rows for the updates it has none for.
	towers         *learner.Towers
	mb, updates    int
	epochs         int
	seed           uint64
	src            *rand.PCG
	rng            *rand.Rand
	order          *learner.RowOrder // the passes' shuffles, composed
	spare          *learner.SampleBatch
	envs, rollouts int // envs of the rank, steps of a full rollout
}

// RowsCollected is the rows every rank collected this iteration: rows each without
// preemption.
func (r *Rank) RowsCollected(rows int) int64 {
	p := r.pre
	if p == nil || !p.on {
		return int64(rows * r.n)
	}
	var n int64
	for _, s := range p.steps {
		n += s * int64(p.envs)
	}
	return n
}

// learn trains b (this rank's rows, however many) for Epochs shuffled passes of the run's
// minibatch schedule, in step with the other ranks (see the top of this file).
func (p *preemption) learn(ctx context.Context, coll weighted, b *learner.SampleBatch, it int) (learner.Result, error) {
	res := learner.Result{Samples: b.Len(), Stats: make([]float64, len(p.towers.StatNames()))}
	if b.Len() < p.mb {
		return res, fmt.Errorf("engine: a rollout of %d rows, less than one minibatch of %d: preemption keeps at least %d steps", b.Len(), p.mb, p.floor)
	}
	if err := b.CopyRange(p.spare, 0, p.mb); err != nil {
		return res, err
	}
	p.src.Seed(p.seed, uint64(it)^preemptSalt)
	// The towers gather each minibatch's rows in the passes' composed order, where b was
	// shuffled in place before each pass: the same draws, rows and bits (learner.RowOrder).
	p.order.Reset(b.Len())
	for range p.epochs {
		p.order.Shuffle(p.rng)
		if err := minibatchUpdates(ctx, p.towers, coll, b, p.order.Rows(), p.spare, p.mb, p.updates, &res); err != nil {
			return res, err
		}
	}
	res.Mean()
	res.Version = p.towers.Version()
	return res, nil
}

// weighted is the rank's share of the collective: its weight in the next all-reduces.
type weighted interface{ SetWeight(w float64) error }

// minibatchUpdates runs one pass of updates minibatch updates of mb rows over b, in the order
// order (nil: b's own): update k trains rows [k·mb, (k+1)·mb) with the weight of the rows the
// towers take, while b has them; after that it trains spare's rows with weight 0. It adds the
// weighted updates to res.
func minibatchUpdates(ctx context.Context, tw *learner.Towers, coll weighted, b *learner.SampleBatch, order []int, spare *learner.SampleBatch, mb, updates int, res *learner.Result) error {
	have := b.Len() / mb
	rows := mb / tw.N() * tw.N() // the towers truncate a minibatch to a multiple of their number
	for k := range updates {
		src, lo, w := b, k*mb, rows
		if k >= have {
			src, lo, w = spare, 0, 0
		}
		if err := coll.SetWeight(float64(w)); err != nil {
			return err
		}
		var st learner.UpdateStats
		var err error
		if src == b && order != nil {
			st, err = tw.UpdateRows(ctx, b, order, lo, lo+mb)
		} else {
			st, err = tw.Update(ctx, src, lo, lo+mb)
		}
		if err != nil {
			return err
		}
		if w > 0 {
			res.Add(st)
		}
	}
	return nil
}

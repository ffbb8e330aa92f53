package batcher

import (
	"context"
	"fmt"
	"slices"

	"github.com/towerrl/towerrl/bind"
)

// nonFinite returns the index of the first NaN or infinity in xs, or -1.
func nonFinite(xs []float32) int {
	for i, v := range xs {
		if v-v != 0 { // NaN for NaN and ±Inf, 0 for every finite value
			return i
		}
	}
	return -1
}

// Publish makes flat, a trainer's parameter vector in the layout of the policy's
// bind.Config.Publish, policy version version on every worker, without exporting a model or
// building a session. It copies the weights into each worker's second set of buffers (the
// worker's session may be running a step on the first) and returns; each worker swaps the
// sets between two steps, as it installs UpdatePolicy's agents. When Publish returns, every
// step any worker starts from then on runs with these weights (or a later Publish's or
// UpdatePolicy's) and every
// row it writes carries version; a step in flight finishes with the weights it started with,
// so no step mixes versions. Recurrent states carry over, as they do over UpdatePolicy. A
// policy UpdatePolicy handed over but a worker has not installed yet takes the weights too.
//
// flat is read before Publish returns and may be changed afterwards. Weights that are not
// finite are refused, as is a flat vector of another length than the layout's (its furthest
// end), and a batcher whose policy was built without bind.Config.Publish; an error leaves
// every worker as it was. Publish calls are serialised; it may be called during Collect, from
// any goroutine. After Close it returns ErrClosed.
func (b *Batcher) Publish(ctx context.Context, version int64, flat []float32) error {
	return b.publish(ctx, version, flat, func(r *bind.Runner) { r.Stage(version, flat) })
}

// PublishExplore is Publish with an exploration rate ε in [0, 1] that every worker takes with
// the weights (bind.Runner.StageExplore): a qvalues head then acts ε-greedily with it, a
// tanh-gaussian head takes a uniformly random action with probability ε. An off-policy
// trainer publishes its schedule's ε this way, with no new export.
func (b *Batcher) PublishExplore(ctx context.Context, version int64, flat []float32, explore float64) error {
	if !(explore >= 0 && explore <= 1) {
		return fmt.Errorf("%w: exploration rate %v, want [0, 1]", bind.ErrPublish, explore)
	}
	return b.publish(ctx, version, flat, func(r *bind.Runner) { r.StageExplore(version, flat, explore) })
}

// publish is Publish, each worker's weights staged by stage.
func (b *Batcher) publish(ctx context.Context, version int64, flat []float32, stage func(*bind.Runner)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	if b.pubClosed {
		return ErrClosed
	}
	for _, w := range b.workers {
		w.pendingMu.Lock()
		defer w.pendingMu.Unlock()
	}
	targets := make([]*bind.Runner, len(b.workers))
	var layout []bind.Param
	for i, w := range b.workers {
		next := w.pending
		if next == nil {
			next = w.agent
		}
		a, ok := next.(*onnxAgent)
		var params []bind.Param
		var size int
		if ok {
			params, size = a.r.Layout()
		}
		if params == nil {
			return fmt.Errorf("%w: worker %d's policy was not built with bind.Config.Publish; publish it with WithModel and UpdatePolicy, or load it with the layout", bind.ErrPublish, w.index)
		}
		if len(flat) != size {
			return fmt.Errorf("%w: a flat vector of %d values; the layout (bind.Config.Publish) holds %d", bind.ErrPublish, len(flat), size)
		}
		if i > 0 && !slices.Equal(params, layout) {
			return fmt.Errorf("%w: worker %d's next policy lays out its weights (bind.Config.Publish) unlike worker %d's", bind.ErrPublish, w.index, b.workers[0].index)
		}
		layout, targets[i] = params, a.r
	}
	for _, p := range layout {
		if k := nonFinite(flat[p.Offset : p.Offset+p.Len]); k >= 0 {
			return fmt.Errorf("%w: weight %q value %d is %v", bind.ErrPublish, p.Name, k, flat[p.Offset+k])
		}
	}
	for _, r := range targets {
		stage(r)
	}
	b.newest.Store(version)
	return nil
}

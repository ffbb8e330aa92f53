package engine

import (
	"context"
	"errors"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
)

// collector is where a run's rollouts come from. The trainer chooses one when it is made
// (newTrainer) and never asks which it has:
//
//   - batchersCollector: the run's own batchers, one synchronous rollout per iteration (ppo,
//     ddppo), resumed exactly from the batchers' snapshot; DD-PPO's straggler preemption
//     wraps it (preemptCollector, ddppo.go, over package engine/ddppo);
//   - streamCollector: the run's own batchers streaming into a ring that the learner takes
//     rollouts from without the batchers ever waiting (impala, appo: algo.Sequential);
//   - sourceCollector: a RolloutSource (remote batchers), source.go.
//
// An off-policy algorithm (engine/dqn, engine/sac over the replay buffer of engine/replay)
// plugs in as a collector of its own, chosen from the capabilities its package registers
// (algo.Capabilities), with no new field on the trainer: collect steps the batchers for the
// algorithm's train_freq steps, adds them to the buffer and returns a batch sampled from it
// (an iteration is then one collection and its updates), release is a no-op, keep is the
// buffer's oldest version, and snapshot and restore carry the buffer and its sampling stream
// in the checkpoint. What the learner's side still lacks for SAC (several parameter vectors
// and optimisers, a next-observation column) is listed in docs/offpolicy.md.
type collector interface {
	// start readies the collection for a run starting at firstIteration, the batchers
	// running pol; version and model are the policy the run starts with.
	start(ctx context.Context, pol *bind.Policy, firstIteration int, version int64, model []byte) error
	// collect returns the iteration's rollout (the run is at policy version); it is the
	// trainer's until release.
	collect(ctx context.Context, version int64) (*batcher.Rollout, error)
	// release hands the rollout's buffers back once its rows are in the learner's batch.
	release(ctx context.Context) error
	// publish makes version the collectors' policy: weights copied in place into the
	// batchers' sessions, or the model export makes for collectors elsewhere.
	publish(ctx context.Context, version int64, weights []float32, export func() ([]byte, error)) error
	// keep is the oldest policy version a later rollout may have been collected with, given
	// the oldest of this one and the run's version: the observation normaliser keeps the
	// maps of the versions from it on.
	keep(oldest, version int64) int64
	// snapshot is the collectors' state for a checkpoint, nil when they keep none (a stream
	// never stops to be snapshotted; remote batchers are not the run's).
	snapshot() ([]byte, error)
	// restore sets the collectors' state from a checkpoint: snap gives their snapshot, and
	// is called only by collectors that keep one.
	restore(snap func() ([]byte, error)) error
	// metrics adds the collection's share to an iteration's metrics m: b's rows rows
	// trained, collected by versions up to version, whose collect took collect.
	metrics(m *Metrics, b *learner.SampleBatch, rows int, version int64, collect time.Duration)
	// result adds the run's collection totals to res.
	result(res *Result)
	// close stops the collection, dropping the rollouts in flight.
	close() error
}

// batchersCollector collects with the run's own batchers, one synchronous rollout per
// iteration.
type batchersCollector struct {
	cfg  Config
	spec envs.Spec
	seed uint64 // the batchers' seed (rankSeed's)
	b    *batcher.Batcher
}

func (c *batchersCollector) start(ctx context.Context, pol *bind.Policy, _ int, _ int64, _ []byte) (err error) {
	c.b, err = newBatchers(ctx, c.cfg, c.spec, pol, c.seed)
	return err
}

// newBatchers makes the run's own batchers of cfg on the env of spec, running pol, seeded
// with seed.
func newBatchers(ctx context.Context, cfg Config, spec envs.Spec, pol *bind.Policy, seed uint64) (*batcher.Batcher, error) {
	return batcher.New(ctx, batcher.Config{Env: spec, Workers: cfg.Workers, EnvsPerWorker: cfg.Envs,
		Steps: cfg.RolloutSteps, Seed: seed, NoSpin: cfg.NoSpin}, pol)
}

func (c *batchersCollector) collect(ctx context.Context, _ int64) (*batcher.Rollout, error) {
	return c.b.Collect(ctx, c.cfg.RolloutSteps)
}

func (c *batchersCollector) release(context.Context) error { return nil }

func (c *batchersCollector) publish(ctx context.Context, version int64, weights []float32, _ func() ([]byte, error)) error {
	return c.b.Publish(ctx, version, weights)
}

// keep: the batchers hand rollouts over in order, each worker's versions never going back,
// so none later holds a version older than this one's oldest.
func (c *batchersCollector) keep(oldest, _ int64) int64 { return oldest }

func (c *batchersCollector) snapshot() ([]byte, error) { return c.b.Snapshot() }

func (c *batchersCollector) restore(snap func() ([]byte, error)) error {
	b, err := snap()
	if err != nil {
		return err
	}
	return c.b.Restore(b)
}

func (c *batchersCollector) metrics(*Metrics, *learner.SampleBatch, int, int64, time.Duration) {}
func (c *batchersCollector) result(*Result)                                                    {}

func (c *batchersCollector) close() error {
	if c.b == nil {
		return nil
	}
	return c.b.Close()
}

// streamCollector is the collection of an asynchronous algorithm (one whose loss corrects for
// policy lag, algo.Sequential): the batchers stream rollouts into a ring of Config.QueueSize
// buffers without waiting for the learner, which trains on each as it arrives.
//
// The stream runs from the first collect to the end of the run. Its checkpoints hold the
// learner's state (weights, optimiser, counters) but not the batchers' (a snapshot would stop
// the stream): a resumed asynchronous run starts fresh episodes from a seed derived from the
// iteration it resumes at, and the rollouts in flight at the checkpoint are not trained on. An
// asynchronous run is not bit-reproducible anyway: which version collects which step depends
// on timing.
type streamCollector struct {
	cfg    Config
	spec   envs.Spec
	seed   uint64 // the run's batcher seed, before the resume's (start)
	b      *batcher.Batcher
	stream *batcher.Stream
	slot   int  // the ring buffer the trainer holds, until release
	held   bool // whether slot is held
	lag    lagMeter
}

// start makes the batchers; the stream starts with the first collect. A run resumed at
// iteration k > 0 seeds them from (seed, k), so its episodes are fresh ones.
func (c *streamCollector) start(ctx context.Context, pol *bind.Policy, firstIteration int, _ int64, _ []byte) (err error) {
	seed := c.seed
	if firstIteration > 0 {
		seed ^= uint64(firstIteration) * 0x9e3779b97f4a7c15
	}
	c.b, err = newBatchers(ctx, c.cfg, c.spec, pol, seed)
	return err
}

// collect returns the oldest rollout the stream has filled, starting the stream when none
// runs.
func (c *streamCollector) collect(ctx context.Context, _ int64) (*batcher.Rollout, error) {
	if c.stream == nil {
		s, err := c.b.Stream(ctx, batcher.StreamConfig{Slots: c.cfg.QueueSize, Steps: c.cfg.RolloutSteps, MaxPolicyLag: c.cfg.MaxPolicyLag})
		if err != nil {
			return nil, err
		}
		c.stream = s
		c.lag.reset()
	}
	slot, r, err := c.stream.Next(ctx)
	if err != nil {
		return nil, err
	}
	c.slot, c.held = slot, true
	return r, nil
}

func (c *streamCollector) release(context.Context) error {
	if !c.held {
		return nil
	}
	c.held = false
	return c.stream.Release(c.slot)
}

func (c *streamCollector) publish(ctx context.Context, version int64, weights []float32, _ func() ([]byte, error)) error {
	return c.b.Publish(ctx, version, weights)
}

// keep: as the batchers' (their rollouts come in order).
func (c *streamCollector) keep(oldest, _ int64) int64 { return oldest }

func (c *streamCollector) snapshot() ([]byte, error)            { return nil, nil }
func (c *streamCollector) restore(func() ([]byte, error)) error { return nil }

func (c *streamCollector) metrics(m *Metrics, b *learner.SampleBatch, rows int, version int64, collect time.Duration) {
	var st batcher.StreamStats
	if c.stream != nil {
		st = c.stream.Stats()
	}
	m.Async = c.lag.measure(b, rows, version, collect, st, st.Dropped)
	m.CollectSPS = Float(m.Async.rate) // the batchers never wait for this iteration: its wait is no rate
}

func (c *streamCollector) result(res *Result) {
	if c.lag.rows > 0 {
		res.Async = c.lag.summary()
	}
}

// close ends the stream at the end of the run, dropping the rollouts in flight, and the
// batchers.
func (c *streamCollector) close() error {
	var errs []error
	if c.stream != nil {
		c.held = false
		errs = append(errs, c.stream.Close())
		c.stream = nil
	}
	if c.b != nil {
		errs = append(errs, c.b.Close())
	}
	return errors.Join(errs...)
}

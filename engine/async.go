package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
)

// asyncRun is the trainer's state for an asynchronous algorithm (one whose loss corrects for
// policy lag, algo.Sequential): the batchers stream rollouts into a ring of Config.QueueSize
// buffers without waiting for the learner, which trains on each as it arrives.
//
// The stream runs from the first collect to the end of the run. Its checkpoints hold the
// learner's state (weights, optimiser, counters) but not the batchers' (a snapshot would stop
// the stream): a resumed asynchronous run starts fresh episodes from a seed derived from the
// iteration it resumes at, and the rollouts in flight at the checkpoint are not trained on. An
// asynchronous run is not bit-reproducible anyway: which version collects which step depends
// on timing.
type asyncRun struct {
	stream *batcher.Stream
	slot   int                 // the ring buffer the trainer holds, until release
	held   bool                // whether slot is held
	last   batcher.StreamStats // the stream's counters at the previous iteration
	since  time.Time           // when the previous iteration's collect returned
	hist   []int64

	// The run's totals, for Result.Async: the lag histogram, rows, the lag's sum, and the
	// seconds the batchers sat blocked and the learner waited over the wall seconds.
	total                      AsyncMetrics
	rows, lagSum               int64
	blocked, waited, wallTotal float64
}

// summary is the run's asynchronous statistics so far (Result.Async).
func (a *asyncRun) summary() *AsyncMetrics {
	m := a.total
	m.LagHistogram = append([]int64(nil), a.total.LagHistogram...)
	if a.rows > 0 {
		m.PolicyLagMean = Float(float64(a.lagSum) / float64(a.rows))
	}
	if a.wallTotal > 0 {
		m.BatcherIdle, m.LearnerIdle = Float(a.blocked/a.wallTotal), Float(a.waited/a.wallTotal)
	}
	return &m
}

// batcherSeed is the batchers' seed for a run starting at firstIteration: the run's seed, or
// for an asynchronous run resumed at iteration k > 0 one derived from (seed, k), so the resumed
// run's episodes are fresh ones.
// A DD-PPO rank's seed is derived from (seed, rank) (rankSeed).
func (t *trainer) batcherSeed(firstIteration int) uint64 {
	seed := t.cfg.Seed
	if t.rs != nil {
		seed = rankSeed(seed, t.rs.rank)
	}
	if t.async == nil || firstIteration == 0 {
		return seed
	}
	return seed ^ (uint64(firstIteration) * 0x9e3779b97f4a7c15)
}

// lagBuckets is the size of the policy-lag histogram in the metrics: lags 0 to 6, and 7 or more.
const lagBuckets = 8

// collect returns the iteration's rollout: a synchronous Collect for ppo; for an asynchronous
// algorithm the oldest rollout the stream has filled (starting the stream when none runs).
func (t *trainer) collect(ctx context.Context) (*batcher.Rollout, error) {
	if t.source != nil {
		return t.collectSource(ctx)
	}
	if t.async == nil {
		return t.b.Collect(ctx, t.cfg.RolloutSteps)
	}
	a := t.async
	if a.stream == nil {
		s, err := t.b.Stream(ctx, batcher.StreamConfig{Slots: t.cfg.QueueSize, Steps: t.cfg.RolloutSteps, MaxPolicyLag: t.cfg.MaxPolicyLag})
		if err != nil {
			return nil, err
		}
		a.stream, a.last, a.since = s, batcher.StreamStats{}, time.Now()
	}
	slot, r, err := a.stream.Next(ctx)
	if err != nil {
		return nil, err
	}
	a.slot, a.held = slot, true
	return r, nil
}

// release hands the iteration's rollout buffer back to the batchers, once its rows are in
// the learner's batch.
func (t *trainer) release(ctx context.Context) error {
	if s := t.source; s != nil && s.ack != nil {
		ack := s.ack
		s.ack = nil
		return ack(ctx)
	}
	if t.async == nil || !t.async.held {
		return nil
	}
	t.async.held = false
	return t.async.stream.Release(t.async.slot)
}

// stopStream ends the batchers' stream at the end of the run, dropping the rollouts in
// flight.
func (t *trainer) stopStream() error {
	if t.async == nil || t.async.stream == nil {
		return nil
	}
	a := t.async
	a.held = false
	err := a.stream.Close()
	a.stream = nil
	return err
}

// asyncMetrics describes the iteration that trained on b's rows, whose collect waited
// waited: the policy lag of the rows (against the learner's version before the update), the
// ring's occupancy and who waited for whom since the previous iteration.
func (t *trainer) asyncMetrics(b *learner.SampleBatch, rows int, waited time.Duration) *AsyncMetrics {
	a := t.async
	if a.hist == nil {
		a.hist = make([]int64, lagBuckets)
	}
	clear(a.hist)
	var sum, most int64
	for _, v := range b.Version[:rows] {
		lag := max(t.version-v, 0)
		sum += lag
		most = max(most, lag)
		a.hist[min(lag, lagBuckets-1)]++
	}
	var st batcher.StreamStats
	if a.stream != nil {
		st = a.stream.Stats()
	}
	now := time.Now()
	wall := now.Sub(a.since).Seconds()
	m := &AsyncMetrics{PolicyLagMax: most, LagHistogram: append([]int64(nil), a.hist...), Queue: st.Ready,
		Dropped: st.Dropped}
	if t.source != nil {
		m.Dropped = t.source.dropped
	}
	if rows > 0 {
		m.PolicyLagMean = Float(float64(sum) / float64(rows))
	}
	if wall > 0 {
		m.rate = float64(rows) / wall
		m.BatcherIdle = Float(min(1, (st.Blocked-a.last.Blocked).Seconds()/wall))
		m.LearnerIdle = Float(min(1, waited.Seconds()/wall))
	}
	a.last, a.since = st, now
	if a.total.LagHistogram == nil {
		a.total.LagHistogram = make([]int64, lagBuckets)
	}
	for k, n := range a.hist {
		a.total.LagHistogram[k] += n
	}
	a.rows += int64(rows)
	a.lagSum += sum
	a.total.PolicyLagMax = max(a.total.PolicyLagMax, most)
	a.total.Queue, a.total.Dropped = m.Queue, m.Dropped
	a.wallTotal += wall
	a.blocked += float64(m.BatcherIdle) * wall
	a.waited += float64(m.LearnerIdle) * wall
	return m
}

// fillAsync writes rollout r into the trainer's batch for an asynchronous algorithm: each
// env's rollout as whole sequences of L steps (fillEnvMajor), with each row's NextValues,
// which V-trace bootstraps from at a sequence's end and at a truncation.
func (t *trainer) fillAsync(r *batcher.Rollout, L int) error {
	if len(r.States) > 0 {
		return errors.New("engine: asynchronous algorithms do not train recurrent policies yet; use --algo ppo")
	}
	return t.fillEnvMajor(r, L)
}

// fillEnvMajor writes rollout r into the trainer's batch as sequences of L steps: each env's
// rollout cut into T/L, env-major (env i's sequence c holds its steps c·L ... c·L+L−1, at rows
// (i·T/L + c)·L ...), the targets' time-major advantages and returns (t.adv, t.ret) reordered
// alike. Each row's NextValues is the behaviour policy's value of its successor state:
// FinalValues where the episode was truncated, 0 where it terminated, the next step's value
// otherwise and LastValues after the rollout's last step.
func (t *trainer) fillEnvMajor(r *batcher.Rollout, L int) error {
	b := t.batch
	T, n := r.T, r.N
	if L < 1 || T%L != 0 {
		return fmt.Errorf("engine: a rollout of %d steps cannot be cut into sequences of %d", T, L)
	}
	b.Reset()
	od, ad := r.ObsDim, r.ActDim
	dst := 0
	for i := range n {
		for step := range T {
			src := step*n + i
			copy(b.Obs[dst*od:(dst+1)*od], r.Obs[src*od:(src+1)*od])
			copy(b.Actions[dst*ad:(dst+1)*ad], r.Actions[src*ad:(src+1)*ad])
			b.Rewards[dst], b.Terminated[dst], b.Truncated[dst] = r.Rewards[src], r.Terminated[src], r.Truncated[src]
			b.LogP[dst], b.Values[dst], b.Version[dst] = r.LogP[src], r.Values[src], r.Version[src]
			b.Advantages[dst], b.Returns[dst] = t.adv[src], t.ret[src]
			switch {
			case r.Terminated[src] != 0:
				b.NextValues[dst] = 0
			case r.Truncated[src] != 0:
				b.NextValues[dst] = r.FinalValues[src]
			case step+1 < T:
				b.NextValues[dst] = r.Values[src+n]
			default:
				b.NextValues[dst] = r.LastValues[i]
			}
			dst++
		}
		for range T / L {
			b.SeqLens = append(b.SeqLens, int32(L))
		}
	}
	return b.SetLen(T * n)
}

// seqAlgo is an asynchronous algorithm whose losses are told the length of the sequences
// their rows come in (algo.Heads.SeqLen), for any tower that builds them.
type seqAlgo struct {
	algo.Algorithm
	seqLen int
}

func (s seqAlgo) Loss(h algo.Heads) (algo.Loss, error) {
	h.SeqLen = s.seqLen
	return s.Algorithm.Loss(h)
}

package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
)

// lagMeter measures an asynchronous run's policy lag and who waited for whom, iteration by
// iteration (Metrics.Async) and over the run (Result.Async).
type lagMeter struct {
	last  batcher.StreamStats // the stream's counters at the previous iteration
	since time.Time           // when the previous iteration's measure (or the start) was
	hist  []int64

	// The run's totals, for Result.Async: the lag histogram, rows, the lag's sum, and the
	// seconds the batchers sat blocked and the learner waited over the wall seconds.
	total                      AsyncMetrics
	rows, lagSum               int64
	blocked, waited, wallTotal float64
}

// reset starts measuring now, from a stream's first counters.
func (a *lagMeter) reset() { a.last, a.since = batcher.StreamStats{}, time.Now() }

// summary is the run's asynchronous statistics so far (Result.Async).
func (a *lagMeter) summary() *AsyncMetrics {
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

// lagBuckets is the size of the policy-lag histogram in the metrics: lags 0 to 6, and 7 or more.
const lagBuckets = 8

// measure describes the iteration that trained on b's rows, whose collect waited waited: the
// policy lag of the rows (against version, the learner's before the update), the ring's
// occupancy (st, the stream's counters; zero without a stream), the rollouts dropped so far
// and who waited for whom since the previous iteration.
func (a *lagMeter) measure(b *learner.SampleBatch, rows int, version int64, waited time.Duration, st batcher.StreamStats, dropped int64) *AsyncMetrics {
	if a.hist == nil {
		a.hist = make([]int64, lagBuckets)
	}
	clear(a.hist)
	var sum, most int64
	for _, v := range b.Version[:rows] {
		lag := max(version-v, 0)
		sum += lag
		most = max(most, lag)
		a.hist[min(lag, lagBuckets-1)]++
	}
	now := time.Now()
	wall := now.Sub(a.since).Seconds()
	m := &AsyncMetrics{PolicyLagMax: most, LagHistogram: append([]int64(nil), a.hist...), Queue: st.Ready,
		Dropped: dropped}
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

// Package benchscale times an update on one tower and on two in turns, for the benchmarks
// that report how the towers scale (learner's BenchmarkTowersScaling for PPO, engine/dqn's
// BenchmarkUpdateScaling). On a machine whose load comes and goes, two benchmarks run one after
// the other give ratios anywhere from 0.6 to 1.6; taking both in the same moments, and
// quantiles of single updates, keeps the ratio steady.
package benchscale

import (
	"slices"
	"testing"
	"time"
)

// Warm is the untimed updates at the start of each turn: a tower left idle longer than
// spin.For parks, and the first update after pays its wake-up.
const Warm = 3

// Compare runs one and two in turns, for each b.Loop iteration Warm untimed then timed timed
// calls of each, and reports the median time of a call of each ("µs/update-1",
// "µs/update-2"), their ratio ("speedup") and the ratio of their fastest fifths
// ("speedup-p20"). A call's error fails the benchmark.
func Compare(b *testing.B, timed int, one, two func() error) {
	var times [2][]time.Duration
	for b.Loop() {
		for k, update := range []func() error{one, two} {
			for u := range Warm + timed {
				start := time.Now()
				if err := update(); err != nil {
					b.Fatal(err)
				}
				if u >= Warm {
					times[k] = append(times[k], time.Since(start))
				}
			}
		}
	}
	t1, t2 := quantile(times[0], 0.5), quantile(times[1], 0.5)
	b.ReportMetric(t1, "µs/update-1")
	b.ReportMetric(t2, "µs/update-2")
	b.ReportMetric(t1/t2, "speedup")
	b.ReportMetric(quantile(times[0], 0.2)/quantile(times[1], 0.2), "speedup-p20")
}

// quantile is the q-quantile of d in microseconds (d is sorted in place).
func quantile(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))].Microseconds())
}

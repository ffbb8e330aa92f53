// Package enginetest holds what the tests of engine and its packages (policy, ddppo) share:
// random PPO minibatches, and the check that DD-PPO's ranks end as one process does.
package enginetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/learner"
)

// Scales are the standard deviations of RandomMinibatch's returns, old values and old
// log-probabilities (around log(1/actions)).
type Scales struct{ Ret, Value, LogP float64 }

// RandomMinibatch makes n rows of CartPole-shaped data for PPO loss tests: standard normal
// observations and advantages, uniform actions among actions, and the given scales.
func RandomMinibatch(rng *rand.Rand, n, actions int, sc Scales) *learner.SampleBatch {
	mb := learner.NewSampleBatch(n, 4, 1, 0)
	for i := range n {
		for j := range 4 {
			mb.Obs[i*4+j] = float32(rng.NormFloat64())
		}
		mb.Actions[i] = float32(rng.IntN(actions))
		mb.Advantages[i] = float32(rng.NormFloat64())
		mb.Returns[i] = float32(rng.NormFloat64() * sc.Ret)
		mb.Values[i] = float32(rng.NormFloat64() * sc.Value)
		mb.LogP[i] = float32(math.Log(1/float64(actions)) + rng.NormFloat64()*sc.LogP)
	}
	mb.SetLen(n)
	return mb
}

// SameAsOneProcess checks that every rank ended with the same bits (got, or the rank's error)
// and within 1e-6 of one process's parameters, want.
func SameAsOneProcess(t *testing.T, want []float32, got [][]float32, errs []error, what string) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	worst := 0.0
	for k, v := range want {
		worst = math.Max(worst, math.Abs(float64(v-got[0][k])))
		for r := 1; r < len(got); r++ {
			if got[0][k] != got[r][k] {
				t.Fatalf("the ranks' parameter %d differs: %v on rank 0, %v on rank %d", k, got[0][k], got[r][k], r)
			}
		}
	}
	t.Logf("%s: max parameter difference %.3g", what, worst)
	if worst > 1e-6 {
		t.Errorf("%d ranks' parameters differ from 1 process's by %.3g", len(got), worst)
	}
}

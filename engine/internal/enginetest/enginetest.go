// Package enginetest holds test data shared by the tests of engine and its packages (policy,
// ddppo): random PPO minibatches.
package enginetest

import (
	"math"
	"math/rand/v2"

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

package engine

import (
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/learner"
)

// minibatchScales are the standard deviations of randomMinibatch's returns, old values and old
// log-probabilities (around log(1/actions)).
type minibatchScales struct{ ret, value, logp float64 }

// randomMinibatch makes n rows of CartPole-shaped data for PPO loss tests: standard normal
// observations and advantages, uniform actions among actions, and the given scales.
func randomMinibatch(rng *rand.Rand, n, actions int, sc minibatchScales) *learner.SampleBatch {
	mb := learner.NewSampleBatch(n, 4, 1, 0)
	for i := range n {
		for j := range 4 {
			mb.Obs[i*4+j] = float32(rng.NormFloat64())
		}
		mb.Actions[i] = float32(rng.IntN(actions))
		mb.Advantages[i] = float32(rng.NormFloat64())
		mb.Returns[i] = float32(rng.NormFloat64() * sc.ret)
		mb.Values[i] = float32(rng.NormFloat64() * sc.value)
		mb.LogP[i] = float32(math.Log(1/float64(actions)) + rng.NormFloat64()*sc.logp)
	}
	mb.SetLen(n)
	return mb
}

package engine

import (
	"sync/atomic"

	"github.com/towerrl/towerrl/learner"
)

// warmupLRFactor multiplies the learning rate of the value warm-up, when only a new critic
// moves (the actor's gradients are zero, so Adam leaves it where it is): a critic that starts
// from scratch next to a pretrained actor must catch up with returns that are large at once.
const warmupLRFactor = 10

// warmupBoost is Schedule with the rate multiplied by factor for the first iters iterations.
// Once after is set the optimiser counts its steps from 0 again, and the schedule continues
// from the warm-up's perIter·iters steps.
type warmupBoost struct {
	learner.Schedule
	perIter, iters int
	factor         float64
	after          *atomic.Bool
}

func (w *warmupBoost) LR(step int) float64 {
	if w.after.Load() {
		return w.Schedule.LR(step + w.perIter*w.iters)
	}
	return w.factor * w.Schedule.LR(step)
}

// iterationAnneal is CleanRL's schedule: constant within an iteration, lr·(1 − i/iterations).
type iterationAnneal struct {
	lr      float64
	perIter int
	iters   int
}

func (a iterationAnneal) LR(step int) float64 {
	i := step / a.perIter
	return a.lr * max(1-float64(i)/float64(a.iters), 0)
}

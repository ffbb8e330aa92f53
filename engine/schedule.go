package engine

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

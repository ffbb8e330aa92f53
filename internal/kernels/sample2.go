package kernels

import "fmt"

// Categorical2Sample is models/head's two-logit categorical sampling with given uniform numbers
// (Categorical.SampleUniform over two actions), eight rows at a time on a CPU with AVX-512: row
// i of logits (logits[2i], logits[2i+1]) draws with u[i] an action into acts[i] and, when logp
// is not nil, its log-probability into logp[i], with the bits of the head's Go loop. It works
// the len(acts) rows chunk rows at a time and stops at the first chunk holding a logit ±Inf or
// NaN, writing nothing of it: done is the rows drawn (all of them, or that chunk's first row),
// and the caller draws the rest. ok is false, and nothing written, where it has no such kernel
// (another CPU, a purego build).
func Categorical2Sample(chunk int, logits []float32, u []float64, acts []int32, logp []float32) (done int, ok bool) {
	rows := len(acts)
	if chunk < 1 || len(logits) < 2*rows || len(u) < rows || (logp != nil && len(logp) < rows) {
		panic(fmt.Sprintf("kernels: Categorical2Sample of %d rows in chunks of %d with %d logits, %d uniform numbers and %d log-probabilities",
			rows, chunk, len(logits), len(u), len(logp)))
	}
	if logp != nil {
		logp = logp[:rows]
	}
	return categorical2Sample(chunk, logits[:2*rows], u[:rows], acts, logp)
}

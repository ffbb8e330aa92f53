package kernels

import "fmt"

// Go's math.Exp over a slice, and the two-logit categorical head built on it and math.Log1p
// (models/head), eight values at a time on a CPU with AVX-512: the same IEEE operations in the
// same order as Go's own code (archExp's FMA path, which Go takes on such a CPU, and the pure
// Go Log1p, compiled without fused multiply-adds), so the same bits. Each returns false,
// writing nothing, where it has no such kernel (another CPU, a purego build): the caller then
// runs Go's loop.

// GoExp writes math.Exp(x[i]) into y[i] (y may be x).
func GoExp(x, y []float64) bool {
	if len(y) < len(x) {
		panic(fmt.Sprintf("kernels: GoExp of %d values into %d", len(x), len(y)))
	}
	return goExp(x, y[:len(x)])
}

// Categorical2 is models/head's CategoricalForwardRows for two logits a row (len(acts) rows,
// each action 0 or 1): every row whose logits are finite is written; bad counts the others,
// left for the caller.
func Categorical2(logits []float32, acts []int32, logSoftmax, probs, logp, entropy []float64) (bad int, ok bool) {
	rows := len(acts)
	if len(logits) < 2*rows || len(logSoftmax) < 2*rows || len(probs) < 2*rows || len(logp) < rows || len(entropy) < rows {
		panic(fmt.Sprintf("kernels: Categorical2 of %d rows with %d logits, %d and %d log-softmax and probabilities, %d and %d log-probabilities and entropies",
			rows, len(logits), len(logSoftmax), len(probs), len(logp), len(entropy)))
	}
	for i, a := range acts {
		if a != 0 && a != 1 {
			panic(fmt.Sprintf("kernels: Categorical2: action %d of row %d", a, i))
		}
	}
	return categorical2(logits, acts, logSoftmax, probs, logp, entropy)
}

// Categorical2Backward is models/head's CategoricalBackward for two logits a row, over
// len(acts) rows: ∂loss/∂logits from Categorical2's logSoftmax, probs and entropy and the
// loss's dLogp (per row) and dEnt.
func Categorical2Backward(logSoftmax, probs []float64, acts []int32, entropy []float64, dLogp []float32, dEnt float64, dLogits []float32) bool {
	rows := len(acts)
	if len(logSoftmax) < 2*rows || len(probs) < 2*rows || len(entropy) < rows || len(dLogp) < rows || len(dLogits) < 2*rows {
		panic(fmt.Sprintf("kernels: Categorical2Backward of %d rows with %d, %d, %d, %d and %d values", rows, len(logSoftmax), len(probs), len(entropy), len(dLogp), len(dLogits)))
	}
	return categorical2Backward(logSoftmax, probs, acts, entropy, dLogp, dEnt, dLogits)
}

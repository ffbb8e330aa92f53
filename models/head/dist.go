package head

import (
	"math"

	"github.com/towerrl/towerrl/internal/kernels"
)

// The distribution maths over one row, in float64, for learners and loss ops: log-sum-exp and
// log-softmax; a categorical distribution's log-probability and entropy; a diagonal
// Gaussian's. Each Forward has a Backward giving the gradient of a loss with respect to the
// distribution's parameters from the loss's gradient with respect to the log-probability and
// the entropy, so a fused loss op needs no maths of its own. Rows are float32 as tensors hold
// them; every sum is taken in float64.
//
// The functions allocate nothing and keep no state. The slices' lengths are the caller's to
// match (a row's width; Forward's scratch rows as long as the row): like package
// gonum/floats, a mismatch is a programming error and panics as an out-of-range index does.

// halfLog2Pi is ½·log(2π), the Gaussian log-density's constant per dimension.
const halfLog2Pi = 0.91893853320467274178

// LogSumExp is log Σ_j exp(x_j), worked out as m + log Σ_j exp(x_j − m) with m the row's
// maximum so that no exp overflows. An empty row or one of −Inf only gives −Inf; a row holding
// +Inf gives +Inf; a row holding NaN gives NaN.
func LogSumExp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	if math.IsInf(m, 0) {
		return m
	}
	var sum float64
	for _, v := range x {
		// The maximum's term is exp(0) = 1 exactly: no need to work it out.
		if d := float64(v) - m; d != 0 {
			sum += math.Exp(d)
		} else {
			sum++
		}
	}
	return m + math.Log(sum)
}

// LogSoftmax writes y_j = x_j − LogSumExp(x) into y (len(x) values) and returns the
// log-sum-exp.
func LogSoftmax(y, x []float32) float64 {
	lse := LogSumExp(x)
	y = y[:len(x)]
	for j, v := range x {
		y[j] = float32(float64(v) - lse)
	}
	return lse
}

// LogSoftmaxBackward writes the gradient with respect to x of a loss whose gradient with
// respect to y = LogSoftmax(x) is dy: dx_j = dy_j − softmax(x)_j·Σ_k dy_k, softmax(x)_j being
// exp(y_j). dx may be dy.
func LogSoftmaxBackward(dx, y, dy []float32) {
	var sum float64
	for _, g := range dy[:len(y)] {
		sum += float64(g)
	}
	dx = dx[:len(y)]
	for j, v := range y {
		dx[j] = float32(float64(dy[j]) - math.Exp(float64(v))*sum)
	}
}

// CategoricalForward is the categorical distribution softmax(logits) of one row: it writes the
// log-softmax into logSoftmax and the probabilities into probs (len(logits) values each; the
// scratch CategoricalBackward reads) and returns the log-probability of action a,
// logSoftmax[a], and the entropy H = −Σ_j p_j·log p_j. a must be in [0, len(logits)):
// callers check the actions and name the bad row.
func CategoricalForward(logits []float32, a int, logSoftmax, probs []float64) (logp, entropy float64) {
	if len(logits) == 2 {
		if logp, entropy, ok := categoricalForward2(logits[0], logits[1], a, logSoftmax[:2], probs[:2]); ok {
			return logp, entropy
		}
	}
	lse := LogSumExp(logits)
	logSoftmax, probs = logSoftmax[:len(logits)], probs[:len(logits)]
	for j, v := range logits {
		l := float64(v) - lse
		p := math.Exp(l)
		logSoftmax[j], probs[j] = l, p
		entropy -= p * l
	}
	return logSoftmax[a], entropy
}

// CategoricalForwardRows is CategoricalForward over the rows of logits [rows, n] (row-major;
// logSoftmax and probs likewise, rows = len(acts)): row i's log-probability of acts[i] goes to
// logp[i] and its entropy to entropy[i], with CategoricalForward's bits. Working the rows in
// two passes, every row's log-sum-exp and then every row's softmax, lets the rows'
// exponentials and logarithms overlap instead of each row's waiting on its own (about 1.6
// times as fast over a PPO minibatch of 2 logits). Every action must be in [0, n).
func CategoricalForwardRows(n int, logits []float32, acts []int32, logSoftmax, probs, logp, entropy []float64) {
	rows := len(acts)
	logits, logSoftmax, probs = logits[:rows*n], logSoftmax[:rows*n], probs[:rows*n]
	logp, entropy = logp[:rows], entropy[:rows]
	if n == 2 {
		// Eight rows at a time where the CPU allows (the same bits). A logit ±Inf or NaN (a
		// run gone wrong) leaves its row unwritten there: the loop below then does them all.
		if bad, ok := kernels.Categorical2(logits, acts, logSoftmax, probs, logp, entropy); ok && bad == 0 {
			return
		}
		for i, a := range acts {
			r := 2 * i
			var ok bool
			if logp[i], entropy[i], ok = categoricalForward2(logits[r], logits[r+1], int(a), logSoftmax[r:r+2], probs[r:r+2]); !ok {
				logp[i], entropy[i] = CategoricalForward(logits[r:r+2], int(a), logSoftmax[r:r+2], probs[r:r+2])
			}
		}
		return
	}
	for i := range rows {
		logp[i] = LogSumExp(logits[i*n : (i+1)*n])
	}
	for i, a := range acts {
		lse := logp[i]
		ls, ps := logSoftmax[i*n:(i+1)*n], probs[i*n:(i+1)*n]
		var e float64
		for j, v := range logits[i*n : (i+1)*n] {
			l := float64(v) - lse
			p := math.Exp(l)
			ls[j], ps[j] = l, p
			e -= p * l
		}
		logp[i], entropy[i] = ls[a], e
	}
}

// categoricalForward2 is CategoricalForward over two finite logits l₀, l₁, with one exp and one
// log where the general row takes three and one: with e = exp(−|l₁ − l₀|), the log-sum-exp
// is max(l₀, l₁) + log1p(e) and the probabilities are 1/(1 + e) for the larger logit and
// e/(1 + e) for the other (TestCategoricalForward2: as exact as the general row's, or more).
// ok is false, and nothing written, when a logit is ±Inf or NaN: the general row then says
// what the distribution is.
func categoricalForward2(l0, l1 float32, a int, logSoftmax, probs []float64) (logp, entropy float64, ok bool) {
	x0, x1 := float64(l0), float64(l1)
	if x0-x0 != 0 || x1-x1 != 0 { // ±Inf or NaN
		return 0, 0, false
	}
	e := math.Exp(-math.Abs(x1 - x0))
	lse := max(x0, x1) + math.Log1p(e)
	inv := 1 / (1 + e)
	pMax, pOther := math.Float64bits(inv), math.Float64bits(e*inv)
	// Which logit is larger is a coin toss row by row: choose on bits, not by a branch.
	swap := -(math.Float64bits(x0-x1) >> 63) // all ones when l₁ > l₀ (equal logits give +0)
	p0 := math.Float64frombits(pMax ^ (pMax^pOther)&swap)
	p1 := math.Float64frombits(pOther ^ (pMax^pOther)&swap)
	ls0, ls1 := x0-lse, x1-lse
	logSoftmax[0], logSoftmax[1], probs[0], probs[1] = ls0, ls1, p0, p1
	return logSoftmax[a], -(p0*ls0 + p1*ls1), true
}

// CategoricalBackward writes ∂loss/∂logits of one row into dLogits from the row's
// CategoricalForward (its logSoftmax, probs, action a and entropy) and the loss's gradients
// dLogp = ∂loss/∂logp and dEntropy = ∂loss/∂H:
//
//	∂logp/∂z_j = 1[j=a] − p_j,   ∂H/∂z_j = −p_j·(log p_j + H).
func CategoricalBackward(logSoftmax, probs []float64, a int, entropy, dLogp, dEntropy float64, dLogits []float32) {
	dLogits = dLogits[:len(probs)]
	for j, p := range probs {
		d := -dLogp*p - dEntropy*p*(logSoftmax[j]+entropy)
		if j == a {
			d += dLogp
		}
		dLogits[j] = float32(d)
	}
}

// GaussianLogProb is the log-density of action under the diagonal Gaussian of one row,
// mean and standard deviation exp(logStd) (len(action) values each):
//
//	log p(a) = Σ_j [ −½·z_j² − logStd_j − ½·log(2π) ],  z_j = (a_j − mean_j)·exp(−logStd_j).
func GaussianLogProb(action, mean, logStd []float32) float64 {
	mean, logStd = mean[:len(action)], logStd[:len(action)]
	var lp float64
	for j, a := range action {
		s := float64(logStd[j])
		z := (float64(a) - float64(mean[j])) * math.Exp(-s)
		lp += -0.5*z*z - s
	}
	return lp - float64(len(action))*halfLog2Pi
}

// GaussianEntropy is the entropy of a diagonal Gaussian with log standard deviations logStd:
// Σ_j [ logStd_j + ½ + ½·log(2π) ]. It does not depend on the mean.
func GaussianEntropy(logStd []float32) float64 {
	var e float64
	for _, s := range logStd {
		e += float64(s)
	}
	return e + float64(len(logStd))*(0.5+halfLog2Pi)
}

// GaussianForward is GaussianLogProb and GaussianEntropy of one row together, writing the
// scratch GaussianBackward reads: z_j = (a_j − mean_j)/σ_j and invStd_j = 1/σ_j
// (len(action) values each).
func GaussianForward(action, mean, logStd []float32, z, invStd []float64) (logp, entropy float64) {
	mean, logStd = mean[:len(action)], logStd[:len(action)]
	z, invStd = z[:len(action)], invStd[:len(action)]
	var lp, e float64
	for j, a := range action {
		s := float64(logStd[j])
		inv := math.Exp(-s)
		zj := (float64(a) - float64(mean[j])) * inv
		z[j], invStd[j] = zj, inv
		lp += -0.5*zj*zj - s
		e += s
	}
	d := float64(len(action))
	return lp - d*halfLog2Pi, e + d*(0.5+halfLog2Pi)
}

// GaussianBackward writes ∂loss/∂mean and ∂loss/∂logStd of one row into dMean and dLogStd
// from the row's GaussianForward scratch (z, invStd) and the loss's gradients dLogp =
// ∂loss/∂logp and dEntropy = ∂loss/∂H:
//
//	∂logp/∂mean_j = z_j/σ_j,   ∂logp/∂logStd_j = z_j² − 1,   ∂H/∂logStd_j = 1.
//
// A log_std shared by every row sums its rows' dLogStd.
func GaussianBackward(z, invStd []float64, dLogp, dEntropy float64, dMean, dLogStd []float32) {
	invStd, dMean, dLogStd = invStd[:len(z)], dMean[:len(z)], dLogStd[:len(z)]
	for j, zj := range z {
		dMean[j] = float32(dLogp * zj * invStd[j])
		dLogStd[j] = float32(dLogp*(zj*zj-1) + dEntropy)
	}
}

package head

import "math"

// Constants of expShifted, Cephes' expf: log₂e, ln 2 split in two (ln2Hi has few bits, so
// that n·ln2Hi is exact), and the minimax polynomial for e^r on |r| ≤ ½·ln 2.
const (
	log2e   = 1.44269504088896341
	ln2Hi   = 0.693359375
	ln2Lo   = -2.12194440e-4
	expP0   = 1.9875691500e-4
	expP1   = 1.3981999507e-3
	expP2   = 8.3334519073e-3
	expP3   = 4.1665795894e-2
	expP4   = 1.6666665459e-1
	expP5   = 5.0000001201e-1
	expMinX = -87.33654 // log of float32's smallest normal number, 2⁻¹²⁶
)

// expShifted writes e_k = exp(x_k − m) into e (len(x) values) for a row x whose maximum is
// m, and returns Σ e_k in float64. Each e_k is float32 within 2⁻²² relative of the exact
// value (Cephes' expf: x = n·ln 2 + r, e^r by a degree-7 polynomial on |r| ≤ ½·ln 2, 2ⁿ by
// the exponent bits), e_k is 0 below log(2⁻¹²⁶), as a probability that small is to a sum of
// at least 1, and exactly 1 at the maximum; NaN gives NaN. It is sampling's exp, inline in
// the loop: a call to float64 math.Exp per logit costs more than the rest of a row's work.
func expShifted(e, x []float32, m float32) float64 {
	e = e[:len(x)]
	var sum float64
	for k, v := range x {
		v -= m
		var y float32
		if v >= expMinX || v != v {
			n := int32(v*log2e - 0.5) // round to nearest for v ≤ 0
			f := float32(n)
			r := v - f*ln2Hi - f*ln2Lo
			p := ((((expP0*r+expP1)*r+expP2)*r+expP3)*r+expP4)*r + expP5
			y = (p*r*r + r + 1) * math.Float32frombits(uint32(n+127)<<23)
		}
		e[k] = y
		sum += float64(y)
	}
	return sum
}

// sqrt2Mantissa is the 52 fraction bits of √2: a float64 in [1, 2) whose fraction bits are
// at or above it is at least √2 (to a rounding of √2 itself).
const sqrt2Mantissa = 0x6a09e667f3bcd

// logAtLeast1 is log x for a finite x ≥ 1 (a sum of e_k one of which is 1), within 1e-9:
// x = 2ᵏ·f with f in [√½, √2), log f = 2·atanh(s) = 2s + 2s³/3 + … + 2s⁹/9 with
// s = (f−1)/(f+1), |s| < 0.172. (math.Log costs sampling a row's whole budget.)
func logAtLeast1(x float64) float64 {
	k, s := logReduce(x)
	return logSeries(k, s)
}

// logReduce is logAtLeast1's reduction: x = 2ᵏ·f with f in [√½, √2), and s = (f−1)/(f+1).
// It and logSeries are small enough to inline, so that a loop over rows (logsOnePlus) has
// no call in it.
func logReduce(x float64) (k int, s float64) {
	b := math.Float64bits(x)
	// Halve a mantissa above √2 through its exponent, without a branch: the comparison is a
	// coin toss for sums near 1.5, and a mispredicted branch costs more than the arithmetic.
	up := (b&(1<<52-1)-sqrt2Mantissa)>>63 ^ 1 // 1 when the fraction is at or above √2's
	k = int(b>>52) - 1023 + int(up)
	f := math.Float64frombits(b&(1<<52-1) | (1023-up)<<52) // in [√½, √2)
	return k, (f - 1) / (f + 1)
}

// logSeries is k·ln 2 + log f from logReduce's k and s: 2·atanh(s) to s⁹.
func logSeries(k int, s float64) float64 {
	s2 := s * s
	return float64(k)*math.Ln2 + 2*s*(1+s2*(1.0/3+s2*(1.0/5+s2*(1.0/7+s2*(1.0/9)))))
}

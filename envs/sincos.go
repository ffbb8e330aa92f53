package envs

import "math"

// Coefficients of the sine and cosine polynomials on [-π/4, π/4] (Cephes' sin.c), the ones
// math.Sincos evaluates, so that sincos below rounds as it does.
const (
	sin0 = 1.58962301576546568060e-10
	sin1 = -2.50507477628578072866e-8
	sin2 = 2.75573136213857245213e-6
	sin3 = -1.98412698295895385996e-4
	sin4 = 8.33333333332211858878e-3
	sin5 = -1.66666666666666307295e-1
	cos0 = -1.13585365213876817300e-11
	cos1 = 2.08757008419747316778e-9
	cos2 = -2.75573141792967388112e-7
	cos3 = 2.48015872888517045348e-5
	cos4 = -1.38888888888730564116e-3
	cos5 = 4.16666666666665929218e-2
)

// sincos is math.Sincos(x), bit for bit, with the common case of the classic-control envs
// inline: an angle inside (−π/4, π/4), where math.Sincos reduces nothing (its octant is 0, its
// reduced argument x itself) and evaluates these two polynomials in this order. Outside that
// range, and for ±0, NaN and ±Inf, it calls math.Sincos. The polynomials are odd and even in
// x and rounding is symmetric, so a negative x gives exactly the sign-flipped sine
// math.Sincos makes from |x|. CartPole's pole never leaves ±12° alive (±0.21 rad), so its
// step never takes the call, which was a third of its env's time (docs/benchmarks.md);
// TestSincosBits checks the bits against math.Sincos.
func sincos(x float64) (sin, cos float64) {
	if !sincosInline(x) {
		return math.Sincos(x)
	}
	return sincosPoly(x)
}

// sincosInline reports whether sincos evaluates x's polynomials itself: x inside (−π/4, π/4),
// not ±0 (math.Sincos keeps −0's sign, which the polynomial loses) nor NaN.
func sincosInline(x float64) bool {
	q := x * (4 / math.Pi)
	return q > -1 && q < 1 && x != 0
}

// sincosPoly is the sine and cosine polynomials of sincos, for x where sincosInline holds.
// A hot loop calls it and sincosInline itself, so that both inline there (sincos is over the
// compiler's inlining budget).
func sincosPoly(x float64) (sin, cos float64) {
	zz := x * x
	cos = 1.0 - 0.5*zz + zz*zz*((((((cos0*zz)+cos1)*zz+cos2)*zz+cos3)*zz+cos4)*zz+cos5)
	sin = x + x*zz*((((((sin0*zz)+sin1)*zz+sin2)*zz+sin3)*zz+sin4)*zz+sin5)
	return sin, cos
}

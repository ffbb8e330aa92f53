package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// gomathInputs are values for Exp and Log1p: the edges of their branches (and a few ulps
// around each), the special values, 2²⁰ values uniform over the ranges a policy's head gives
// them, and 2²⁰ random bit patterns (every sign, exponent and NaN).
func gomathInputs(edges []float64, lo, hi float64) []float64 {
	rng := rand.New(rand.NewPCG(5, 6))
	var xs []float64
	for _, e := range append(edges, 0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64) {
		b := math.Float64bits(e)
		for d := uint64(0); d < 4; d++ {
			xs = append(xs, math.Float64frombits(b+d), math.Float64frombits(b-d))
		}
	}
	for range 1 << 20 {
		xs = append(xs, lo+(hi-lo)*rng.Float64())
	}
	for range 1 << 20 {
		xs = append(xs, math.Float64frombits(rng.Uint64()))
	}
	return xs
}

func sameF64(t *testing.T, what string, xs, got []float64, f func(float64) float64) {
	t.Helper()
	for i, x := range xs {
		want := f(x)
		if math.Float64bits(got[i]) != math.Float64bits(want) && !(math.IsNaN(want) && math.IsNaN(got[i])) {
			t.Fatalf("%s(%v = %#x) = %v (%#x), Go gives %v (%#x)", what, x, math.Float64bits(x), got[i], math.Float64bits(got[i]), want, math.Float64bits(want))
		}
	}
}

// haveKernel says whether a float64 kernel ran (ok), failing the test when an AVX-512 CPU has
// none.
func haveKernel(t *testing.T, name string, ok bool) bool {
	t.Helper()
	if !ok && Level() == "avx512" {
		t.Fatalf("%s has no kernel on an AVX-512 CPU", name)
	}
	return ok
}

// TestGoExpBits: GoExp is math.Exp bit for bit, including the subnormal results, the
// underflow to 0 and the overflow to +Inf; on a CPU without the kernel it says so.
func TestGoExpBits(t *testing.T) {
	xs := gomathInputs([]float64{7.09782712893384e+02, -708.39641853226410622, -745.13321910194110842, -744.44007192138126231, 1e-300, -1e-300, 0.5, -0.5, 88.7, -87.3}, -800, 800)
	got := make([]float64, len(xs))
	if !haveKernel(t, "GoExp", GoExp(xs, got)) {
		return
	}
	sameF64(t, "GoExp", xs, got, math.Exp)
	// in place, and a length that is not a multiple of the vector's
	part := append([]float64(nil), xs[:13]...)
	GoExp(part, part)
	sameF64(t, "GoExp in place", xs[:13], part, math.Exp)
}

// TestGoLog1pBits: goLog1p (the categorical head's log1p) is math.Log1p bit for bit over
// every branch: |x| below 2⁻⁵⁴ and 2⁻²⁹, either side of √2−1 and √2/2−1, the mantissa of √2
// after 1 + x, 2⁵³, −1 and below.
func TestGoLog1pBits(t *testing.T) {
	xs := gomathInputs([]float64{0x1p-54, 0x1p-29, 4.142135623730950488017e-01, -2.928932188134524755992e-01, 0x1p53,
		math.Sqrt2 - 1, 1e-10, 1 - 0x1p-52, 2, 3, math.Sqrt2*2 - 1, math.Nextafter(1, 0), 0x1p-20}, 0, 1)
	got := make([]float64, len(xs))
	if !haveKernel(t, "goLog1p", goLog1p(xs, got)) {
		return
	}
	sameF64(t, "goLog1p", xs, got, math.Log1p)
	// the domain of the categorical head: e = exp(−|d|) for every d's magnitude
	rng := rand.New(rand.NewPCG(7, 8))
	es := make([]float64, 1<<20)
	for i := range es {
		es[i] = math.Exp(-math.Abs(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-3))))
	}
	got = make([]float64, len(es))
	goLog1p(es, got)
	sameF64(t, "goLog1p", es, got, math.Log1p)
}

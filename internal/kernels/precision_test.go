package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// roundBF16 is x rounded to bfloat16 as VCVTNEPS2BF16 rounds it: to nearest, ties to even, a
// subnormal read as a signed zero, NaN kept a NaN.
func roundBF16(x float32) float32 {
	u := math.Float32bits(x)
	switch {
	case u&0x7f800000 == 0:
		return math.Float32frombits(u & 0x80000000)
	case x != x:
		return math.Float32frombits(u | 0x00400000&^0xffff)
	}
	u += 0x7fff + (u >> 16 & 1)
	return math.Float32frombits(u &^ 0xffff)
}

func roundedBF16(s []float32) []float32 {
	r := make([]float32, len(s))
	for i, x := range s {
		r[i] = roundBF16(x)
	}
	return r
}

// withPrecision runs f with the products at precision p, and says whether the CPU uses it.
func withPrecision(p Precision, f func()) bool {
	old := GetPrecision()
	defer SetPrecision(old)
	ok := SetPrecision(p)
	f()
	return ok
}

func TestRoundBF16(t *testing.T) {
	for _, c := range []struct{ in, want uint32 }{
		{0x3f800000, 0x3f800000}, // 1
		{0x3f808000, 0x3f800000}, // halfway, to the even 1
		{0x3f818000, 0x3f820000}, // halfway, to the even above
		{0x3f808001, 0x3f810000}, // above halfway
		{0x3f807fff, 0x3f800000}, // below halfway
		{0x00400000, 0x00000000}, // subnormal: zero
		{0x80400000, 0x80000000}, // negative subnormal: −0
		{0x7f7fffff, 0x7f800000}, // the largest float rounds to +Inf
	} {
		if got := math.Float32bits(roundBF16(math.Float32frombits(c.in))); got != c.want {
			t.Errorf("roundBF16(%#08x) = %#08x, want %#08x", c.in, got, c.want)
		}
	}
}

// TestGemmBF16: with BF16 products on a CPU that has them, Gemm and GemmActGrad of every
// transpose, activation, accumulation and bias are the float64 product of the operands rounded
// to bfloat16 (to float32's summing error), and differ from the float32 product by bfloat16's
// rounding: the unit is used. On a CPU without one, they keep Float32's bits.
func TestGemmBF16(t *testing.T) {
	shapes := [][3]int{
		{16, 16, 32}, {17, 33, 65}, {1024, 64, 64}, {64, 64, 1024}, {48, 80, 100}, {33, 17, 40},
		{256, 256, 256}, {40, 23, 300}, {15, 64, 64}, {64, 15, 64}, {64, 64, 31}, {40, 23, 600}, {128, 128, 1000},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	maxOff := 0.0
	for _, s := range shapes {
		m, n, k := s[0], s[1], s[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for ci, act := range []Act{None, Tanh, ReLU} {
					acc, withY := ci == 0 && rng.IntN(2) == 0, ci > 0 && rng.IntN(2) == 0
					pad := rng.IntN(3)
					ar, ac := opShape(ta, m, k)
					br, bc := opShape(tb, k, n)
					lda, ldb, ldc := ac+pad, bc+pad, n+pad
					a, b, c := randSlice(rng, ar*lda), randSlice(rng, br*ldb), randSlice(rng, m*ldc)
					y := make([]float32, m*ldc)
					for i := range y {
						y[i] = float32(math.Tanh(rng.NormFloat64()))
					}
					var bias []float32
					if !withY && rng.IntN(2) == 0 {
						bias = randSlice(rng, n)
					}
					name := fmt.Sprintf("%dx%dx%d ta=%v tb=%v act=%d acc=%v bias=%v y=%v pad=%d",
						m, n, k, ta, tb, act, acc, bias != nil, withY, pad)
					before := append([]float32(nil), c...)
					f32 := append([]float32(nil), c...)
					run := func(out []float32) {
						if withY {
							GemmActGrad(ta, tb, m, n, k, a, lda, b, ldb, out, ldc, y, ldc, act)
						} else {
							Gemm(ta, tb, m, n, k, a, lda, b, ldb, out, ldc, acc, bias, act)
						}
					}
					run(f32)
					used := withPrecision(BF16, func() { run(c) })
					if !used || m < 16 || n < 16 || k < 32 {
						if used != HasBF16() {
							t.Fatalf("SetPrecision(BF16) = %v, HasBF16 %v", used, HasBF16())
						}
						for i := range c {
							if math.Float32bits(c[i]) != math.Float32bits(f32[i]) {
								t.Fatalf("%s: a float32 product: C[%d] = %g, float32 gives %g", name, i, c[i], f32[i])
							}
						}
						continue
					}
					ra, rb := roundedBF16(a), roundedBF16(b)
					refAct := act
					if withY {
						refAct = None
					}
					want := gemmRef(ta, tb, m, n, k, ra, lda, rb, ldb, before, ldc, acc, bias, refAct)
					exact := gemmRef(ta, tb, m, n, k, a, lda, b, ldb, before, ldc, acc, bias, refAct)
					if withY {
						for i := range m {
							for j := range n {
								d := dactRef(float64(y[i*ldc+j]), act)
								want[i*n+j] *= d
								exact[i*n+j] *= d
							}
						}
					}
					checkMatrix(t, name, c, before, want, m, n, ldc, k)
					for i := range m {
						for j := range n {
							maxOff = max(maxOff, math.Abs(float64(c[i*ldc+j])-exact[i*n+j]))
						}
					}
				}
			}
		}
	}
	t.Logf("HasBF16 %v, max off float32 %g", HasBF16(), maxOff)
	if HasBF16() && maxOff < 1e-3 {
		t.Errorf("BF16 products are within %g of the float32 ones: the operands were not rounded", maxOff)
	}
}

func dactRef(y float64, act Act) float64 {
	switch act {
	case Tanh:
		return 1 - y*y
	case ReLU:
		if y > 0 {
			return 1
		}
		return 0
	}
	return 1
}

func TestParsePrecision(t *testing.T) {
	for _, p := range []Precision{Float32, BF16} {
		if q, err := ParsePrecision(p.String()); err != nil || q != p {
			t.Errorf("ParsePrecision(%q) = %v, %v", p.String(), q, err)
		}
	}
	if _, err := ParsePrecision("fp16"); err == nil {
		t.Error("ParsePrecision(fp16) took it")
	}
}

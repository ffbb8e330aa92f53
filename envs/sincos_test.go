package envs

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSincosBits checks sincos, and the inline path CartPole's step takes, bit for bit
// against math.Sincos: random angles inside and around (−π/4, π/4) at every scale down to
// subnormals, the edges of the inline range, and the special values.
func TestSincosBits(t *testing.T) {
	xs := []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1),
		math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 1e-300, 0.2094, -0.2094, 1, -1, 3, 1e6}
	for _, edge := range []float64{math.Pi / 4, -math.Pi / 4} {
		x := edge
		for range 8 { // the float64s either side of π/4, where the inline range ends
			xs = append(xs, x, math.Nextafter(edge, 0)-(x-edge))
			x = math.Nextafter(x, 2*edge)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		xs = append(xs, (2*rng.Float64()-1)*math.Ldexp(1, -rng.IntN(60))) // |x| < 1, log-uniform scale
	}
	inline := 0
	for _, x := range xs {
		ws, wc := math.Sincos(x)
		gs, gc := sincos(x)
		if math.Float64bits(gs) != math.Float64bits(ws) || math.Float64bits(gc) != math.Float64bits(wc) {
			t.Fatalf("sincos(%v) = %v, %v; math.Sincos %v, %v", x, gs, gc, ws, wc)
		}
		if sincosInline(x) {
			inline++
			if ps, pc := sincosPoly(x); math.Float64bits(ps) != math.Float64bits(ws) || math.Float64bits(pc) != math.Float64bits(wc) {
				t.Fatalf("sincosPoly(%v) = %v, %v; math.Sincos %v, %v", x, ps, pc, ws, wc)
			}
		}
	}
	if inline < len(xs)/2 {
		t.Fatalf("only %d of %d angles took the inline path", inline, len(xs))
	}
}

// BenchmarkSincos times math.Sincos against sincos's inline path on CartPole's angles
// (within ±12°), as CartPole's step calls them.
//
//	go test ./envs -run '^$' -bench Sincos -count 10
func BenchmarkSincos(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]float64, 1024)
	for i := range xs {
		xs[i] = (2*rng.Float64() - 1) * 0.21
	}
	var sink float64
	b.Run("math", func(b *testing.B) {
		for b.Loop() {
			for _, x := range xs {
				s, c := math.Sincos(x)
				sink += s * c
			}
		}
	})
	b.Run("inline", func(b *testing.B) {
		for b.Loop() {
			for _, x := range xs {
				s, c := sincosPoly(x)
				if !sincosInline(x) {
					s, c = math.Sincos(x)
				}
				sink += s * c
			}
		}
	})
	if sink == 0 {
		b.Log(sink)
	}
}

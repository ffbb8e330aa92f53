package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkPPOPart runs, one at a time, the products of 1,024 rows of a PPO tower (two parts) on
// CartPole's 64×64 tanh actor (engine/policy's parts): the forward layers (the first with k = 4,
// the hidden one with and without its tanh, the 2-logit head), the gradients of the weights
// (dW) and of the inputs (dx, times the previous tanh's derivative) and a bias's column sum.
func BenchmarkPPOPart(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const m = 1024
	obs := randSlice(rng, m*4)
	w1, b1 := randSlice(rng, 4*64), randSlice(rng, 64)
	w2, b2 := randSlice(rng, 64*64), randSlice(rng, 64)
	w3, b3 := randSlice(rng, 64*2), randSlice(rng, 2)
	h1, h2, out := make([]float32, m*64), make([]float32, m*64), make([]float32, m*2)
	dz3 := randSlice(rng, m*2)
	dz2, dz1 := make([]float32, m*64), make([]float32, m*64)
	dw1, dw2, dw3 := make([]float32, 4*64), make([]float32, 64*64), make([]float32, 64*2)
	db := make([]float32, 64)
	Linear(m, 64, 4, obs, w1, b1, h1, Tanh)
	Linear(m, 64, 64, h1, w2, b2, h2, Tanh)
	cases := []struct {
		name  string
		flops float64
		f     func()
	}{
		{"fwd1_tanh", 2 * m * 64 * 4, func() { Linear(m, 64, 4, obs, w1, b1, h1, Tanh) }},
		{"fwd1_none", 2 * m * 64 * 4, func() { Linear(m, 64, 4, obs, w1, b1, h1, None) }},
		{"fwd2_tanh", 2 * m * 64 * 64, func() { Linear(m, 64, 64, h1, w2, b2, h2, Tanh) }},
		{"fwd2_none", 2 * m * 64 * 64, func() { Linear(m, 64, 64, h1, w2, b2, h2, None) }},
		{"head", 2 * m * 2 * 64, func() { Linear(m, 2, 64, h2, w3, b3, out, None) }},
		{"dW3", 2 * m * 2 * 64, func() { Gemm(true, false, 64, 2, m, h2, 64, dz3, 2, dw3, 2, false, nil, None) }},
		{"dx3", 2 * m * 2 * 64, func() { GemmActGrad(false, true, m, 64, 2, dz3, 2, w3, 2, dz2, 64, h2, 64, Tanh) }},
		{"dW2", 2 * m * 64 * 64, func() { Gemm(true, false, 64, 64, m, h1, 64, dz2, 64, dw2, 64, false, nil, None) }},
		{"dx2", 2 * m * 64 * 64, func() { GemmActGrad(false, true, m, 64, 64, dz2, 64, w2, 64, dz1, 64, h1, 64, Tanh) }},
		{"dW1", 2 * m * 4 * 64, func() { Gemm(true, false, 4, 64, m, obs, 4, dz1, 64, dw1, 64, false, nil, None) }},
		{"colsum", m * 64, func() { ColSum(m, 64, dz1, db, false) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.f()
			}
			b.ReportMetric(c.flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkPPOPartBF16 is BenchmarkPPOPart with BF16 products (float32 on a CPU without
// AMX-BF16; the shapes below 16×16×32 are float32 everywhere).
func BenchmarkPPOPartBF16(b *testing.B) {
	old := GetPrecision()
	SetPrecision(BF16)
	defer SetPrecision(old)
	BenchmarkPPOPart(b)
}

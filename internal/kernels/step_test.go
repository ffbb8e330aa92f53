package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkStepKernels is each kernel call of one PPO step of the CartPole actor (obs 4,
// 64×64 tanh, 2 actions; the critic's are the same with 1 output) at 512 rows and at 128 (the
// demo's minibatch): the forward layers L1-L3, then the gradient's activation derivative,
// products (dX2act: the input gradient with the activation's derivative applied, as the
// policy graphs make it) and bias sums, and the square sums of the whole model's gradient
// norm. Each product reports its GFLOP/s.
func BenchmarkStepKernels(b *testing.B) {
	for _, rows := range []int{512, 128} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchStepKernels(b, rows) })
	}
}

func benchStepKernels(b *testing.B, r int) {
	rng := rand.New(rand.NewPCG(1, 1))
	x4, h, h2, w1, w2, w3 := randSlice(rng, r*4), randSlice(rng, r*64), randSlice(rng, r*64), randSlice(rng, 4*64), randSlice(rng, 64*64), randSlice(rng, 64*2)
	bias := randSlice(rng, 64)
	out := make([]float32, r*64)
	dy := randSlice(rng, r*2)
	dw := make([]float32, 64*64)
	grads, sums := randSlice(rng, 9218), make([]float64, 19) // the CartPole actor-critic's
	cases := []struct {
		name  string
		flops int // multiply-adds ×2
		f     func()
	}{
		{"L1", 2 * r * 64 * 4, func() { Linear(r, 64, 4, x4, w1, bias, out, Tanh) }},
		{"L2", 2 * r * 64 * 64, func() { Linear(r, 64, 64, h, w2, bias, out, Tanh) }},
		{"L3", 2 * r * 2 * 64, func() { Linear(r, 2, 64, h, w3, bias, out, None) }},
		{"L3value", 2 * r * 64, func() { Linear(r, 1, 64, h, w3, bias, out, None) }},
		{"actgrad", 0, func() { ActGrad(Tanh, h, h2, out) }},
		{"dW3", 2 * r * 2 * 64, func() { Gemm(true, false, 64, 2, r, h, 64, dy, 2, dw, 2, false, nil, None) }},
		{"dX3", 2 * r * 2 * 64, func() { Gemm(false, true, r, 64, 2, dy, 2, w3, 2, out, 64, false, nil, None) }},
		{"colsum", 0, func() { ColSum(r, 64, h, dw, false) }},
		{"dW2", 2 * r * 64 * 64, func() { Gemm(true, false, 64, 64, r, h, 64, h2, 64, dw, 64, false, nil, None) }},
		{"dX2", 2 * r * 64 * 64, func() { Gemm(false, true, r, 64, 64, h2, 64, w2, 64, out, 64, false, nil, None) }},
		{"dX2act", 2 * r * 64 * 64, func() { GemmActGrad(false, true, r, 64, 64, h2, 64, w2, 64, out, 64, h, 64, Tanh) }},
		{"dW1", 2 * r * 4 * 64, func() { Gemm(true, false, 4, 64, r, x4, 4, h2, 64, dw, 64, false, nil, None) }},
		{"squaresums", 0, func() { SquareSums(grads, 512, sums) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.f()
			}
			if c.flops > 0 {
				b.ReportMetric(float64(c.flops)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			}
		})
	}
}

package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkStepKernels is each kernel call of one PPO step of the CartPole actor (obs 4,
// 64×64 tanh, 2 actions; the critic's are the same with 1 output) at minibatch 512: the
// forward layers L1-L3, then the gradient's activation derivative, products and bias sums.
func BenchmarkStepKernels(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	x4, h, h2, w1, w2, w3 := randSlice(rng, 512*4), randSlice(rng, 512*64), randSlice(rng, 512*64), randSlice(rng, 4*64), randSlice(rng, 64*64), randSlice(rng, 64*2)
	bias := randSlice(rng, 64)
	out := make([]float32, 512*64)
	dy := randSlice(rng, 512*2)
	dw := make([]float32, 64*64)
	cases := []struct {
		name string
		f    func()
	}{
		{"L1", func() { Linear(512, 64, 4, x4, w1, bias, out, Tanh) }},
		{"L2", func() { Linear(512, 64, 64, h, w2, bias, out, Tanh) }},
		{"L3", func() { Linear(512, 2, 64, h, w3, bias, out, None) }},
		{"L3value", func() { Linear(512, 1, 64, h, w3, bias, out, None) }},
		{"actgrad", func() { ActGrad(Tanh, h, h2, out) }},
		{"dW3", func() { Gemm(true, false, 64, 2, 512, h, 64, dy, 2, dw, 2, false, nil, None) }},
		{"dX3", func() { Gemm(false, true, 512, 64, 2, dy, 2, w3, 2, out, 64, false, nil, None) }},
		{"colsum", func() { ColSum(512, 64, h, dw, false) }},
		{"dW2", func() { Gemm(true, false, 64, 64, 512, h, 64, h2, 64, dw, 64, false, nil, None) }},
		{"dX2", func() { Gemm(false, true, 512, 64, 64, h2, 64, w2, 64, out, 64, false, nil, None) }},
		{"dW1", func() { Gemm(true, false, 4, 64, 512, x4, 4, h2, 64, dw, 64, false, nil, None) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.f()
			}
		})
	}
}

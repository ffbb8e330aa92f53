package mlp

import (
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
)

// BenchmarkNet is a SAC critic at HalfCheetah's sizes (23 inputs, 256×256 ReLU, 1 output) on
// 256 rows: Forward, Backward with parameter gradients, and Backward to the input only, each
// with its arithmetic rate (multiply-adds × 2 per second), to see where an update's time goes.
func BenchmarkNet(b *testing.B) {
	n, err := New(23, []int{256, 256}, 1, kernels.ReLU)
	if err != nil {
		b.Fatal(err)
	}
	const rows = 256
	rng := rand.New(rand.NewPCG(1, 1))
	p := make([]float32, n.NumParams())
	n.Init(p, rng)
	w := n.NewWork(rows)
	for i := range w.In() {
		w.In()[i] = float32(rng.NormFloat64())
	}
	for i := range w.DOut() {
		w.DOut()[i] = float32(rng.NormFloat64())
	}
	n.Forward(p, w)
	g, dx := make([]float32, len(p)), make([]float32, rows*23)
	macs := float64(rows * (23*256 + 256*256 + 256)) // one pass over every weight
	for _, c := range []struct {
		name string
		run  func()
		flop float64
	}{
		{"forward", func() { n.Forward(p, w) }, 2 * macs},
		// dW of every layer, dX of the two upper ones.
		{"backward", func() { n.Backward(p, w, g, nil) }, 2 * (macs + rows*(256*256+256))},
		{"backward-input", func() { n.Backward(p, w, nil, dx) }, 2 * macs},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.run()
			}
			b.ReportMetric(c.flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

package models

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
)

// TestFusedMatchesGorgonia: the fused Linear and LogSoftmax ops give the forward outputs, loss
// and parameter gradients of the same graphs built from gorgonia's own ops (matrix product,
// broadcast add, tanh/ReLU, log softmax), at batch sizes that take the kernels' edge paths
// and their vector paths.
func TestFusedMatchesGorgonia(t *testing.T) {
	for ai, a := range arches[:4] {
		for _, batch := range []int{1, 7, 512} {
			params := newParams(t, a.cfg, uint64(ai))
			perturb(params, rand.New(rand.NewPCG(uint64(ai), 5)))
			fused, ref := newTrainerWith(t, params, batch, false), newTrainerWith(t, params, batch, true)
			fused.fill(t, 9, 0)
			ref.fill(t, 9, 0)
			if lf, lr := fused.lossValue(t), ref.lossValue(t); math.Abs(lf-lr) > 1e-5*math.Max(1, math.Abs(lr)) {
				t.Errorf("%s batch %d: loss %g, gorgonia's ops give %g", a.name, batch, lf, lr)
			}
			for _, pair := range [][2]*G.Node{{fused.pol.Logits, ref.pol.Logits}, {fused.pol.Mean, ref.pol.Mean}, {fused.pol.Value, ref.pol.Value}} {
				if pair[0] == nil {
					continue
				}
				got, err := fused.pol.Read(pair[0])
				if err != nil {
					t.Fatal(err)
				}
				want, err := ref.pol.Read(pair[1])
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbs(got, want); d > 1e-5 {
					t.Errorf("%s batch %d: %s differs from gorgonia's ops by %.3g", a.name, batch, pair[1].Name(), d)
				}
			}
			gf, gr := make([]float32, params.Size()), make([]float32, params.Size())
			if err := fused.pol.Grads(gf); err != nil {
				t.Fatal(err)
			}
			if err := ref.pol.Grads(gr); err != nil {
				t.Fatal(err)
			}
			for i := range params.Len() {
				lo, hi := params.Offset(i), params.Offset(i+1)
				scale := 0.0
				for _, g := range gr[lo:hi] {
					scale = math.Max(scale, math.Abs(float64(g)))
				}
				if d := maxAbs(gf[lo:hi], gr[lo:hi]); d > 1e-5*math.Max(scale, 1e-2) {
					t.Errorf("%s batch %d: gradient of %s differs from gorgonia's ops by %.3g (largest %.3g)",
						a.name, batch, params.names[i], d, scale)
				}
			}
		}
	}
}

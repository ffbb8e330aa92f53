package envs_test

import (
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

// randomActions returns k batches of uniformly random valid actions for n
// envs of spec, drawn before any timing starts.
func randomActions(spec envs.Spec, n, k int, seed uint64) []envs.Actions {
	rng := rand.New(rand.NewPCG(seed, 0x1234))
	out := make([]envs.Actions, k)
	for j := range out {
		switch sp := spec.Action.(type) {
		case envs.Discrete:
			a := make([]int, n)
			for i := range a {
				a[i] = rng.IntN(sp.N)
			}
			out[j].Discrete = a
		case envs.Box:
			a := make([]float32, n*sp.Dim())
			for i := range a {
				d := i % sp.Dim()
				lo, hi := float64(sp.Low[d]), float64(sp.High[d])
				a[i] = float32(lo + (hi-lo)*rng.Float64())
			}
			out[j].Box = a
		}
	}
	return out
}

// BenchmarkVecEnvStep steps 1024 envs of each registered environment with
// uniformly random actions (64 pre-drawn batches, cycled) and reports env
// steps per second on one goroutine.
func BenchmarkVecEnvStep(b *testing.B) {
	const n = 1024
	for _, id := range envs.IDs() {
		b.Run(id, func(b *testing.B) {
			v, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			if err := v.Reset(); err != nil {
				b.Fatal(err)
			}
			acts := randomActions(v.Spec(), n, 64, 2)
			b.ReportAllocs()
			j := 0
			for b.Loop() {
				if err := v.Step(acts[j&63]); err != nil {
					b.Fatal(err)
				}
				j++
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric(b.Elapsed().Seconds()*1e9/(float64(n)*float64(b.N)), "ns/envstep")
		})
	}
}

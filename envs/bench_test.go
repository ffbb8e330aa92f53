package envs_test

import (
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

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
			acts := envtest.RandomActions(v.Spec().Action, n, 64, 2)
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

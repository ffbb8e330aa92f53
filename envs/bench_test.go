package envs_test

import (
	"fmt"
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

// BenchmarkVecEnvStep steps 1024 envs of each registered environment with
// uniformly random actions (64 pre-drawn batches, cycled) and reports env
// steps per second on one goroutine, then (threads=2, for -cpu 2) in two shards.
func BenchmarkVecEnvStep(b *testing.B) {
	for _, threads := range []int{1, 2} {
		for _, id := range envs.IDs() {
			name := id
			if threads > 1 {
				name = fmt.Sprintf("%s/threads=%d", id, threads)
			}
			b.Run(name, func(b *testing.B) { benchStep(b, id, threads) })
		}
	}
}

func benchStep(b *testing.B, id string, threads int) {
	const n = 1024
	v, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 1, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
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
}

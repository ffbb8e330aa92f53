//go:build mujoco && cgo

package mujoco

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

// BenchmarkStep steps HalfCheetah-v4 and Humanoid-v4 with random actions through the VecEnv
// (16 envs, on 1 and 2 env threads) and, in the same run, the bare C loop of mj_step on the
// same model with the same number of threads (frame_skip mj_steps per env step, a fresh
// mjData per thread). It reports both in env steps/s and the VecEnv's share of the bare loop.
func BenchmarkStep(b *testing.B) {
	for _, id := range []string{"HalfCheetah-v4", "Humanoid-v4"} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", id, threads), func(b *testing.B) {
				const n = 16
				v, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 1, Threads: threads})
				if err != nil {
					b.Fatal(err)
				}
				defer v.Close()
				spec := v.Spec()
				acts := envtest.RandomActions(spec.Action, n, 64, 3)
				if err := v.Reset(); err != nil {
					b.Fatal(err)
				}
				vecTime, bareTime := time.Duration(0), time.Duration(0)
				steps := 0
				for b.Loop() {
					start := time.Now()
					for k := range 20 {
						if err := v.Step(acts[k%len(acts)]); err != nil {
							b.Fatal(err)
						}
					}
					vecTime += time.Since(start)
					bareTime += bareLoop(b, id, threads, 20*n/threads)
					steps += 20 * n
				}
				vec := float64(steps) / vecTime.Seconds()
				bare := float64(steps) / bareTime.Seconds()
				b.ReportMetric(vec, "steps/s")
				b.ReportMetric(bare, "bare-steps/s")
				b.ReportMetric(100*vec/bare, "%of-bare")
			})
		}
	}
}

// bareLoop times steps env steps (frame_skip mj_steps each) of the bare C loop on each of
// threads goroutines at once, each on its own mjData with random controls in ctrlrange.
func bareLoop(b *testing.B, id string, threads, steps int) time.Duration {
	df := defs(id)
	md, err := df.model()
	if err != nil {
		b.Fatal(err)
	}
	ds := make([]*data, threads)
	for i := range ds {
		d, err := newData(md)
		if err != nil {
			b.Fatal(err)
		}
		defer d.free()
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		df.task.resetState(md, rng, make([]float64, md.nq), make([]float64, md.nv))
		for j := range d.ctrl {
			lo, hi := md.ctrlRange[2*j], md.ctrlRange[2*j+1]
			d.ctrl[j] = lo + (hi-lo)*rng.Float64()
		}
		ds[i] = d
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, d := range ds {
		wg.Go(func() { md.bareSteps(d, steps*df.frameSkip) })
	}
	wg.Wait()
	return time.Since(start)
}

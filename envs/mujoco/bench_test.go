//go:build mujoco && cgo

package mujoco

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

// BenchmarkStep steps HalfCheetah-v4 and Humanoid-v4 with random actions through the VecEnv
// (16 envs on 1 and 2 env threads) and, in the same run, the bare C loop of mj_step on the same
// model doing the same physics: a mirror of each env, set to the VecEnv's state (qpos, qvel)
// before each round of 20 steps, then stepped frame_skip times (and mj_rnePostConstraint where
// the env calls it) with the same controls by one C call per shard per step, and reset
// (mj_resetData, the state, mj_forward) where the VecEnv's env was reset, to the state that env
// was reset to. (The mirror is not bit for bit the VecEnv: mj_forward normalises a free joint's
// quaternion in qpos, which is not idempotent in floating point, and the solver's warm start is
// not carried over; over a round the states agree to many digits, so the physics costs the
// same.) It reports both in env steps/s and the VecEnv's share of the bare loop.
func BenchmarkStep(b *testing.B) {
	for _, id := range []string{"HalfCheetah-v4", "Humanoid-v4"} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", id, threads), func(b *testing.B) {
				benchStep(b, id, threads)
			})
		}
	}
}

func benchStep(b *testing.B, id string, threads int) {
	const n, rounds = 16, 20
	df := defs(id)
	md, err := df.model()
	if err != nil {
		b.Fatal(err)
	}
	v, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 1, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	ph, _ := envs.PhysicsOf(v)
	acts := envtest.RandomActions(v.Spec().Action, n, 64, 3)
	if err := v.Reset(); err != nil {
		b.Fatal(err)
	}
	// The mirror: one mjData per env, in the VecEnv's shards.
	mirror := make([]*data, n)
	for i := range mirror {
		if mirror[i], err = newData(md); err != nil {
			b.Fatal(err)
		}
		defer mirror[i].free()
	}
	k := min(threads, n)
	shards := make([]dataPtrs, k)
	for s := range k {
		shards[s] = newDataPtrs(mirror[s*n/k : (s+1)*n/k])
		defer shards[s].free()
	}
	type reset struct {
		env        int
		qpos, qvel []float64
	}
	resets := make([][]reset, rounds) // per step of a round: the envs the VecEnv reset
	qpos, qvel := make([]float64, md.nq), make([]float64, md.nv)
	var vecTime, bareTime time.Duration
	steps, j := 0, 0
	for b.Loop() {
		for i, d := range mirror {
			ph.State(i, qpos, qvel)
			md.setState(d, qpos, qvel)
		}
		j0 := j
		for r := range rounds {
			start := time.Now()
			if err := v.Step(acts[j%len(acts)]); err != nil {
				b.Fatal(err)
			}
			vecTime += time.Since(start)
			j++
			resets[r] = resets[r][:0]
			buf := v.Buffers()
			for i := range n {
				if buf.Terminated[i] == 1 || buf.Truncated[i] == 1 {
					rs := reset{env: i, qpos: make([]float64, md.nq), qvel: make([]float64, md.nv)}
					ph.State(i, rs.qpos, rs.qvel)
					resets[r] = append(resets[r], rs)
				}
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		for s := range k {
			lo, hi := s*n/k, (s+1)*n/k
			wg.Go(func() {
				for r := range rounds {
					a := acts[(j0+r)%len(acts)].Box
					for i := lo; i < hi; i++ {
						for c := range md.nu {
							mirror[i].ctrl[c] = float64(a[i*md.nu+c])
						}
					}
					md.step(shards[s], 0, hi-lo, df.frameSkip, df.rne)
					for _, rs := range resets[r] {
						if lo <= rs.env && rs.env < hi {
							md.reset(mirror[rs.env], rs.qpos, rs.qvel)
						}
					}
				}
			})
		}
		wg.Wait()
		bareTime += time.Since(start)
		steps += rounds * n
	}
	vec := float64(steps) / vecTime.Seconds()
	bare := float64(steps) / bareTime.Seconds()
	b.ReportMetric(vec, "steps/s")
	b.ReportMetric(bare, "bare-steps/s")
	b.ReportMetric(100*vec/bare, "%of-bare")
}

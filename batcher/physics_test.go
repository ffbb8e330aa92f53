//go:build mujoco && cgo

package batcher

import (
	"context"
	"errors"
	"testing"

	_ "github.com/towerrl/towerrl/envs/mujoco"
)

// A MuJoCo env's own memory (its mjData, about 3.3 MB) counts in the batcher's memory check:
// 4096 Humanoid envs do not fit in 8 GiB, whatever their rollouts.
func TestMemoryCountsPhysics(t *testing.T) {
	mem := Memory{Available: 8 << 30, Source: "test"}
	if err := CheckMemory(Config{Env: envSpec("Humanoid-v4"), Workers: 1, EnvsPerWorker: 4096, Steps: 1}, false, mem); !errors.Is(err, ErrMemory) {
		t.Fatalf("4096 Humanoid envs in 8 GiB: %v, want ErrMemory", err)
	}
	if err := CheckMemory(Config{Env: envSpec("Humanoid-v4"), Workers: 2, EnvsPerWorker: 64, Steps: 128}, false, mem); err != nil {
		t.Fatalf("128 Humanoid envs in 8 GiB: %v", err)
	}
}

// RecordEpisode keeps a MuJoCo env's qpos and qvel before each step (what envs/mujoco's camera
// films): HalfCheetah's observation is qpos without the x position, then qvel, so each row of
// the record gives the observation recorded at that step.
func TestRecordEpisodePhysics(t *testing.T) {
	tr, err := RecordEpisode(context.Background(), EvalConfig{Env: envSpec("HalfCheetah-v4"), Seed: 3, MaxEpisodeSteps: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := tr.Length()
	if n != 20 || tr.NQ != 9 || tr.NV != 9 || len(tr.QPos) != n*9 || len(tr.QVel) != n*9 {
		t.Fatalf("%d steps, nq %d, nv %d, %d qpos and %d qvel values", n, tr.NQ, tr.NV, len(tr.QPos), len(tr.QVel))
	}
	for s := range n {
		want := append(append([]float64(nil), tr.QPos[s*9+1:(s+1)*9]...), tr.QVel[s*9:(s+1)*9]...)
		for j, w := range want {
			if got := tr.Obs[s*17+j]; got != float32(w) {
				t.Fatalf("step %d: observation %d is %v, the recorded state gives %v", s, j, got, float32(w))
			}
		}
	}
}

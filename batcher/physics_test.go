//go:build mujoco && cgo

package batcher

import (
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

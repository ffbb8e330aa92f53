package engine

// The test envs of this package's tests, registered in every build (the race build too, whose
// tests use them though it leaves out the learning runs).

import (
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/envs"
)

// reach2x3 is a test env whose actions are a 2×3 Box: each episode draws a target in
// [-1, 1]^(2×3), shows it as the observation, and pays -mean((a - target)²) per step over its 10
// steps, element by element in row-major order. A policy that acts as the identity scores 0;
// one that acts 0 scores -1/3 a step in expectation.
const reach2x3 = "test-Reach2x3-v0"

func init() {
	envs.Register(envs.Spec{ID: reach2x3, Observation: envs.NewBox(-1, 1, 6), Action: envs.NewBox(-1, 1, 2, 3), MaxEpisodeSteps: 10},
		func(n int) envs.Dynamics { return &reachDyn{target: make([]float32, 6*n)} })
}

type reachDyn struct{ target []float32 }

func (d *reachDyn) Reset(i int, rng *rand.Rand, obs []float32) {
	for k := range 6 {
		d.target[i*6+k] = float32(2*rng.Float64() - 1)
	}
	copy(obs, d.target[i*6:(i+1)*6])
}

func (d *reachDyn) SaveState(dst []float64) []float64 {
	for _, x := range d.target {
		dst = append(dst, float64(x))
	}
	return dst
}

func (d *reachDyn) LoadState(src []float64) error {
	if len(src) != len(d.target) {
		return fmt.Errorf("%d values for %d", len(src), len(d.target))
	}
	for i, x := range src {
		d.target[i] = float32(x)
	}
	return nil
}

func (d *reachDyn) Step(a envs.Actions, obs, rewards, terminated []float32) {
	for i := range rewards {
		var se float32
		for k := range 6 {
			x := min(max(a.Box[i*6+k], -1), 1)
			e := x - d.target[i*6+k]
			se += e * e
		}
		rewards[i], terminated[i] = -se/6, 0
	}
	copy(obs, d.target)
}

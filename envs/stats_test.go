package envs_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

// episodeLengths runs n envs of id under a uniformly random policy until
// at least episodes episodes have ended, and returns their lengths and
// whether each ended by termination.
func episodeLengths(t *testing.T, id string, n, episodes int, seed uint64) (lengths []int, terminated []bool) {
	t.Helper()
	v, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	var a envs.Actions
	switch sp := v.Spec().Action.(type) {
	case envs.Discrete:
		a.Discrete = make([]int, n)
	case envs.Box:
		a.Box = make([]float32, n*sp.Dim())
	}
	b := v.Buffers()
	// Every env contributes its first quota episodes, no more: stopping at
	// a global count instead would drop the episodes still running, which
	// are the long ones, and bias the mean down.
	quota := (episodes + n - 1) / n
	elapsed, done := make([]int, n), make([]int, n)
	for len(lengths) < quota*n {
		switch sp := v.Spec().Action.(type) {
		case envs.Discrete:
			for i := range a.Discrete {
				a.Discrete[i] = rng.IntN(sp.N)
			}
		case envs.Box:
			for i := range a.Box {
				lo, hi := float64(sp.Low[i%sp.Dim()]), float64(sp.High[i%sp.Dim()])
				a.Box[i] = float32(lo + (hi-lo)*rng.Float64())
			}
		}
		if err := v.Step(a); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			elapsed[i]++
			if b.Terminated[i] == 1 || b.Truncated[i] == 1 {
				if done[i] < quota {
					lengths = append(lengths, elapsed[i])
					terminated = append(terminated, b.Terminated[i] == 1)
					done[i]++
				}
				elapsed[i] = 0
			}
		}
	}
	return lengths, terminated
}

// TestCartPoleRandomEpisodeLength checks the mean episode length of
// CartPole-v1 under a uniformly random policy against Gymnasium's ≈ 22.3.
//
// Tolerance: 0.25. With 200,000 episodes (standard deviation of one length
// ≈ 12) the standard error of our mean is ≈ 0.027, so sampling noise alone
// stays within ±0.1 (about 4 standard errors); the rest allows for the
// reference itself being quoted to one decimal (22.3 means [22.25, 22.35]).
// (2,000,000 episodes of this implementation give 22.256 ± 0.008.) A physics
// slip moves the mean by far more: semi-implicit Euler instead of Euler alone
// gives 20.76.
func TestCartPoleRandomEpisodeLength(t *testing.T) {
	episodes := 200_000
	tolerance := 0.25
	if testing.Short() {
		episodes = 20_000 // standard error ≈ 0.085: keep ±4 of them
		tolerance = 0.4
	}
	lengths, _ := episodeLengths(t, "CartPole-v1", 256, episodes, 1)
	var sum, sq float64
	for _, l := range lengths {
		sum += float64(l)
		sq += float64(l) * float64(l)
	}
	k := float64(len(lengths))
	mean := sum / k
	sd := math.Sqrt(sq/k - mean*mean)
	t.Logf("CartPole-v1 random policy: %d episodes, mean length %.3f, sd %.2f, standard error %.3f",
		len(lengths), mean, sd, sd/math.Sqrt(k))
	if math.Abs(mean-22.3) > tolerance {
		t.Errorf("mean episode length %.3f, want 22.3 ± %v", mean, tolerance)
	}
}

// TestPendulumEpisodeLength checks that every Pendulum-v1 episode lasts
// exactly 200 steps and ends by truncation, never termination.
func TestPendulumEpisodeLength(t *testing.T) {
	lengths, terminated := episodeLengths(t, "Pendulum-v1", 64, 640, 2)
	for i, l := range lengths {
		if l != 200 || terminated[i] {
			t.Fatalf("episode %d: length %d, terminated %v; want 200 steps, truncated", i, l, terminated[i])
		}
	}
}

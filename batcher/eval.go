package batcher

import (
	"context"
	"fmt"
	"math"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
)

// EvalConfig configures Evaluate. The zero value needs Env and Episodes.
type EvalConfig struct {
	Env      envs.Spec // the environment, resolved where the tool starts (required)
	Episodes int       // whole episodes to run (required, >= 1)
	// Envs is the number of envs run side by side. Default: min(Episodes, 16).
	Envs int
	Seed uint64
	// Deterministic takes the most probable action (a Gaussian's mean) instead of sampling.
	Deterministic   bool
	MaxEpisodeSteps int
}

// EvalResult lists the episodes in env order, then in the order each env finished them.
type EvalResult struct {
	Returns    []float64
	Lengths    []int
	ReturnMean float64
	ReturnStd  float64 // population standard deviation
	LengthMean float64
	Device     string // where the policy ran (Batcher.Device)
}

// Evaluate runs whole episodes with the policy (nil: uniformly random actions). Env i runs
// ⌊(Episodes+i)/Envs⌋ episodes, fixed in advance as Stable-Baselines3's evaluate_policy does,
// so short episodes are not over-represented.
func Evaluate(ctx context.Context, cfg EvalConfig, policy *bind.Policy) (EvalResult, error) {
	if cfg.Episodes < 1 {
		return EvalResult{}, fmt.Errorf("%w: Episodes = %d, want >= 1", ErrConfig, cfg.Episodes)
	}
	if cfg.Envs == 0 {
		cfg.Envs = min(cfg.Episodes, 16)
	}
	if cfg.Envs < 0 {
		return EvalResult{}, fmt.Errorf("%w: Envs = %d, want >= 1", ErrConfig, cfg.Envs)
	}
	if err := CheckEvalMemory(cfg, AvailableMemory()); err != nil {
		return EvalResult{}, err
	}
	const chunk = evalSteps
	b, err := New(ctx, Config{Env: cfg.Env, Workers: 1, EnvsPerWorker: cfg.Envs, Steps: chunk, Seed: cfg.Seed,
		Deterministic: cfg.Deterministic, MaxEpisodeSteps: cfg.MaxEpisodeSteps}, policy)
	if err != nil {
		return EvalResult{}, err
	}
	defer b.Close()
	device := b.Device()
	n := cfg.Envs
	target := make([]int, n)
	returns := make([][]float64, n)
	lengths := make([][]int, n)
	left := 0
	for i := range n {
		target[i] = (cfg.Episodes + i) / n
		left += target[i]
	}
	for left > 0 {
		r, err := b.Collect(ctx, chunk)
		if err != nil {
			return EvalResult{}, err
		}
		for _, e := range r.Episodes {
			if len(returns[e.Env]) < target[e.Env] {
				returns[e.Env] = append(returns[e.Env], e.Return)
				lengths[e.Env] = append(lengths[e.Env], e.Length)
				left--
			}
		}
	}
	res := EvalResult{Device: device}
	for i := range n {
		res.Returns = append(res.Returns, returns[i]...)
		res.Lengths = append(res.Lengths, lengths[i]...)
	}
	var ret, length Stats
	for i, r := range res.Returns {
		ret.Add(r)
		length.Add(float64(res.Lengths[i]))
	}
	res.ReturnMean, res.ReturnStd, res.LengthMean = ret.Mean(), ret.Std(), length.Mean()
	return res, nil
}

// Stats accumulates the mean and population standard deviation of a stream of values
// (Welford's algorithm) without keeping them. The zero value is empty.
type Stats struct {
	N    int
	mean float64
	m2   float64
}

// Add adds x.
func (s *Stats) Add(x float64) {
	s.N++
	d := x - s.mean
	s.mean += d / float64(s.N)
	s.m2 += d * (x - s.mean)
}

// Mean is the mean of the values added, 0 when none.
func (s *Stats) Mean() float64 { return s.mean }

// Std is their population standard deviation, 0 when none.
func (s *Stats) Std() float64 {
	if s.N == 0 {
		return 0
	}
	return math.Sqrt(s.m2 / float64(s.N))
}

package vtrace

import (
	"errors"
	"fmt"
	"math"
)

// ErrInput is wrapped by every error about an invalid [Input] or output buffer.
var ErrInput = errors.New("vtrace: invalid input")

// Input is a time-major rollout of T steps × N envs (the row of env i at step t is t·N+i), the
// two policies' view of it, and the V-trace parameters. Every per-step buffer holds exactly T·N
// values and LastValues exactly N. All values must be finite, except that TargetLogProbs may
// hold −Inf (an action the target policy cannot take: ρ = 0).
type Input struct {
	T, N int // steps per env, envs; both positive

	BehaviourLogProbs []float32 // [T×N] log μ(a_t|x_t), from the policy that collected the rollout
	TargetLogProbs    []float32 // [T×N] log π(a_t|x_t), under the policy being learned
	Rewards           []float32 // [T×N] r_t
	Values            []float32 // [T×N] V(x_t) under the target policy's critic
	Terminated        []float32 // [T×N] non-zero where the episode ended by the env's rule
	Truncated         []float32 // [T×N] non-zero where the episode hit its time limit
	// FinalValues [T×N] holds V of the final observation where an episode was truncated and
	// not terminated; it is read (and checked) only there.
	FinalValues []float32
	LastValues  []float32 // [N] V of the observation after the last step

	Gamma  float64 // discount γ, in [0, 1]
	Lambda float64 // IMPALA's λ multiplying c_t, in [0, 1]; 1 is the paper's plain V-trace
	// RhoBar (ρ̄) clips ρ in δ_t; CBar (c̄) clips ρ in c_t. Both finite and positive; IMPALA
	// uses 1 for both.
	RhoBar, CBar float64
	// RhoBarPG (ρ̄_pg) clips ρ in the policy-gradient advantage; finite and positive, or 0 for
	// RhoBar.
	RhoBarPG float64
}

// Compute writes the V-trace targets v_s into vs and the policy-gradient advantages
// min(ρ̄_pg, ρ_s)·(r_s + γ·v_{s+1} − V(x_s)) into adv, both [T×N] and not overlapping any input.
// It checks the whole input first and writes nothing when it returns an error.
func Compute(in Input, vs, adv []float32) error {
	rhoPG, err := in.check(vs, adv)
	if err != nil {
		return err
	}
	t, n := in.T, in.N
	gamma, lambda := in.Gamma, in.Lambda
	for i := range n {
		// acc is v_{s+1} − V(x_{s+1}) within the episode, 0 across an episode end;
		// next is V(x_{s+1}) and nextVS is v_{s+1} as δ_s and A_s see them.
		acc, next, nextVS := 0.0, float64(in.LastValues[i]), float64(in.LastValues[i])
		for s := t - 1; s >= 0; s-- {
			k := s*n + i
			switch {
			case in.Terminated[k] != 0:
				acc, next, nextVS = 0, 0, 0
			case in.Truncated[k] != 0:
				acc, next = 0, float64(in.FinalValues[k])
				nextVS = next
			}
			rho := math.Exp(float64(in.TargetLogProbs[k]) - float64(in.BehaviourLogProbs[k]))
			r, v := float64(in.Rewards[k]), float64(in.Values[k])
			delta := min(in.RhoBar, rho) * (r + gamma*next - v)
			acc = delta + gamma*lambda*min(in.CBar, rho)*acc
			vsK := v + acc
			vs[k] = float32(vsK)
			adv[k] = float32(min(rhoPG, rho) * (r + gamma*nextVS - v))
			next, nextVS = v, vsK
		}
	}
	return nil
}

// check validates in and the outputs and returns ρ̄_pg with its default filled.
func (in *Input) check(vs, adv []float32) (float64, error) {
	t, n := in.T, in.N
	if t <= 0 || n <= 0 {
		return 0, fmt.Errorf("%w: T = %d and N = %d; both must be positive", ErrInput, t, n)
	}
	if t > math.MaxInt/n {
		return 0, fmt.Errorf("%w: T·N = %d×%d overflows int", ErrInput, t, n)
	}
	rows := t * n
	for _, b := range [...]struct {
		name string
		s    []float32
	}{
		{"BehaviourLogProbs", in.BehaviourLogProbs}, {"TargetLogProbs", in.TargetLogProbs},
		{"Rewards", in.Rewards}, {"Values", in.Values}, {"Terminated", in.Terminated},
		{"Truncated", in.Truncated}, {"FinalValues", in.FinalValues}, {"vs", vs}, {"adv", adv},
	} {
		if len(b.s) != rows {
			return 0, fmt.Errorf("%w: %s holds %d values for T×N = %d×%d = %d steps", ErrInput, b.name, len(b.s), t, n, rows)
		}
	}
	if len(in.LastValues) != n {
		return 0, fmt.Errorf("%w: LastValues holds %d values for N = %d envs", ErrInput, len(in.LastValues), n)
	}
	for _, p := range [...]struct {
		name   string
		v      float64
		lo, hi float64
	}{
		{"Gamma", in.Gamma, 0, 1}, {"Lambda", in.Lambda, 0, 1},
	} {
		if !(p.v >= p.lo && p.v <= p.hi) {
			return 0, fmt.Errorf("%w: %s = %v; it must lie in [%v, %v]", ErrInput, p.name, p.v, p.lo, p.hi)
		}
	}
	rhoPG := in.RhoBarPG
	if rhoPG == 0 {
		rhoPG = in.RhoBar
	}
	for _, p := range [...]struct {
		name string
		v    float64
	}{
		{"RhoBar", in.RhoBar}, {"CBar", in.CBar}, {"RhoBarPG", rhoPG},
	} {
		if !(p.v > 0) || math.IsInf(p.v, 1) {
			return 0, fmt.Errorf("%w: %s = %v; a clip threshold must be finite and positive (IMPALA uses 1)", ErrInput, p.name, p.v)
		}
	}
	for _, b := range [...]struct {
		name string
		s    []float32
	}{
		{"BehaviourLogProbs", in.BehaviourLogProbs}, {"Rewards", in.Rewards}, {"Values", in.Values},
		{"Terminated", in.Terminated}, {"Truncated", in.Truncated}, {"LastValues", in.LastValues},
	} {
		for k, x := range b.s {
			if !finite(x) {
				return 0, in.valueError(b.name, k, x, "inputs must be finite")
			}
		}
	}
	for k, x := range in.TargetLogProbs {
		if x != x || math.IsInf(float64(x), 1) {
			return 0, in.valueError("TargetLogProbs", k, x, "a target log-probability may be −Inf but not NaN or +Inf")
		}
	}
	for k, x := range in.FinalValues {
		if in.Truncated[k] != 0 && in.Terminated[k] == 0 && !finite(x) {
			return 0, in.valueError("FinalValues", k, x, "a truncated step's final value must be finite")
		}
	}
	return rhoPG, nil
}

// valueError reports the bad value x at index k of the buffer name.
func (in *Input) valueError(name string, k int, x float32, rule string) error {
	if name == "LastValues" {
		return fmt.Errorf("%w: %s[%d] (env %d) = %v; %s", ErrInput, name, k, k, x, rule)
	}
	return fmt.Errorf("%w: %s[%d] (step %d, env %d) = %v; %s", ErrInput, name, k, k/in.N, k%in.N, x, rule)
}

// finite reports whether x is neither NaN nor ±Inf (x − x is NaN exactly for those).
func finite(x float32) bool { return x-x == 0 }

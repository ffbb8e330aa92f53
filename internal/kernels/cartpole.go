package kernels

import "fmt"

// CartPole is the constants of envs' CartPole-v1 step, as envs computes them (in float64, in
// Gymnasium's order), and 4/π rounded to float64 (the bound of its inline sine and cosine).
type CartPole struct {
	Gravity, MassPole, TotalMass, Length, PoleMassLength, Tau, XThreshold, ThetaThreshold, ForceMag, FourOverPi float64
}

// Step is envs' CartPole-v1 step (cartPole.Step) over len(act) envs, eight at a time on a CPU
// with AVX-512, with the bits of its Go loop: state holds each env's x, ẋ, θ, θ̇ in turn and
// is stepped in place with action act[i] (1 pushes right, any other value left); obs receives
// the new state in float32 (4 values an env), rewards 1 and terminated 1 where x or θ is past
// its threshold, else 0. Each env whose θ is outside (−π/4, π/4), ±0 or NaN (where the Go loop
// calls math.Sincos) is left unwritten and listed in skip (in order, skipped of them, up to
// len(act)): the caller steps those. ok is false, and nothing written, where it has no such
// kernel (another CPU, a purego build).
func (k *CartPole) Step(state []float64, act []int, obs, rewards, terminated []float32, skip []int32) (skipped int, ok bool) {
	n := len(act)
	if len(state) < 4*n || len(obs) < 4*n || len(rewards) < n || len(terminated) < n || len(skip) < n {
		panic(fmt.Sprintf("kernels: CartPole.Step of %d envs with %d state values, %d observations, %d rewards, %d terminations and room for %d skipped",
			n, len(state), len(obs), len(rewards), len(terminated), len(skip)))
	}
	return cartPoleStep(k, state[:4*n], act, obs[:4*n], rewards[:n], terminated[:n], skip[:n])
}

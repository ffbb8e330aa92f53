package envs

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
)

// cartPoleStates is n CartPole states and actions drawn to cover what a step decides on: live
// states and ones past the thresholds, x and θ a few ulps either side of ±2.4 and ±12° after
// the step, θ a few ulps either side of ±π/4 (where sincos stops working inline), ±0, NaN, ±Inf,
// subnormal and tiny angles, velocities at every scale, and actions 0, 1 and (outside the
// contract, where Step still pushes left) others.
func cartPoleStates(rng *rand.Rand, n int) ([]cartState, []int) {
	states, acts := make([]cartState, n), make([]int, n)
	ulps := func(x float64, k int) float64 {
		for range k {
			x = math.Nextafter(x, math.Copysign(math.Inf(1), rng.NormFloat64()))
		}
		return x
	}
	sign := func() float64 { return math.Copysign(1, rng.NormFloat64()) }
	for i := range states {
		s := cartState{uniform(rng, -2.6, 2.6), uniform(rng, -3, 3), uniform(rng, -0.3, 0.3), uniform(rng, -3, 3)}
		switch rng.IntN(16) {
		case 0: // x just inside or past ±2.4 after the step (ẋ = 0: x′ = x)
			s.x, s.xDot = ulps(sign()*cartXThreshold, rng.IntN(4)), 0
		case 1: // θ just inside or past ±12° after the step
			s.theta, s.thetaDot = ulps(sign()*cartThetaThreshold, rng.IntN(4)), 0
		case 2: // θ at the end of the inline range
			s.theta = ulps(sign()*math.Pi/4, rng.IntN(6))
		case 3: // angles sincos leaves to math.Sincos, and tiny ones it does not
			s.theta = []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(1), math.Inf(-1), 1, -3, 1e-310, -5e-324, 1e-200}[rng.IntN(10)]
		case 4: // the other values NaN or infinite
			v := []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[rng.IntN(3)]
			switch rng.IntN(3) {
			case 0:
				s.x = v
			case 1:
				s.xDot = v
			default:
				s.thetaDot = v
			}
		case 5: // velocities of every scale
			s.xDot = sign() * math.Ldexp(rng.Float64(), rng.IntN(40)-20)
			s.thetaDot = sign() * math.Ldexp(rng.Float64(), rng.IntN(40)-20)
		case 6: // any angle
			s.theta = uniform(rng, -4, 4)
		}
		states[i], acts[i] = s, rng.IntN(2)
		if rng.IntN(100) == 0 {
			acts[i] = []int{-1, 2, math.MaxInt, math.MinInt}[rng.IntN(4)]
		}
	}
	return states, acts
}

// sameFloat is whether a and b have the same bits (any NaN for any NaN: a NaN's payload is
// the hardware's, not the step's).
func sameFloat[T float32 | float64](a, b T) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return a == b && math.Signbit(float64(a)) == math.Signbit(float64(b))
}

// TestCartPoleKernelBits: Step (on an AVX-512 CPU, kernels.CartPole.Step eight envs at a time
// and cartPoleStep for the angles it leaves) gives cartPoleLoop's states, observations,
// rewards and terminations bit for bit, and cartPoleLoop cartPoleStep's: 2²⁰ + 5 envs of
// cartPoleStates, and every batch size up to 33.
func TestCartPoleKernelBits(t *testing.T) {
	n := 1<<20 + 5
	if testing.Short() {
		n = 1<<16 + 5
	}
	states, acts := cartPoleStates(rand.New(rand.NewPCG(31, 32)), n)
	live := make([]cartState, n) // states with inline angles only
	for i, s := range states {
		live[i] = s
		if !sincosInline(s.theta) {
			live[i].theta = 0.1
		}
	}
	skip := make([]int32, n)
	if skipped, ok := cartPoleKernel.Step(float64s(append([]cartState(nil), states...)), acts, make([]float32, 4*n), make([]float32, n), make([]float32, n), skip); !ok {
		if kernels.Level() == "avx512" {
			t.Fatal("no CartPole kernel on an AVX-512 CPU")
		}
		t.Logf("no kernel at level %s: the Go loop against itself", kernels.Level())
	} else {
		var want []int32
		for i, s := range states {
			if !sincosInline(s.theta) {
				want = append(want, int32(i))
			}
		}
		if !slices.Equal(skip[:skipped], want) {
			t.Fatalf("the kernel skipped %d envs, %v…; want the %d whose angles are not inline, %v…", skipped, skip[:min(skipped, 8)], len(want), want[:min(len(want), 8)])
		}
	}
	check := func(what string, from []cartState, acts []int) {
		t.Helper()
		m := len(acts)
		got, want := &cartPole{s: append([]cartState(nil), from...)}, append([]cartState(nil), from...)
		obs, rew, term := make([]float32, 4*m), make([]float32, m), make([]float32, m)
		wobs, wrew, wterm := make([]float32, 4*m), make([]float32, m), make([]float32, m)
		got.Step(Actions{Discrete: acts}, obs, rew, term)
		cartPoleLoop(want, acts, wobs, wrew, wterm)
		for i := range m {
			g, w := got.s[i], want[i]
			same := sameFloat(g.x, w.x) && sameFloat(g.xDot, w.xDot) && sameFloat(g.theta, w.theta) && sameFloat(g.thetaDot, w.thetaDot) &&
				sameFloat(rew[i], wrew[i]) && sameFloat(term[i], wterm[i])
			for j := range 4 {
				same = same && sameFloat(obs[4*i+j], wobs[4*i+j])
			}
			if !same {
				t.Fatalf("%s: env %d from %+v, action %d: Step gives %+v obs %v reward %v terminated %v; the Go loop %+v obs %v reward %v terminated %v",
					what, i, from[i], acts[i], g, obs[4*i:4*i+4], rew[i], term[i], w, wobs[4*i:4*i+4], wrew[i], wterm[i])
			}
			ws, wt := cartPoleStep(from[i], acts[i])
			if !sameFloat(ws.x, w.x) || !sameFloat(ws.xDot, w.xDot) || !sameFloat(ws.theta, w.theta) || !sameFloat(ws.thetaDot, w.thetaDot) || wt != (wterm[i] == 1) {
				t.Fatalf("%s: env %d from %+v: the Go loop gives %+v %v, cartPoleStep %+v %v", what, i, from[i], w, wterm[i], ws, wt)
			}
		}
	}
	check("all", states, acts)
	check("inline angles", live, acts)
	for m := range 33 {
		check(fmt.Sprintf("%d envs", m), states[1000:1000+m], acts[1000:1000+m])
	}
}

// BenchmarkCartPoleStep steps 1024 live CartPoles (a batcher worker's envs) with random
// actions: Step ("path=step": on an AVX-512 CPU, kernels.CartPole.Step) and the Go loop alone
// ("path=go"). An env past ±12° or ±2.4 goes back to its first state, as a VecEnv resets it.
//
//	go test ./envs -run '^$' -bench CartPoleStep -cpu 1
func BenchmarkCartPoleStep(b *testing.B) {
	const n = 1024
	rng := rand.New(rand.NewPCG(41, 42))
	start, acts := make([]cartState, n), make([]int, n)
	for i := range start {
		start[i] = cartPoleReset(rng)
		acts[i] = rng.IntN(2)
	}
	obs, rew, term := make([]float32, 4*n), make([]float32, n), make([]float32, n)
	for _, path := range []string{"step", "go"} {
		b.Run("path="+path, func(b *testing.B) {
			c := &cartPole{s: append([]cartState(nil), start...)}
			b.ReportAllocs()
			for b.Loop() {
				if path == "step" {
					c.Step(Actions{Discrete: acts}, obs, rew, term)
				} else {
					cartPoleLoop(c.s, acts, obs, rew, term)
				}
				for i, t := range term { // autoreset, as a VecEnv does
					if t != 0 {
						c.s[i] = start[i]
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/env")
		})
	}
}

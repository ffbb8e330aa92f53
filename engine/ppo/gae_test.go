package ppo

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// One env, T = 4, γ = 0.9, λ = 0.8 (γλ = 0.72). Values 1, 2, 3, 4; last value 5.
//
// No episode end: δ₃ = 1 + 0.9·5 − 4 = 1.5; δ₂ = 1 + 0.9·4 − 3 = 1.6; δ₁ = 1 + 0.9·3 − 2 = 1.7;
// δ₀ = 1 + 0.9·2 − 1 = 1.8. A₃ = 1.5, A₂ = 1.6 + 0.72·1.5 = 2.68, A₁ = 1.7 + 0.72·2.68 = 3.6296,
// A₀ = 1.8 + 0.72·3.6296 = 4.413312.
//
// Terminated at step 1: A₁ = δ₁ = 1 − 2 = −1; A₀ = 1.8 + 0.72·(−1) = 1.08; A₂, A₃ as above.
//
// Truncated at step 1 with V(final) = 10: A₁ = 1 + 0.9·10 − 2 = 8; A₀ = 1.8 + 0.72·8 = 7.56.
func TestGAEByHand(t *testing.T) {
	values := []float32{1, 2, 3, 4}
	rewards := []float32{1, 1, 1, 1}
	final := []float32{0, 10, 0, 0}
	for _, tc := range []struct {
		name        string
		term, trunc []float32
		want        []float64
	}{
		{"no end", []float32{0, 0, 0, 0}, []float32{0, 0, 0, 0}, []float64{4.413312, 3.6296, 2.68, 1.5}},
		{"terminated", []float32{0, 1, 0, 0}, []float32{0, 0, 0, 0}, []float64{1.08, -1, 2.68, 1.5}},
		{"truncated", []float32{0, 0, 0, 0}, []float32{0, 1, 0, 0}, []float64{7.56, 8, 2.68, 1.5}},
		{"both flags: termination wins", []float32{0, 1, 0, 0}, []float32{0, 1, 0, 0}, []float64{1.08, -1, 2.68, 1.5}},
	} {
		adv, ret := make([]float32, 4), make([]float32, 4)
		if err := GAE(GAEInput{T: 4, N: 1, Rewards: rewards, Values: values, Terminated: tc.term, Truncated: tc.trunc, FinalValues: final, LastValues: []float32{5}, Gamma: 0.9, Lambda: 0.8}, adv, ret); err != nil {
			t.Fatal(err)
		}
		for k, w := range tc.want {
			if math.Abs(float64(adv[k])-w) > 1e-5 || math.Abs(float64(ret[k])-(w+float64(values[k]))) > 1e-5 {
				t.Errorf("%s: step %d: adv %v ret %v, want %v and %v", tc.name, k, adv[k], ret[k], w, w+float64(values[k]))
			}
		}
	}
}

// Two envs interleaved time-major must give each env's own single-env answer.
func TestGAEInterleaved(t *testing.T) {
	// env 0: the "no end" case; env 1: the "terminated" case, with rows t·2+i.
	values := []float32{1, 1, 2, 2, 3, 3, 4, 4}
	rewards := []float32{1, 1, 1, 1, 1, 1, 1, 1}
	term := []float32{0, 0, 0, 1, 0, 0, 0, 0}
	zero := make([]float32, 8)
	adv, ret := make([]float32, 8), make([]float32, 8)
	if err := GAE(GAEInput{T: 4, N: 2, Rewards: rewards, Values: values, Terminated: term, Truncated: zero, FinalValues: zero, LastValues: []float32{5, 5}, Gamma: 0.9, Lambda: 0.8}, adv, ret); err != nil {
		t.Fatal(err)
	}
	want := []float64{4.413312, 1.08, 3.6296, -1, 2.68, 2.68, 1.5, 1.5}
	for k, w := range want {
		if math.Abs(float64(adv[k])-w) > 1e-5 {
			t.Errorf("row %d: %v, want %v", k, adv[k], w)
		}
	}
	if err := GAE(GAEInput{T: 4, N: 2, Rewards: rewards, Values: values, Terminated: term, Truncated: zero, FinalValues: zero, LastValues: []float32{5}, Gamma: 0.9, Lambda: 0.8}, adv, ret); err == nil {
		t.Error("1 last value for 2 envs accepted")
	}
}

// gaeEnvMajor is GAE as it was first written: one env at a time, back through its steps, the
// trace in a local. TestGAEBits holds the time-major GAE to its bits.
func gaeEnvMajor(in GAEInput, adv, ret []float32) {
	t, n := in.T, in.N
	g, gl := float32(in.Gamma), float32(in.Gamma*in.Lambda)
	for i := range n {
		var next float32
		for s := t - 1; s >= 0; s-- {
			k := s*n + i
			var delta float32
			switch {
			case in.Terminated[k] != 0:
				delta = in.Rewards[k] - in.Values[k]
				next = delta
			case in.Truncated[k] != 0:
				delta = in.Rewards[k] + g*in.FinalValues[k] - in.Values[k]
				next = delta
			default:
				v := in.LastValues[i]
				if s+1 < t {
					v = in.Values[k+n]
				}
				delta = in.Rewards[k] + g*v - in.Values[k]
				next = delta + gl*next
			}
			adv[k] = next
			ret[k] = next + in.Values[k]
		}
	}
}

// TestGAEBits: random rollouts (episodes ending by termination, truncation or both, values
// of every scale, a NaN and infinities among them) give the env-major recursion's bits.
func TestGAEBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, shape := range [][2]int{{1, 1}, {1, 7}, {5, 1}, {128, 512}, {33, 17}} {
		T, N := shape[0], shape[1]
		rows := T * N
		col := func(f func() float32) []float32 {
			c := make([]float32, rows)
			for i := range c {
				c[i] = f()
			}
			return c
		}
		scale := func() float32 { return float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-4))) }
		flag := func(p float64) func() float32 {
			return func() float32 {
				if rng.Float64() < p {
					return 1
				}
				return 0
			}
		}
		in := GAEInput{T: T, N: N, Rewards: col(scale), Values: col(scale), Terminated: col(flag(0.05)), Truncated: col(flag(0.03)),
			FinalValues: col(scale), Gamma: 0.99, Lambda: 0.95}
		in.LastValues = make([]float32, N)
		for i := range in.LastValues {
			in.LastValues[i] = scale()
		}
		if rows > 100 {
			in.Values[rows/2] = float32(math.NaN())
			in.Rewards[rows/3] = float32(math.Inf(1))
			in.FinalValues[rows/4], in.Truncated[rows/4] = float32(math.Inf(-1)), 1
		}
		adv, ret := make([]float32, rows), make([]float32, rows)
		wantAdv, wantRet := make([]float32, rows), make([]float32, rows)
		if err := GAE(in, adv, ret); err != nil {
			t.Fatal(err)
		}
		gaeEnvMajor(in, wantAdv, wantRet)
		for k := range rows {
			if math.Float32bits(adv[k]) != math.Float32bits(wantAdv[k]) || math.Float32bits(ret[k]) != math.Float32bits(wantRet[k]) {
				t.Fatalf("%d×%d row %d: adv %v ret %v, env by env %v %v", T, N, k, adv[k], ret[k], wantAdv[k], wantRet[k])
			}
		}
	}
}

// BenchmarkGAE is one PPO iteration's targets: 128 steps of 512 envs, CartPole-like episode ends.
func BenchmarkGAE(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const T, N = 128, 512
	in := GAEInput{T: T, N: N, Rewards: make([]float32, T*N), Values: make([]float32, T*N), Terminated: make([]float32, T*N),
		Truncated: make([]float32, T*N), FinalValues: make([]float32, T*N), LastValues: make([]float32, N), Gamma: 0.99, Lambda: 0.95}
	for k := range in.Rewards {
		in.Rewards[k], in.Values[k] = 1, float32(rng.NormFloat64())
		if rng.IntN(22) == 0 {
			in.Terminated[k] = 1
		}
	}
	adv, ret := make([]float32, T*N), make([]float32, T*N)
	for b.Loop() {
		if err := GAE(in, adv, ret); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGAEOverlap: outputs sharing memory with each other or with an input are refused, naming
// both; neighbouring slices of one array are not.
func TestGAEOverlap(t *testing.T) {
	const T, N = 3, 2
	mem := make([]float32, 20*T*N)
	col := func(k int) []float32 { return mem[k*T*N : (k+1)*T*N] }
	in := GAEInput{T: T, N: N, Rewards: col(0), Values: col(1), Terminated: col(2), Truncated: col(3), FinalValues: col(4),
		LastValues: col(5)[:N], Gamma: 0.9, Lambda: 0.8}
	if err := GAE(in, col(6), col(7)); err != nil {
		t.Fatalf("neighbouring slices: %v", err)
	}
	for _, c := range []struct {
		adv, ret []float32
		want     string
	}{
		{col(6), col(6), "adv shares memory with ret"},
		{col(6), mem[7*T*N-1 : 8*T*N-1], "adv shares memory with ret"},
		{col(1), col(7), "adv shares memory with Values"},
		{col(6), col(0), "ret shares memory with Rewards"},
		{col(6), mem[5*T*N : 6*T*N], "ret shares memory with LastValues"},
	} {
		err := GAE(in, c.adv, c.ret)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
}

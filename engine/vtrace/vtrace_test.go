package vtrace_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/engine/vtrace"
)

// ln2 and lnHalf are float32 log-ratios with exp ≈ 2, 0.5 and 1.5.
var (
	ln2    = float32(math.Log(2))
	lnHalf = float32(math.Log(0.5))
	ln1_5  = float32(math.Log(1.5))
)

// One env, T = 3, γ = 0.9, rewards 1, 1, 1, values V = 1, 2, 3, last value 5, behaviour
// log-probs 0 and target log-probs ln 2, ln 0.5, ln 1.5, so ρ = 2, 0.5, 1.5. With ρ̄ = 1,
// c̄ = 0.8, λ = 1: min(ρ̄, ρ) = 1, 0.5, 1 and c = 0.8, 0.5, 0.8; ρ̄_pg defaults to ρ̄.
//
// No episode end:
// δ₂ = 1·(1 + 0.9·5 − 3) = 2.5, v₂ = 5.5; δ₁ = 0.5·(1 + 0.9·3 − 2) = 0.85,
// v₁ − V₁ = 0.85 + 0.9·0.5·2.5 = 1.975, v₁ = 3.975; δ₀ = 1·(1 + 0.9·2 − 1) = 1.8,
// v₀ − V₀ = 1.8 + 0.9·0.8·1.975 = 3.222, v₀ = 4.222.
// A₂ = 1·(1 + 0.9·5 − 3) = 2.5; A₁ = 0.5·(1 + 0.9·5.5 − 2) = 1.975; A₀ = 1·(1 + 0.9·3.975 − 1) = 3.5775.
//
// ρ̄_pg = 2: min(2, ρ) = 2, 0.5, 1.5, so A₀ = 2·3.5775 = 7.155, A₁ = 1.975, A₂ = 1.5·2.5 = 3.75.
//
// λ = 0.5: c = 0.4, 0.25, 0.4; v₁ − V₁ = 0.85 + 0.9·0.25·2.5 = 1.4125, v₁ = 3.4125;
// v₀ − V₀ = 1.8 + 0.9·0.4·1.4125 = 2.3085, v₀ = 3.3085; A₀ = 1 + 0.9·3.4125 − 1 = 3.07125.
//
// Terminated at step 1: δ₁ = 0.5·(1 − 2) = −0.5, v₁ = 1.5; v₀ − V₀ = 1.8 + 0.72·(−0.5) = 1.44,
// v₀ = 2.44; A₁ = 0.5·(1 + 0 − 2) = −0.5; A₀ = 1 + 0.9·1.5 − 1 = 1.35.
//
// Truncated at step 1 with V(final) = 10: δ₁ = 0.5·(1 + 9 − 2) = 4, v₁ = 6;
// v₀ − V₀ = 1.8 + 0.72·4 = 4.68, v₀ = 5.68; A₁ = 0.5·(1 + 0.9·10 − 2) = 4; A₀ = 1 + 0.9·6 − 1 = 5.4.
func TestByHand(t *testing.T) {
	none := []float32{0, 0, 0}
	at1 := []float32{0, 1, 0}
	for _, tc := range []struct {
		name             string
		lambda, rhoBarPG float64
		term, trunc      []float32
		wantVS, wantAdv  []float64
	}{
		{"no end", 1, 0, none, none, []float64{4.222, 3.975, 5.5}, []float64{3.5775, 1.975, 2.5}},
		{"no end, ρ̄_pg = 2", 1, 2, none, none, []float64{4.222, 3.975, 5.5}, []float64{7.155, 1.975, 3.75}},
		{"no end, λ = 0.5", 0.5, 0, none, none, []float64{3.3085, 3.4125, 5.5}, []float64{3.07125, 1.975, 2.5}},
		{"terminated", 1, 0, at1, none, []float64{2.44, 1.5, 5.5}, []float64{1.35, -0.5, 2.5}},
		{"truncated", 1, 0, none, at1, []float64{5.68, 6, 5.5}, []float64{5.4, 4, 2.5}},
		{"both flags: termination wins", 1, 0, at1, at1, []float64{2.44, 1.5, 5.5}, []float64{1.35, -0.5, 2.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := vtrace.Input{
				T: 3, N: 1,
				BehaviourLogProbs: []float32{0, 0, 0},
				TargetLogProbs:    []float32{ln2, lnHalf, ln1_5},
				Rewards:           []float32{1, 1, 1},
				Values:            []float32{1, 2, 3},
				Terminated:        tc.term,
				Truncated:         tc.trunc,
				FinalValues:       []float32{0, 10, 0},
				LastValues:        []float32{5},
				Gamma:             0.9, Lambda: tc.lambda, RhoBar: 1, CBar: 0.8, RhoBarPG: tc.rhoBarPG,
			}
			vs, adv := make([]float32, 3), make([]float32, 3)
			if err := vtrace.Compute(in, vs, adv); err != nil {
				t.Fatal(err)
			}
			assertClose(t, "vs", vs, tc.wantVS, 1e-5)
			assertClose(t, "adv", adv, tc.wantAdv, 1e-5)
		})
	}
}

// reference evaluates the IMPALA paper's eq. 1 directly, as a sum over t for every s, in
// float64:
//
//	v_s = V(x_s) + Σ_{t=s}^{e} γ^{t−s} (Π_{i=s}^{t−1} c_i) δ_t,  δ_t = ρ̄_t (r_t + γ V(x_{t+1}) − V(x_t)),
//
// e being the step where x_s's episode ends or T−1, and the advantage
// ρ_pg,s (r_s + γ v_{s+1} − V(x_s)).
func reference(in vtrace.Input) (vs, adv []float64) {
	tt, n := in.T, in.N
	rhoBarPG := in.RhoBarPG
	if rhoBarPG == 0 {
		rhoBarPG = in.RhoBar
	}
	rho := func(k int) float64 {
		return math.Exp(float64(in.TargetLogProbs[k]) - float64(in.BehaviourLogProbs[k]))
	}
	ends := func(k int) bool { return in.Terminated[k] != 0 || in.Truncated[k] != 0 }
	// after returns what follows step t of env i: from x_{t+1} if it belongs to the same
	// episode, else 0 at termination, V(final) at truncation, the last value after the rollout.
	after := func(t, i int, next []float64) float64 {
		k := t*n + i
		switch {
		case in.Terminated[k] != 0:
			return 0
		case in.Truncated[k] != 0:
			return float64(in.FinalValues[k])
		case t == tt-1:
			return float64(in.LastValues[i])
		}
		return next[k+n]
	}
	values := make([]float64, tt*n)
	for k, v := range in.Values {
		values[k] = float64(v)
	}
	vs = make([]float64, tt*n)
	for i := range n {
		for s := range tt {
			sum := 0.0
			for t := s; t < tt; t++ {
				w := math.Pow(in.Gamma, float64(t-s))
				for j := s; j < t; j++ {
					w *= in.Lambda * math.Min(in.CBar, rho(j*n+i))
				}
				k := t*n + i
				sum += w * math.Min(in.RhoBar, rho(k)) * (float64(in.Rewards[k]) + in.Gamma*after(t, i, values) - values[k])
				if ends(k) {
					break
				}
			}
			vs[s*n+i] = values[s*n+i] + sum
		}
	}
	adv = make([]float64, tt*n)
	for i := range n {
		for s := range tt {
			k := s*n + i
			adv[k] = math.Min(rhoBarPG, rho(k)) * (float64(in.Rewards[k]) + in.Gamma*after(s, i, vs) - values[k])
		}
	}
	return vs, adv
}

// handMade is 3 envs × 8 steps. Env 0 terminates at step 2 and is truncated at step 5; env 1
// never ends; env 2 is truncated at step 0, carries both flags at step 3 and terminates at the
// last step. The log-ratios give ρ from 0.05 to 6, on both sides of every clip used below, and
// one target log-probability is −Inf (ρ = 0).
func handMade() vtrace.Input {
	return vtrace.Input{
		T: 8, N: 3,
		BehaviourLogProbs: []float32{
			-0.7, -1.2, -0.1,
			-0.3, -2.0, -0.9,
			-1.5, -0.4, -0.2,
			-0.6, -0.6, -3.0,
			-0.1, -1.0, -0.5,
			-2.2, -0.3, -0.8,
			-0.9, -0.05, -1.1,
			-0.4, -1.7, -0.6,
		},
		TargetLogProbs: []float32{ // ρ in the comments
			-0.2, -0.2, -0.1, // 1.65, 2.72, 1
			-1.0, -0.2, -0.4, // 0.50, 6.05, 1.65
			-1.5, -1.1, float32(math.Inf(-1)), // 1, 0.50, 0
			-0.4, -3.6, -1.5, // 1.22, 0.05, 4.48
			-0.1, -0.9, -0.6, // 1, 1.11, 0.90
			-1.3, -0.9, -0.3, // 2.46, 0.55, 1.65
			-1.0, -0.05, -1.6, // 0.90, 1, 0.61
			-0.1, -1.2, -0.6, // 1.35, 1.65, 1
		},
		Rewards: []float32{
			1, 0.5, -1,
			0, 2, 0.25,
			-0.5, 1, 3,
			2, -1, 0,
			1, 0, 1.5,
			0.5, 1, -2,
			1, 1, 1,
			-1, 0.5, 0.75,
		},
		Values: []float32{
			0.3, 1.1, -0.4,
			0.9, 1.5, 0.2,
			-0.2, 0.7, 2.1,
			1.4, -0.3, 0.6,
			0.8, 0.1, 1.2,
			0.4, 0.9, -1.1,
			1.0, 1.3, 0.5,
			-0.6, 0.2, 0.9,
		},
		Terminated: []float32{
			0, 0, 0,
			0, 0, 0,
			1, 0, 0,
			0, 0, 1,
			0, 0, 0,
			0, 0, 0,
			0, 0, 0,
			0, 0, 1,
		},
		Truncated: []float32{
			0, 0, 1,
			0, 0, 0,
			0, 0, 0,
			0, 0, 1,
			0, 0, 0,
			1, 0, 0,
			0, 0, 0,
			0, 0, 0,
		},
		FinalValues: []float32{
			0, 0, 2.5,
			0, 0, 0,
			0, 0, 0,
			0, 0, 99, // both flags: not read
			0, 0, 0,
			-1.75, 0, 0,
			0, 0, 0,
			0, 0, 0,
		},
		LastValues: []float32{0.6, -0.8, 5},
	}
}

// randomInput is a seeded rollout with episode ends of both kinds and ρ spread over
// [e^−2, e^2].
func randomInput(seed uint64, t, n int, onPolicy bool) vtrace.Input {
	r := rand.New(rand.NewPCG(seed, 1))
	u := func(lo, hi float64) float32 { return float32(lo + (hi-lo)*r.Float64()) }
	rows := t * n
	in := vtrace.Input{T: t, N: n}
	for _, p := range []*[]float32{&in.BehaviourLogProbs, &in.TargetLogProbs, &in.Rewards, &in.Values,
		&in.Terminated, &in.Truncated, &in.FinalValues} {
		*p = make([]float32, rows)
	}
	in.LastValues = make([]float32, n)
	for k := range rows {
		in.BehaviourLogProbs[k] = u(-3, 0)
		in.TargetLogProbs[k] = in.BehaviourLogProbs[k]
		if !onPolicy {
			in.TargetLogProbs[k] += u(-2, 2)
		}
		in.Rewards[k], in.Values[k], in.FinalValues[k] = u(-1, 1), u(-2, 2), u(-2, 2)
		switch x := r.Float64(); {
		case x < 0.06:
			in.Terminated[k] = 1
		case x < 0.12:
			in.Truncated[k] = 1
		case x < 0.14:
			in.Terminated[k], in.Truncated[k] = 1, 1
		}
	}
	for i := range n {
		in.LastValues[i] = u(-2, 2)
	}
	return in
}

func TestAgainstReference(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		in                    vtrace.Input
		gamma, lambda         float64
		rhoBar, cBar, rhoBarP float64
	}{
		{"hand-made, IMPALA clips", handMade(), 0.97, 1, 1, 1, 0},
		{"hand-made, ρ̄ ≠ c̄, λ = 0.95", handMade(), 0.97, 0.95, 1.2, 0.9, 0},
		{"hand-made, ρ̄_pg = 2.5", handMade(), 0.9, 0.8, 2, 1.5, 2.5},
		{"hand-made, tight clips", handMade(), 0.99, 1, 0.7, 0.6, 0.5},
		{"hand-made, γ = 0", handMade(), 0, 1, 1, 1, 0},
		{"random 40×5", randomInput(7, 40, 5, false), 0.99, 0.95, 1, 1, 0},
		{"random 33×4, ρ̄ ≠ c̄", randomInput(8, 33, 4, false), 0.95, 1, 1.5, 0.8, 1.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Gamma, in.Lambda, in.RhoBar, in.CBar, in.RhoBarPG = tc.gamma, tc.lambda, tc.rhoBar, tc.cBar, tc.rhoBarP
			vs, adv := make([]float32, in.T*in.N), make([]float32, in.T*in.N)
			if err := vtrace.Compute(in, vs, adv); err != nil {
				t.Fatal(err)
			}
			wantVS, wantAdv := reference(in)
			assertClose(t, "vs", vs, wantVS, 1e-5)
			assertClose(t, "adv", adv, wantAdv, 1e-5)
		})
	}
}

// With on-policy data (ρ = 1) and ρ̄ = c̄ = 1, λ = 1, v_s is the discounted return
// (bootstrapped from the final value at truncation and the last value after the rollout) and the
// advantage is that return less V(x_s): what GAE with λ = 1 gives. With λ < 1, v_s is GAE(λ)'s
// return. Clips above 1 change nothing on-policy.
func TestOnPolicyIsGAE(t *testing.T) {
	for _, tc := range []struct {
		name         string
		seed         uint64
		t, n         int
		lambda       float64
		rhoBar, cBar float64
	}{
		{"λ = 1", 1, 64, 8, 1, 1, 1},
		{"λ = 1, clips 2 and 3", 2, 50, 3, 1, 2, 3},
		{"λ = 1, one env", 3, 100, 1, 1, 1, 1},
		{"λ = 0.95 (targets only)", 4, 64, 8, 0.95, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const gamma = 0.99
			in := randomInput(tc.seed, tc.t, tc.n, true)
			in.Gamma, in.Lambda, in.RhoBar, in.CBar = gamma, tc.lambda, tc.rhoBar, tc.cBar
			rows := tc.t * tc.n
			vs, adv := make([]float32, rows), make([]float32, rows)
			if err := vtrace.Compute(in, vs, adv); err != nil {
				t.Fatal(err)
			}

			gaeAdv, gaeRet := make([]float32, rows), make([]float32, rows)
			if err := ppo.GAE(ppo.GAEInput{T: tc.t, N: tc.n, Rewards: in.Rewards, Values: in.Values, Terminated: in.Terminated,
				Truncated: in.Truncated, FinalValues: in.FinalValues, LastValues: in.LastValues, Gamma: gamma, Lambda: tc.lambda},
				gaeAdv, gaeRet); err != nil {
				t.Fatal(err)
			}
			assertClose(t, "vs against ppo.GAE returns", vs, float64s(gaeRet), 2e-5)
			if tc.lambda != 1 {
				return
			}
			assertClose(t, "adv against ppo.GAE advantages", adv, float64s(gaeAdv), 2e-5)

			// The discounted returns by a plain backward loop.
			ret := make([]float64, rows)
			for i := range tc.n {
				g := float64(in.LastValues[i])
				for s := tc.t - 1; s >= 0; s-- {
					k := s*tc.n + i
					switch {
					case in.Terminated[k] != 0:
						g = 0
					case in.Truncated[k] != 0:
						g = float64(in.FinalValues[k])
					}
					g = float64(in.Rewards[k]) + gamma*g
					ret[k] = g
				}
			}
			assertClose(t, "vs against discounted returns", vs, ret, 1e-5)
			for k := range ret {
				ret[k] -= float64(in.Values[k])
			}
			assertClose(t, "adv against discounted returns − V", adv, ret, 1e-5)
		})
	}
}

func TestErrors(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name   string
		mutate func(in *vtrace.Input, vs, adv *[]float32)
		want   string
	}{
		{"T = 0", func(in *vtrace.Input, _, _ *[]float32) { in.T = 0 }, "T = 0 and N = 3"},
		{"N < 0", func(in *vtrace.Input, _, _ *[]float32) { in.N = -1 }, "both must be positive"},
		{"T·N overflows", func(in *vtrace.Input, _, _ *[]float32) { in.T, in.N = math.MaxInt/2, 3 }, "overflows"},
		{"short behaviour", func(in *vtrace.Input, _, _ *[]float32) { in.BehaviourLogProbs = in.BehaviourLogProbs[:5] }, "BehaviourLogProbs holds 5 values for T×N = 8×3 = 24"},
		{"long target", func(in *vtrace.Input, _, _ *[]float32) { in.TargetLogProbs = append(in.TargetLogProbs, 0) }, "TargetLogProbs holds 25"},
		{"nil rewards", func(in *vtrace.Input, _, _ *[]float32) { in.Rewards = nil }, "Rewards holds 0"},
		{"short values", func(in *vtrace.Input, _, _ *[]float32) { in.Values = in.Values[:23] }, "Values holds 23"},
		{"short terminated", func(in *vtrace.Input, _, _ *[]float32) { in.Terminated = in.Terminated[:3] }, "Terminated holds 3"},
		{"short truncated", func(in *vtrace.Input, _, _ *[]float32) { in.Truncated = in.Truncated[:3] }, "Truncated holds 3"},
		{"short final values", func(in *vtrace.Input, _, _ *[]float32) { in.FinalValues = nil }, "FinalValues holds 0"},
		{"last values per env", func(in *vtrace.Input, _, _ *[]float32) { in.LastValues = in.LastValues[:2] }, "LastValues holds 2 values for N = 3"},
		{"short vs", func(_ *vtrace.Input, vs, _ *[]float32) { *vs = (*vs)[:1] }, "vs holds 1"},
		{"short adv", func(_ *vtrace.Input, _, adv *[]float32) { *adv = nil }, "adv holds 0"},
		{"γ > 1", func(in *vtrace.Input, _, _ *[]float32) { in.Gamma = 1.01 }, "Gamma = 1.01"},
		{"γ NaN", func(in *vtrace.Input, _, _ *[]float32) { in.Gamma = math.NaN() }, "Gamma = NaN"},
		{"λ < 0", func(in *vtrace.Input, _, _ *[]float32) { in.Lambda = -0.5 }, "Lambda = -0.5"},
		{"ρ̄ = 0", func(in *vtrace.Input, _, _ *[]float32) { in.RhoBar = 0 }, "RhoBar = 0; a clip threshold must be finite and positive"},
		{"ρ̄ < 0", func(in *vtrace.Input, _, _ *[]float32) { in.RhoBar = -1 }, "RhoBar = -1"},
		{"ρ̄ NaN", func(in *vtrace.Input, _, _ *[]float32) { in.RhoBar = math.NaN() }, "RhoBar = NaN"},
		{"ρ̄ +Inf", func(in *vtrace.Input, _, _ *[]float32) { in.RhoBar = math.Inf(1) }, "RhoBar = +Inf"},
		{"c̄ = 0", func(in *vtrace.Input, _, _ *[]float32) { in.CBar = 0 }, "CBar = 0"},
		{"ρ̄_pg < 0", func(in *vtrace.Input, _, _ *[]float32) { in.RhoBarPG = -2 }, "RhoBarPG = -2"},
		{"NaN behaviour", func(in *vtrace.Input, _, _ *[]float32) { in.BehaviourLogProbs[4] = nan }, "BehaviourLogProbs[4] (step 1, env 1) = NaN"},
		{"−Inf behaviour", func(in *vtrace.Input, _, _ *[]float32) { in.BehaviourLogProbs[0] = -inf }, "BehaviourLogProbs[0] (step 0, env 0) = -Inf"},
		{"NaN target", func(in *vtrace.Input, _, _ *[]float32) { in.TargetLogProbs[23] = nan }, "TargetLogProbs[23] (step 7, env 2) = NaN"},
		{"+Inf target", func(in *vtrace.Input, _, _ *[]float32) { in.TargetLogProbs[1] = inf }, "may be −Inf but not NaN or +Inf"},
		{"NaN reward", func(in *vtrace.Input, _, _ *[]float32) { in.Rewards[10] = nan }, "Rewards[10] (step 3, env 1) = NaN"},
		{"Inf value", func(in *vtrace.Input, _, _ *[]float32) { in.Values[2] = inf }, "Values[2] (step 0, env 2) = +Inf"},
		{"NaN terminated", func(in *vtrace.Input, _, _ *[]float32) { in.Terminated[3] = nan }, "Terminated[3]"},
		{"NaN truncated", func(in *vtrace.Input, _, _ *[]float32) { in.Truncated[3] = nan }, "Truncated[3]"},
		{"NaN final value where truncated", func(in *vtrace.Input, _, _ *[]float32) { in.FinalValues[2] = nan }, "FinalValues[2] (step 0, env 2) = NaN"},
		{"NaN last value", func(in *vtrace.Input, _, _ *[]float32) { in.LastValues[1] = nan }, "LastValues[1] (env 1) = NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := handMade()
			in.Gamma, in.Lambda, in.RhoBar, in.CBar = 0.99, 1, 1, 1
			vs, adv := make([]float32, 24), make([]float32, 24)
			for k := range vs {
				vs[k], adv[k] = 42, 42
			}
			tc.mutate(&in, &vs, &adv)
			err := vtrace.Compute(in, vs, adv)
			if !errors.Is(err, vtrace.ErrInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an ErrInput containing %q", err, tc.want)
			}
			for _, out := range [][]float32{vs, adv} {
				for k, x := range out {
					if x != 42 {
						t.Fatalf("row %d written (%v) by a call that failed", k, x)
					}
				}
			}
		})
	}

	// FinalValues is read only where an episode was truncated and not terminated.
	in := handMade()
	in.Gamma, in.Lambda, in.RhoBar, in.CBar = 0.99, 1, 1, 1
	in.FinalValues[0], in.FinalValues[11] = nan, nan // not truncated; both flags
	if err := vtrace.Compute(in, make([]float32, 24), make([]float32, 24)); err != nil {
		t.Errorf("NaN final values where they are not read: %v", err)
	}
}

func TestNoAllocs(t *testing.T) {
	in := randomInput(5, 128, 64, false)
	in.Gamma, in.Lambda, in.RhoBar, in.CBar = 0.99, 1, 1, 1
	vs, adv := make([]float32, 128*64), make([]float32, 128*64)
	if a := testing.AllocsPerRun(10, func() {
		if err := vtrace.Compute(in, vs, adv); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Compute allocates %v times per call", a)
	}
}

// BenchmarkCompute times one rollout of T = 128 steps × N = 64 envs and reports rows (env
// steps) per second.
func BenchmarkCompute(b *testing.B) {
	const tt, n = 128, 64
	in := randomInput(6, tt, n, false)
	in.Gamma, in.Lambda, in.RhoBar, in.CBar = 0.99, 1, 1, 1
	vs, adv := make([]float32, tt*n), make([]float32, tt*n)
	b.ReportAllocs()
	for b.Loop() {
		if err := vtrace.Compute(in, vs, adv); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*tt*n)/b.Elapsed().Seconds(), "rows/s")
}

func float64s(s []float32) []float64 {
	out := make([]float64, len(s))
	for k, x := range s {
		out[k] = float64(x)
	}
	return out
}

// assertClose fails t where |got − want| > tol·max(1, |want|).
func assertClose(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for k, w := range want {
		if d := math.Abs(float64(got[k]) - w); !(d <= tol*math.Max(1, math.Abs(w))) {
			t.Errorf("%s[%d] = %v, want %v (|Δ| = %.3g)", what, k, got[k], w, d)
		}
	}
}

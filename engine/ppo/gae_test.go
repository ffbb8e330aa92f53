package ppo

import (
	"math"
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

package names

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2},
		{"total_step", "total_steps", 1}, {"gae_lamda", "gae_lambda", 1}, {"same", "same", 0},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetry)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"/policy/value_net/Gemm_output_0", "/policy/action_net/Gemm_output_0", "obs", "output", "logits"}
	for _, tc := range []struct {
		name string
		k    int
		want []string
	}{
		{"action_net", 1, []string{"/policy/action_net/Gemm_output_0"}},              // contained
		{"/policy/actoin_net/Gemm", 1, []string{"/policy/action_net/Gemm_output_0"}}, // shared prefix, then distance
		{"LOGIT", 2, []string{"logits", "obs"}},
		{"x", 10, names[:5]},
	} {
		got := Nearest(tc.name, names, tc.k)
		if tc.name == "x" {
			if len(got) != 5 {
				t.Errorf("Nearest(%q, k=10) = %v, want all 5", tc.name, got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Nearest(%q, %d) = %v, want %v", tc.name, tc.k, got, tc.want)
		}
	}
}

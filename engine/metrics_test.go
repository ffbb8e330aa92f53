package engine

import (
	"math"
	"testing"
)

// TestExplainedVariance: by hand, values 1, 2, 3 against returns 2, 4, 6: Var(returns) = 8/3,
// returns − values = 1, 2, 3 with variance 2/3, so 1 − (2/3)/(8/3) = 0.75; perfect values give
// 1, values that are all the mean 0; constant returns (even many, and large) and none give NaN.
func TestExplainedVariance(t *testing.T) {
	many := make([]float32, 100000)
	for i := range many {
		many[i] = 123.456
	}
	for _, c := range []struct {
		name            string
		values, returns []float32
		want            float64
	}{
		{"by hand", []float32{1, 2, 3}, []float32{2, 4, 6}, 0.75},
		{"perfect", []float32{2, 4, 6}, []float32{2, 4, 6}, 1},
		{"the mean", []float32{4, 4, 4}, []float32{2, 4, 6}, 0},
		{"off by a constant", []float32{12, 14, 16}, []float32{2, 4, 6}, 1},
		{"constant returns", []float32{1, 2, 3}, []float32{5, 5, 5}, math.NaN()},
		{"many constant returns", make([]float32, len(many)), many, math.NaN()},
		{"none", nil, nil, math.NaN()},
	} {
		got := explainedVariance(c.values, c.returns)
		if math.IsNaN(c.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

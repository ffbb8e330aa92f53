package offpolicy

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// TestCheck: a valid set passes; each field out of its range is refused by name, wrapping the
// algorithm's error.
func TestCheck(t *testing.T) {
	errAlgo := errors.New("algo: bad config")
	ok := Common{Gamma: 0.99, Tau: 1, AdamEps: 1e-8, MaxGradNorm: -1, TargetEvery: 1, Minibatch: 4, Towers: 2}
	if err := ok.Check(errAlgo); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*Common)
	}{
		{"Gamma", func(c *Common) { c.Gamma = 1.5 }},
		{"Gamma", func(c *Common) { c.Gamma = math.NaN() }},
		{"Tau", func(c *Common) { c.Tau = 0 }},
		{"AdamEps", func(c *Common) { c.AdamEps = 0 }},
		{"MaxGradNorm", func(c *Common) { c.MaxGradNorm = math.NaN() }},
		{"TargetEvery", func(c *Common) { c.TargetEvery = 0 }},
		{"Minibatch", func(c *Common) { c.Minibatch = 0 }},
		{"Towers", func(c *Common) { c.Towers = 3 }},
	} {
		bad := ok
		c.edit(&bad)
		if err := bad.Check(errAlgo); !errors.Is(err, errAlgo) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s out of range: %v", c.name, err)
		}
	}
}

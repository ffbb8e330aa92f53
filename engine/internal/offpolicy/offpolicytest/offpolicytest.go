// Package offpolicytest holds the test helpers of engine/dqn and engine/sac: reading the
// PyTorch fixtures of scripts/gen_fixtures_offpolicy.py and comparing tensors with them.
package offpolicytest

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Load reads testdata/offpolicy/NAME.json (from a package two folders below the repository's
// root) into f.
func Load(t testing.TB, name string, f any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "offpolicy", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// Near fails unless max|got − want| ≤ tol·max|want| and returns that ratio.
func Near(t testing.TB, what string, got []float32, want []float64, tol float64) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var diff, scale float64
	for i, w := range want {
		diff = max(diff, math.Abs(float64(got[i])-w))
		scale = max(scale, math.Abs(w))
	}
	if diff > tol*scale {
		t.Errorf("%s: max difference %.3g, %.3g of the largest value %.3g (tolerance %g)", what, diff, diff/scale, scale, tol)
	}
	return diff / scale
}

// NearScalar fails unless |got − want| ≤ tol·max(|want|, 1e-3).
func NearScalar(t testing.TB, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*max(math.Abs(want), 1e-3) {
		t.Errorf("%s = %.9g, PyTorch %.9g", what, got, want)
	}
}

// Bits are x's float32 bit patterns, for comparisons that must be exact.
func Bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

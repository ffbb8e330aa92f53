//go:build !race

// A learning run, too slow under the race detector: make test runs it in its first pass.

package engine

import (
	"context"
	"testing"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// TestMultiDimBoxTrains: an env whose action space is box:2x3 trains with a Gaussian head of
// six means (issue 29: the head's grammar took only box:DIM, so such an env did not bind), its
// policy.onnx says box:2x3 in its metadata, and the trained policy reaches its targets element
// by element: its deterministic return beats the best constant policy's -10/3 by far (-0.13
// to -0.19 over seeds 1–3 at 30,720 steps; the test asks for -1).
func TestMultiDimBoxTrains(t *testing.T) {
	dir := t.TempDir()
	res, err := Train(context.Background(), Config{Env: reach2x3, TotalSteps: 30720, Seed: 1, EvalEpisodes: 20},
		Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deterministic return %.3f after %d steps", res.EvalReturnMean, res.EnvSteps)
	if res.EvalReturnMean < -1 {
		t.Errorf("deterministic return %.3f after %d steps; acting 0 scores -3.33, the identity 0", res.EvalReturnMean, res.EnvSteps)
	}
	s, err := onnx.Open(context.Background(), res.Policy, onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	spec, ok, err := head.FromMetadata(s.Metadata())
	if err != nil || !ok {
		t.Fatalf("policy.onnx metadata: %v, %v", ok, err)
	}
	if spec.Head != head.GaussianKind || spec.ActionDim() != 6 || spec.ActionSpace() != "box:2x3:-1:1" {
		t.Errorf("policy.onnx: head %s over %s (%d means)", spec.Head, spec.ActionSpace(), spec.ActionDim())
	}
}

package bind

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestNewRunnerPCGMatchesNewRunner: a Runner that takes each env's uniform number straight
// from its stream's source (NewRunnerPCG, which writes rand.Rand.Float64's formula out) samples
// the same actions and log-probabilities, bit for bit, as one drawing through rand.Rand
// (NewRunner) from sources seeded alike, step after step; too few sources, or a nil one, is
// an error naming it.
func TestNewRunnerPCGMatchesNewRunner(t *testing.T) {
	const n, steps = 300, 5
	p, err := load(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", Config{})
	if err != nil {
		t.Fatal(err)
	}
	ref := newTestAgent(t, p, n, 7, false)
	defer ref.Close()
	pcgs := make([]*rand.PCG, n)
	for i := range pcgs {
		pcgs[i] = rand.NewPCG(7, uint64(i))
	}
	ctx := context.Background()
	got, err := p.NewRunnerPCG(ctx, n, pcgs, false)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	obsRng := rand.New(rand.NewPCG(3, 4))
	obs := make([]float32, n*4)
	for s := range steps {
		for i := range obs {
			obs[i] = float32(obsRng.NormFloat64())
		}
		var out [2][4][]float32 // acts, envActs, logp, value of ref, then of got
		for k, r := range []*Runner{ref, got} {
			for j := range out[k] {
				out[k][j] = make([]float32, n)
			}
			if err := r.Step(n, obs, nil, nil, out[k][0], out[k][1], out[k][2], out[k][3], nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if out[0][0][i] != out[1][0][i] || out[0][2][i] != out[1][2][i] {
				t.Fatalf("step %d row %d: NewRunnerPCG's action %v (log π %v), NewRunner's %v (%v)",
					s, i, out[1][0][i], out[1][2][i], out[0][0][i], out[0][2][i])
			}
		}
	}
	if _, err := p.NewRunnerPCG(ctx, n, pcgs[:n-1], false); err == nil || !strings.Contains(err.Error(), "random sources") {
		t.Errorf("%d sources for %d envs gave %v, want an error", n-1, n, err)
	}
	pcgs[5] = nil
	if _, err := p.NewRunnerPCG(ctx, n, pcgs, false); err == nil || !strings.Contains(err.Error(), "env 5") {
		t.Errorf("a nil source gave %v, want an error naming env 5", err)
	}
}

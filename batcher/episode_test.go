package batcher

import (
	"context"
	"math"
	"testing"
)

// TestRecordEpisode records random CartPole episodes: one observation more than steps, the
// last one past Gymnasium's termination thresholds (|x| > 2.4 or |θ| > 12°) unless the time
// limit cut the episode, a return equal to the length (reward 1 a step), and the episode
// Evaluate runs first with the same seed.
func TestRecordEpisode(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(4) {
		tr, err := RecordEpisode(ctx, EvalConfig{Env: envSpec("CartPole-v1"), Seed: seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := tr.Length()
		if n == 0 || len(tr.Obs) != (n+1)*4 || len(tr.Actions) != n || tr.ObsDim != 4 || tr.ActDim != 1 || tr.Return != float64(n) {
			t.Fatalf("seed %d: %d steps, %d obs values, %d actions, return %v", seed, n, len(tr.Obs), len(tr.Actions), tr.Return)
		}
		last := tr.Obs[n*4:]
		past := math.Abs(float64(last[0])) > 2.4 || math.Abs(float64(last[2])) > 12*2*math.Pi/360
		if tr.Terminated != past {
			t.Errorf("seed %d: terminated %v, last observation %v", seed, tr.Terminated, last)
		}
		for i := range n { // the state before a step is within the thresholds
			if o := tr.Obs[i*4:]; math.Abs(float64(o[0])) > 2.4 || math.Abs(float64(o[2])) > 12*2*math.Pi/360 {
				t.Errorf("seed %d: step %d starts past the thresholds: %v", seed, i, o[:4])
			}
		}
		ev, err := Evaluate(ctx, EvalConfig{Env: envSpec("CartPole-v1"), Episodes: 1, Seed: seed}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Returns[0] != tr.Return || ev.Lengths[0] != n {
			t.Errorf("seed %d: recorded %v over %d steps, Evaluate's episode %v over %d", seed, tr.Return, n, ev.Returns[0], ev.Lengths[0])
		}
	}
}

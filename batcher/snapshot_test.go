package batcher

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// TestSnapshotResumesCollection: a batcher restored from a snapshot collects exactly the rollouts
// the original collects after the snapshot (observations, actions, log-probabilities, episodes).
func TestSnapshotResumesCollection(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", PolicyConfig{})
	cfg := Config{Env: "CartPole-v1", Workers: 2, EnvsPerWorker: 3, Steps: 40, Seed: 21}
	a := newBatcher(t, cfg, p)
	ctx := context.Background()
	for range 3 {
		if _, err := a.Collect(ctx, 40); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed = 999
	b := newBatcher(t, cfg, p)
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		ra, err := a.Collect(ctx, 40)
		if err != nil {
			t.Fatal(err)
		}
		obs, acts, logp := slices.Clone(ra.Obs), slices.Clone(ra.Actions), slices.Clone(ra.LogP)
		eps := slices.Clone(ra.Episodes)
		rb, err := b.Collect(ctx, 40)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(obs, rb.Obs) || !slices.Equal(acts, rb.Actions) || !slices.Equal(logp, rb.LogP) || !slices.Equal(eps, rb.Episodes) {
			t.Fatalf("round %d after restoring: the batchers diverge", round)
		}
	}
	small := newBatcher(t, Config{Env: "CartPole-v1", Workers: 1, EnvsPerWorker: 3, Steps: 40}, p)
	if err := small.Restore(snap); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("restoring 2 workers into 1: %v", err)
	}
	if err := b.Restore(snap[:len(snap)/2]); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("truncated snapshot: %v", err)
	}
}

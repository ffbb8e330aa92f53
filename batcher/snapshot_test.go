package batcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// TestSnapshotResumesCollection: a batcher restored from a snapshot collects exactly the rollouts
// the original collects after the snapshot (observations, actions, log-probabilities, episodes,
// and for a recurrent policy the states the rollouts start from).
func TestSnapshotResumesCollection(t *testing.T) {
	for _, tc := range []struct{ name, path, env string }{
		{"feed-forward", "../testdata/mlp_tanh.onnx", "CartPole-v1"},
		{"recurrent", bindtest.ForeignDir + "/rllib_cartpole_lstm.onnx", "CartPoleNoVel-v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadPolicy(t, tc.path, tc.env, bind.Config{})
			cfg := Config{Env: envSpec(tc.env), Workers: 2, EnvsPerWorker: 3, Steps: 40, Seed: 21}
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
				var init [][]float32
				for _, s := range ra.InitialState {
					init = append(init, slices.Clone(s))
				}
				rb, err := b.Collect(ctx, 40)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(obs, rb.Obs) || !slices.Equal(acts, rb.Actions) || !slices.Equal(logp, rb.LogP) || !slices.Equal(eps, rb.Episodes) {
					t.Fatalf("round %d after restoring: the batchers diverge", round)
				}
				for k := range init {
					if !slices.Equal(init[k], rb.InitialState[k]) {
						t.Fatalf("round %d: initial state %d differs after restoring", round, k)
					}
				}
			}
			small := newBatcher(t, Config{Env: envSpec(tc.env), Workers: 1, EnvsPerWorker: 3, Steps: 40}, p)
			if err := small.Restore(snap); !errors.Is(err, ErrSnapshot) {
				t.Fatalf("restoring 2 workers into 1: %v", err)
			}
			if err := b.Restore(snap[:len(snap)/2]); !errors.Is(err, ErrSnapshot) {
				t.Fatalf("truncated snapshot: %v", err)
			}
			// A snapshot with recurrent states fits only a batcher whose policy carries them.
			random := newBatcher(t, Config{Env: envSpec(tc.env), Workers: 2, EnvsPerWorker: 3, Steps: 40}, nil)
			err = random.Restore(snap)
			if p.Recurrent() && (!errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "recurrent")) {
				t.Fatalf("restoring recurrent states into a batcher without: %v", err)
			}
			if !p.Recurrent() && err != nil {
				t.Fatalf("restoring a feed-forward snapshot into a random batcher: %v", err)
			}
		})
	}
}

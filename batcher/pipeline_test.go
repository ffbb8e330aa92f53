package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPipelineMatchesWorkers: a batcher whose workers step their envs in two halves taking
// turns in ONNX Runtime (Config.Pipeline) collects, rollout by rollout and bit for bit, what
// one without does (rows, recurrent states, bootstrap values, and the episodes in the same
// order; the final observations' values within float32 rounding: closeFinalValues), through Collect and through a Stream, for a feed-forward and two recurrent
// policies, with new weights published between the second and the third rollout.
func TestPipelineMatchesWorkers(t *testing.T) {
	ctx := context.Background()
	for _, c := range streamCases {
		t.Run(c.name, func(t *testing.T) {
			p, tr := publishedPolicy(t, c)
			cfg := Config{Env: envSpec(c.env), Workers: 2, EnvsPerWorker: 6, Steps: 20, Seed: 7, MaxEpisodeSteps: 15}
			ref := newBatcher(t, cfg, p)
			cfg.Pipeline = true
			pipe, str := newBatcher(t, cfg, p), newBatcher(t, cfg, p)
			if len(pipe.workers) != 4 || pipe.workers[0].m != 3 {
				t.Fatalf("%d goroutines of %d envs, want 4 of 3", len(pipe.workers), pipe.workers[0].m)
			}
			const steps, rollouts = 10, 5
			s := newStream(t, str, StreamConfig{Slots: 2, Steps: steps})
			collect := func(k int) *Rollout {
				t.Helper()
				want, err := ref.Collect(ctx, steps)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pipe.Collect(ctx, steps)
				if err != nil {
					t.Fatal(err)
				}
				closeFinalValues(t, fmt.Sprintf("rollout %d, Collect", k), want, got)
				identicalRollout(t, fmt.Sprintf("rollout %d, Collect", k), want, got)
				return want
			}
			// Holding both slots, the stream's workers wait for a free one, so weights
			// published now reach the third rollout's first step, as they reach the third
			// Collect's.
			a, r0 := next(t, s)
			b, r1 := next(t, s)
			for k, r := range []*Rollout{r0, r1} {
				want := collect(k)
				closeFinalValues(t, fmt.Sprintf("rollout %d, Stream", k), want, r)
				identicalRollout(t, fmt.Sprintf("rollout %d, Stream", k), want, r)
			}
			episodes := len(r0.Episodes) + len(r1.Episodes)
			tr.perturb(rand.New(rand.NewPCG(3, 4)), 0.05)
			for _, b := range []*Batcher{ref, pipe, str} {
				if err := b.Publish(ctx, 1, tr.flat); err != nil {
					t.Fatal(err)
				}
			}
			release(t, s, a, b)
			for k := 2; k < rollouts; k++ {
				slot, r := next(t, s)
				want := collect(k)
				closeFinalValues(t, fmt.Sprintf("rollout %d, Stream", k), want, r)
				identicalRollout(t, fmt.Sprintf("rollout %d, Stream", k), want, r)
				release(t, s, slot)
				episodes += len(want.Episodes)
			}
			if episodes < 4 {
				t.Fatalf("%d episodes: the order of the episodes is hardly compared", episodes)
			}
		})
	}
}

// closeFinalValues checks that got's FinalValues are want's within float32 rounding, and
// then makes them want's: a half evaluates the final observations of its own envs' truncated
// episodes in one call, the unpipelined worker those of all its envs, and ONNX Runtime's
// results for a row can differ in the last bits between batches of a few rows (mlp_tanh's
// do at 1 and 2 rows; so do those of a batcher of 3×2 envs against 1×6).
func closeFinalValues(t *testing.T, what string, want, got *Rollout) {
	t.Helper()
	for k, v := range want.FinalValues[:want.T*want.N] {
		if want.Truncated[k] == 0 || want.Terminated[k] != 0 {
			continue // not an episode cut by its time limit: FinalValues[k] is not written
		}
		if d := math.Abs(float64(got.FinalValues[k] - v)); d > 1e-6*max(1, math.Abs(float64(v))) {
			t.Fatalf("%s: FinalValues[%d] %v, want %v", what, k, got.FinalValues[k], v)
		}
	}
	for k := range want.T * want.N {
		if want.Truncated[k] != 0 && want.Terminated[k] == 0 {
			got.FinalValues[k] = want.FinalValues[k]
		}
	}
}

// TestPipelineConfig: Pipeline needs an even number of envs per worker and one env thread,
// and a pipelined batcher cannot be snapshotted.
func TestPipelineConfig(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []Config{
		{Env: envSpec("CartPole-v1"), EnvsPerWorker: 5, Pipeline: true},
		{Env: envSpec("CartPole-v1"), EnvsPerWorker: 4, EnvThreads: 2, Pipeline: true},
	} {
		if b, err := New(ctx, cfg, nil); !errors.Is(err, ErrConfig) {
			if err == nil {
				b.Close()
			}
			t.Errorf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 4, Pipeline: true}, nil)
	if _, err := b.Snapshot(); !errors.Is(err, ErrSnapshot) {
		t.Errorf("Snapshot of a pipelined batcher: %v, want ErrSnapshot", err)
	}
}

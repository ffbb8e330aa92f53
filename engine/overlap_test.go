package engine

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"testing"
)

// TestReplayOverlap runs replayRuns' dqn and sac runs (and sac with gSDE) with OverlapCollection and checks it
// against the same runs without: every iteration collects the same env steps and runs the
// same updates; the metrics are identical while the actions are random (before
// learning_starts nothing has been learnt, so the batchers lose nothing by acting one
// collection behind); the runs part once learning starts, which shows the batchers collect
// with the network from before the latest updates. A run killed after iteration 6 and
// resumed is then the uninterrupted one (resumeMatches): the pipeline drains at the end of
// every iteration.
func TestReplayOverlap(t *testing.T) {
	runs := replayRuns()
	sde := runs[1] // SAC with gSDE: its noise drawn at each publish, before the updates beside the collection
	sde.UseSDE, sde.LogStdInit = true, -2
	for _, cfg := range append(runs, sde) {
		name := cfg.Algo
		if cfg.UseSDE {
			name += "-gSDE"
		}
		t.Run(name, func(t *testing.T) {
			if cfg.Algo == "dqn" {
				// At the default 1e-4 the greedy actions of CartPole's Q-network do not
				// change within one collection of these short runs.
				cfg.LR = 3e-3
			}
			ctx := context.Background()
			seq, ov := filepath.Join(t.TempDir(), "seq"), filepath.Join(t.TempDir(), "overlap")
			if _, err := Train(ctx, cfg, Options{Out: seq}); err != nil {
				t.Fatal(err)
			}
			cfg.OverlapCollection = true
			if _, err := Train(ctx, cfg, Options{Out: ov}); err != nil {
				t.Fatal(err)
			}
			a, b := readMetrics(t, seq), readMetrics(t, ov)
			if len(a) != 12 || len(b) != 12 {
				t.Fatalf("%d and %d metrics lines, want 12", len(a), len(b))
			}
			random := 0 // iterations whose collections all came before learning_starts
			for i := range a {
				if a[i].EnvSteps != b[i].EnvSteps || a[i].Replay.Updates != b[i].Replay.Updates {
					t.Fatalf("iteration %d: %d steps and %d updates without overlap, %d and %d with", i+1,
						a[i].EnvSteps, a[i].Replay.Updates, b[i].EnvSteps, b[i].Replay.Updates)
				}
				if a[i].EnvSteps <= cfg.LearningStarts {
					random++
				}
			}
			am, bm := metricsWithoutTimings(t, seq), metricsWithoutTimings(t, ov)
			for i := range random {
				if !reflect.DeepEqual(am[i], bm[i]) {
					t.Fatalf("iteration %d, before learning starts, differs:\n%v\n%v", i+1, am[i], bm[i])
				}
			}
			if random == 0 || random == len(a) {
				t.Fatalf("%d of %d iterations before learning_starts: the test needs both kinds", random, len(a))
			}
			if bytes.Equal(readFile(t, filepath.Join(seq, policyFile)), readFile(t, filepath.Join(ov, policyFile))) {
				t.Fatal("the overlapped run ended with the sequential run's policy: its batchers did not act behind the learner")
			}
			resumeMatches(t, cfg)
		})
	}
}

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// metricsWithoutTimings reads metrics.jsonl, dropping the wall-clock fields.
func metricsWithoutTimings(t *testing.T, dir string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for line := range bytes.Lines(data) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"wall_seconds", "collect_steps_per_sec", "learn_samples_per_sec", "collect_seconds", "learn_seconds", "publish_seconds", "checkpoint_seconds", "allreduce_seconds", "allreduce_us_per_update"} {
			delete(m, k)
		}
		if r, ok := m["replay"].(map[string]any); ok { // an off-policy run's
			delete(r, "updates_per_sec")
		}
		if e, ok := m["eval"].(map[string]any); ok {
			delete(e, "seconds")
		}
		out = append(out, m)
	}
	return out
}

// sameRun checks that the resumed run in cut wrote the uninterrupted run's (full) metrics
// lines, iters of them, and its policy.onnx, byte for byte.
func sameRun(t *testing.T, full, cut string, iters int) {
	t.Helper()
	a, b := metricsWithoutTimings(t, full), metricsWithoutTimings(t, cut)
	if len(a) != iters || len(b) != iters {
		t.Fatalf("%d and %d metrics lines, want %d", len(a), len(b), iters)
	}
	for i := range a {
		ja, _ := json.Marshal(a[i])
		jb, _ := json.Marshal(b[i])
		if !bytes.Equal(ja, jb) {
			t.Fatalf("iteration %d differs:\nuninterrupted %s\nresumed       %s", i+1, ja, jb)
		}
	}
	pa, _ := os.ReadFile(filepath.Join(full, "policy.onnx"))
	pb, _ := os.ReadFile(filepath.Join(cut, "policy.onnx"))
	if !bytes.Equal(pa, pb) {
		t.Fatal("the resumed run's policy.onnx differs from the uninterrupted run's")
	}
}

// TestResumeMatchesUninterrupted kills a run after iteration 6 (its last checkpoint is at 4),
// resumes it, and checks that every metrics line and the final policy are those of the same
// run made without interruption: plain CartPole, and Pendulum with observation normalisation
// and reward scaling (their statistics and the envs' discounted returns in the checkpoint).
func TestResumeMatchesUninterrupted(t *testing.T) {
	for _, cfg := range []Config{
		{Env: "CartPole-v1", TotalSteps: 512 * 12, CheckpointEvery: 4, Seed: 5, EvalEpisodes: -1},
		{Env: "Pendulum-v1", Envs: 2, RolloutSteps: 128, Minibatches: 4, TotalSteps: 256 * 12, CheckpointEvery: 4, Seed: 6,
			EvalEpisodes: -1, NormObs: true, NormReward: true},
	} {
		t.Run(cfg.Env, func(t *testing.T) { resumeMatches(t, cfg) })
	}
}

func resumeMatches(t *testing.T, cfg Config) {
	ctx := context.Background()
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, cfg, Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut")
	trainKilled(t, cfg, Options{Out: cut}, 6)
	if n := len(metricsWithoutTimings(t, cut)); n != 6 {
		t.Fatalf("the killed run wrote %d metrics lines", n)
	}
	if _, err := Train(ctx, cfg, Options{Out: cut}); err == nil || !strings.Contains(err.Error(), "already holds a run") {
		t.Fatalf("Train over an existing run: %v", err)
	}
	res, err := Resume(ctx, cut, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.EnvSteps != cfg.TotalSteps || res.Iterations != 12 {
		t.Fatalf("resumed result %+v", res)
	}
	sameRun(t, full, cut, 12)
	if _, err := Resume(ctx, filepath.Join(t.TempDir(), "none"), Options{}); err == nil {
		t.Fatal("resumed a missing run")
	}
}

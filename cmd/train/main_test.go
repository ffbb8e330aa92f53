package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/engine"
	"go.uber.org/zap"
)

func TestTrainAndResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	var out bytes.Buffer
	cfg := engine.Config{Env: "CartPole-v1", TotalSteps: 2048, EvalEpisodes: 3}
	if err := run(context.Background(), &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"eval_return_mean", "env_steps", "wall_seconds", "policy"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %s: %s", k, out.String())
		}
	}
	if sum["policy"] != filepath.Join(dir, "policy.onnx") || sum["env_steps"].(float64) != 2048 {
		t.Fatalf("summary %s", out.String())
	}
	// Resuming a finished run has nothing left to do but evaluate; it must not fail or retrain.
	out.Reset()
	if err := run(context.Background(), &out, zap.NewNop(), nil, engine.Config{}, nil, "", dir, "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), &out, zap.NewNop(), nil, engine.Config{}, nil, dir, "", "", nil, serveFlags{}); err == nil {
		t.Fatal("no --env accepted")
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestOffPolicyFlags: --algo dqn and --algo sac with --env alone take RL Zoo's preset for
// the env (dqn's with SB3's max target, and on CartPole the evaluations that stop the run once
// solved); the off-policy flags, --dqn-target among them, set their fields over it
// (--learning-starts 0 is an explicit 0, learning from the first collection), and a --config
// file's null stop_at_return with eval_every 0 leaves RL Zoo's plain run (as
// docs/offpolicy.md says), and so do --eval-every 0 and --eval-episodes -1; a short dqn run writes its summary and the replay figures in
// metrics.jsonl.
func TestOffPolicyFlags(t *testing.T) {
	cfg, c, err := configure(t, nil, "--algo", "dqn", "--env", "CartPole-v1")
	if err != nil || !c.ok || cfg.Preset != "dqn/CartPole-v1" || cfg.TotalSteps != 50_000 || cfg.TrainFreq != 256 || cfg.GradientSteps != 128 ||
		cfg.DQNTarget != "max" || cfg.EvalEvery != 1024 || cfg.EvalEpisodes != 100 || cfg.StopAtReturn == nil || *cfg.StopAtReturn != 475 {
		t.Fatalf("--algo dqn --env CartPole-v1: %+v %v", cfg, err)
	}
	cfg, _, err = configure(t, nil, "--algo", "dqn", "--env", "CartPole-v1", "--dqn-target", "double")
	if err != nil || cfg.DQNTarget != "double" {
		t.Fatalf("--dqn-target double over the preset's max: %q %v", cfg.DQNTarget, err)
	}
	cfg, c, err = configure(t, nil, "--algo", "sac", "--env", "Pendulum-v1")
	if err != nil || !c.ok || cfg.Preset != "sac/Pendulum-v1" || cfg.TotalSteps != 20_000 || cfg.LR != 1e-3 {
		t.Fatalf("--algo sac --env Pendulum-v1: %+v %v", cfg, err)
	}
	// No evaluations asked for on the command line drops the preset's, and the stop they
	// serve; --stop-at-return given keeps it.
	for _, args := range [][]string{{"--eval-every", "0"}, {"--eval-episodes", "-1"}} {
		cfg, _, err = configure(t, nil, append([]string{"--algo", "dqn", "--env", "CartPole-v1"}, args...)...)
		if err != nil || cfg.EvalEvery != 0 || cfg.StopAtReturn != nil {
			t.Fatalf("%v over the preset: eval_every %d, stop_at_return %v (%v)", args, cfg.EvalEvery, cfg.StopAtReturn, err)
		}
	}
	cfg, _, err = configure(t, nil, "--algo", "dqn", "--env", "CartPole-v1", "--eval-every", "0", "--stop-at-return", "400")
	if err != nil || cfg.StopAtReturn == nil || *cfg.StopAtReturn != 400 {
		t.Fatalf("--eval-every 0 --stop-at-return 400: stop_at_return %v (%v)", cfg.StopAtReturn, err)
	}
	plain := []byte(`{"eval_every": 0, "stop_at_return": null}`)
	cfg, _, err = configure(t, plain, "--algo", "dqn", "--env", "CartPole-v1", "--learning-starts", "0", "--batch-size", "16",
		"--train-freq", "8", "--gradient-steps", "-1", "--buffer-size", "5000", "--no-buffer-checkpoint", "--rollout-steps", "64",
		"--total-steps", "1024", "--hidden", "16,16", "--eval-episodes", "-1")
	if err != nil || cfg.LearningStarts != -1 || cfg.BatchSize != 16 || cfg.TrainFreq != 8 || cfg.GradientSteps != -1 ||
		cfg.BufferSize != 5000 || !cfg.NoBufferCheckpoint || cfg.EvalEvery != 0 || cfg.StopAtReturn != nil {
		t.Fatalf("off-policy flags: %+v %v", cfg, err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	var out bytes.Buffer
	if err := run(context.Background(), &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	var sum struct {
		EnvSteps int64 `json:"env_steps"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.EnvSteps != 1024 {
		t.Fatalf("summary %s (%v)", out.String(), err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil || strings.Count(string(b), `"buffer_fill"`) != 16 {
		t.Fatalf("metrics.jsonl: %v\n%s", err, b)
	}
}

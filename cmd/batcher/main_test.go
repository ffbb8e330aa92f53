package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestCollectToShards(t *testing.T) {
	out := filepath.Join(t.TempDir(), "data")
	var stdout bytes.Buffer
	o := options{policy: "../../testdata/mlp_tanh.onnx", env: "CartPole-v1", envs: 8, workers: 2, steps: 1000, rollout: 25, out: out, seed: 1}
	o.flags.Device = "cpu"
	if err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o); err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout.String())
	}
	for _, k := range []string{"steps", "episodes", "return_mean", "return_std", "steps_per_sec", "policy", "env", "device"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %q: %s", k, stdout.String())
		}
	}
	if sum["device"] != "cpu" {
		t.Errorf("device %v, want cpu", sum["device"])
	}
	// 1000 steps over 16 envs: 63 steps per env (1008 in all), in rollouts of 25, 25 and 13.
	if sum["steps"].(float64) != 1008 || len(sum["shards"].([]any)) != 3 {
		t.Fatalf("summary %s", stdout.String())
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 3 {
		t.Fatalf("%d files in the output folder", len(entries))
	}
}

// TestAutoDeviceReportsWhereItRan: --device auto reports the provider the sessions got, never
// "auto" (cpu here without a GPU, cuda on a GPU machine with `make gpu-setup`).
func TestAutoDeviceReportsWhereItRan(t *testing.T) {
	var stdout bytes.Buffer
	o := options{policy: "../../testdata/mlp_tanh.onnx", env: "CartPole-v1", envs: 4, workers: 1, steps: 40, rollout: 10, seed: 1}
	o.flags.Device = "auto"
	if err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o); err != nil {
		t.Fatal(err)
	}
	var sum struct{ Device string }
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Device != "cpu" && sum.Device != "cuda" {
		t.Fatalf("device %q, want the provider the policy ran on", sum.Device)
	}
}

func TestRefusedBeforeAnyStep(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		name string
		o    options
		want []string
	}{
		{"policy does not fit", options{policy: "../../testdata/gaussian_relu.onnx", env: "CartPole-v1"}, []string{"[3]", "[4]"}},
		{"unwritable out", options{policy: "random", env: "CartPole-v1", out: filepath.Join(file, "x")}, []string{"output folder"}},
		{"unknown env", options{policy: "random", env: "Pong-v5"}, []string{"CartPole-v1"}},
		{"no policy", options{env: "CartPole-v1"}, []string{"--policy"}},
		{"foreign spec", options{policy: "../../testdata/gaussian_relu.onnx", env: "Pendulum-v1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.envs, tc.o.workers, tc.o.steps, tc.o.rollout = 4, 1, 40, 10
			tc.o.flags.Device = "cpu"
			var stdout bytes.Buffer
			err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), tc.o)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %s", err, w)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("printed %s", stdout.String())
			}
		})
	}
}

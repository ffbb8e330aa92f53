package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/batcher"
	"go.uber.org/zap"
)

func TestEval(t *testing.T) {
	for _, policy := range []string{"random", "../../testdata/gaussian_relu.onnx"} {
		env := "Pendulum-v1"
		var stdout bytes.Buffer
		o := options{policy: policy, env: env, episodes: 3, seed: 2}
		o.flags.Device = "cpu"
		if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
			t.Fatal(err)
		}
		var sum struct {
			Episodes   int     `json:"episodes"`
			ReturnMean float64 `json:"return_mean"`
			ReturnStd  float64 `json:"return_std"`
			LengthMean float64 `json:"length_mean"`
			Device     string  `json:"device"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		// Pendulum episodes are 200 steps; rewards are in [-16.27, 0] per step.
		want := "cpu"
		if policy == "random" {
			want = "random"
		}
		if sum.Episodes != 3 || sum.LengthMean != 200 || sum.ReturnMean > 0 || sum.ReturnMean < -16.28*200 || sum.Device != want {
			t.Fatalf("%s: %s", policy, stdout.String())
		}
	}
	if err := run(context.Background(), &bytes.Buffer{}, zap.NewNop(), options{env: "CartPole-v1"}); err == nil {
		t.Fatal("no --policy accepted")
	}
}

// TestSizesRefused: the crash-sized --envs of issue 13 defect 7 and out-of-range values are
// errors naming the flag, before any env or session is made.
func TestSizesRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*options)
		want string
	}{
		// Pendulum: (8 GiB - 68 MiB - 10·64) / (432 + 64·64) bytes per env
		// (batcher/dataset_memory_test.go counts them).
		{"1e8 envs", func(o *options) { o.envs = 100000000 },
			"--envs 100000000: batcher: not enough memory: Pendulum-v1 with 100000000 envs × 64 steps and 10 episodes needs about 421.8 GiB, and 8.0 GiB is available (test); at most --envs 1881323 fits with --episodes 10"},
		{"2^62 envs", func(o *options) { o.envs = 1 << 62 }, "--envs 4611686018427387904: batcher: not enough memory"},
		// (8 GiB - 68 MiB - 16·(432 + 64·64)) / 64 bytes an episode.
		{"max episodes", func(o *options) { o.episodes = math.MaxInt },
			"--episodes 9223372036854775807: batcher: not enough memory: Pendulum-v1 with 16 envs × 64 steps and 9223372036854775807 episodes needs more than 64 bits can count (the sizes' product overflows), and 8.0 GiB is available (test); at most --episodes 133102484 fits with --envs 16"},
		{"both", func(o *options) { o.envs, o.episodes = 1<<62, 1<<62 }, "--envs 4611686018427387904 --episodes 4611686018427387904: batcher: not enough memory"},
		{"zero episodes", func(o *options) { o.episodes = 0 }, "--episodes 0: want at least 1"},
		{"negative envs", func(o *options) { o.envs = -1 }, "--envs -1: want at least 1 (or 0: min(--episodes, 16))"},
		{"threads -7", func(o *options) { o.flags.Threads = -7 }, fmt.Sprintf("--threads -7: want -1 (one per core) or 1 to %d (the cores here)", runtime.NumCPU())},
		{"threads 1000", func(o *options) { o.flags.Threads = 1000 }, "--threads 1000: want -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{policy: "random", env: "Pendulum-v1", episodes: 10, mem: batcher.Memory{Available: 8 << 30, Source: "test"}}
			tc.edit(&o)
			var stdout bytes.Buffer
			err := run(context.Background(), &stdout, zap.NewNop(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) || stdout.Len() != 0 {
				t.Fatalf("error %v, want %q (printed %q)", err, tc.want, stdout.String())
			}
		})
	}
	// With this machine's memory.
	o := options{policy: "random", env: "Pendulum-v1", episodes: 10, envs: 1 << 40}
	if err := run(context.Background(), &bytes.Buffer{}, zap.NewNop(), o); !errors.Is(err, batcher.ErrMemory) {
		t.Fatalf("2^40 envs: %v", err)
	}
}

// TestForeignPoliciesNoFlags: policies from other libraries run with no extra flag, and the
// flags that override the recognition reach it.
func TestForeignPoliciesNoFlags(t *testing.T) {
	const dir = "../../testdata/foreign/"
	for _, tc := range []struct {
		name, policy, env string
		edit              func(*options)
		lo, hi            float64 // mean return bounds
		err               string
	}{
		// SB3's documented export: fixed batch 1, actions/values/log_prob outputs.
		{name: "sb3", policy: "sb3_ppo_cartpole", env: "CartPole-v1", lo: 490, hi: 500},
		// SAC's tanh(mean) in [-1, 1] mapped onto [-2, 2]; --action-scale none halves the
		// torque, and the pendulum no longer swings up.
		{name: "sac", policy: "sb3_sac_pendulum", env: "Pendulum-v1", lo: -400, hi: 0},
		{name: "sac unscaled", policy: "sb3_sac_pendulum", env: "Pendulum-v1", edit: func(o *options) { o.flags.ActionScale = "none" }, lo: -2000, hi: -500},
		// Recurrent policies on CartPole without velocities.
		{name: "sb3-contrib lstm", policy: "sb3c_recurrentppo_cartpole", env: "CartPoleNoVel-v1", lo: 400, hi: 500},
		{name: "sample factory gru", policy: "sf_cartpole_gru", env: "CartPoleNoVel-v1", lo: 300, hi: 500},
		// A mean without a log_std cannot be sampled.
		{name: "deterministic only", policy: "sb3_ppo_pendulum_old", env: "Pendulum-v1", edit: func(o *options) { o.sample = true }, err: "--sample"},
		{name: "bad actions flag", policy: "sb3_ppo_cartpole", env: "CartPole-v1", edit: func(o *options) { o.flags.Actions = "nope" }, err: "--actions-output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			o := options{policy: dir + tc.policy + ".onnx", env: tc.env, episodes: 8, seed: 3}
			o.flags.Device = "cpu"
			if tc.edit != nil {
				tc.edit(&o)
			}
			err := run(context.Background(), &stdout, zap.NewNop(), o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sum struct {
				ReturnMean float64 `json:"return_mean"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.ReturnMean < tc.lo || sum.ReturnMean > tc.hi {
				t.Fatalf("mean return %.1f, want %v to %v", sum.ReturnMean, tc.lo, tc.hi)
			}
		})
	}
}

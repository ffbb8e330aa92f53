package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/dataset"
	"github.com/towerrl/towerrl/envs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// runSummary runs the batcher with o on the CPU and returns the JSON summary it prints, and the
// printed text.
func runSummary(t *testing.T, o options) (map[string]any, string) {
	t.Helper()
	var stdout bytes.Buffer
	o.flags.Device = "cpu"
	if err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o); err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout: %v\n%s", err, stdout.String())
	}
	return sum, stdout.String()
}

func TestCollectToShards(t *testing.T) {
	out := filepath.Join(t.TempDir(), "data")
	sum, stdout := runSummary(t, options{policy: "../../testdata/mlp_tanh.onnx", env: "CartPole-v1", envs: 8, workers: 2, steps: 1000, rollout: 25, out: out, seed: 1})
	for _, k := range []string{"steps", "episodes", "return_mean", "return_std", "steps_per_sec", "policy", "env", "device"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %q: %s", k, stdout)
		}
	}
	if sum["device"] != "cpu" {
		t.Errorf("device %v, want cpu", sum["device"])
	}
	// 1000 steps over 16 envs: 63 steps per env (1008 in all), in rollouts of 25, 25 and 13.
	if sum["steps"].(float64) != 1008 || len(sum["shards"].([]any)) != 3 {
		t.Fatalf("summary %s", stdout)
	}
	entries, _ := os.ReadDir(out)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != ".lock,manifest.json,shard-000000.npz,shard-000001.npz,shard-000002.npz" {
		t.Fatalf("output folder holds %s", got)
	}
	if sum["manifest"] != filepath.Join(out, "manifest.json") {
		t.Fatalf("summary names manifest %v", sum["manifest"])
	}
}

// TestPipelineSameShards: --pipeline writes the shards, byte for byte, and the episodes'
// figures that the same run without it does (2 workers × 8 envs, seed 3).
func TestPipelineSameShards(t *testing.T) {
	shards := func(pipeline bool) ([][]byte, map[string]any) {
		out := filepath.Join(t.TempDir(), "data")
		sum, _ := runSummary(t, options{policy: "../../testdata/mlp_tanh.onnx", env: "CartPole-v1", envs: 8, workers: 2, steps: 2000, rollout: 25,
			out: out, seed: 3, pipeline: pipeline})
		var data [][]byte
		for _, p := range sum["shards"].([]any) {
			b, err := os.ReadFile(p.(string))
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b)
		}
		return data, sum
	}
	want, ws := shards(false)
	got, gs := shards(true)
	if len(got) != len(want) || len(want) != 5 {
		t.Fatalf("%d shards with --pipeline, %d without; want 5", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("shard %d differs with --pipeline", i)
		}
	}
	for _, k := range []string{"episodes", "return_mean", "return_std"} {
		if gs[k] != ws[k] {
			t.Errorf("%s %v with --pipeline, %v without", k, gs[k], ws[k])
		}
	}
	if gs["pipeline"] != true {
		t.Errorf("summary: pipeline %v", gs["pipeline"])
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

// TestSizesRefusedBeforeAllocating: the crash-sized flags of issue 13 defect 7 (a fatal OOM,
// a division by zero) and out-of-range values are errors naming the flag, before any folder,
// env or session is made.
func TestSizesRefusedBeforeAllocating(t *testing.T) {
	out := filepath.Join(t.TempDir(), "data")
	cores := runtime.NumCPU()
	for _, tc := range []struct {
		name string
		edit func(*options)
		want string
	}{
		// (8 GiB - 68 MiB) / (480 + 114) bytes per env (batcher/dataset_memory_test.go counts them).
		{"1e8 envs", func(o *options) { o.envs, o.rollout = 100000000, 128 },
			"--envs 100000000 --workers 1 --rollout 128: batcher: not enough memory: CartPole-v1 with 1 worker × 100000000 envs × 1 step needs about 55.4 GiB, and 8.0 GiB is available (test); with --workers 1 and rollouts of 1 at most --envs 14341130 fits (or lower --workers or --rollout)"},
		{"1e8 envs, long rollouts", func(o *options) { o.envs, o.steps = 100000000, 1<<40 },
			"CartPole-v1 with 1 worker × 100000000 envs × 128 steps needs about 1.4 TiB"},
		{"2^62 envs × 4 workers", func(o *options) { o.envs, o.workers = 4611686018427387904, 4 },
			"--envs 4611686018427387904 --workers 4 --rollout 128: batcher: not enough memory: CartPole-v1 with 4 workers × 4611686018427387904 envs × 128 steps needs more than 64 bits can count (the sizes' product overflows)"},
		{"many workers", func(o *options) { o.workers, o.envs = 100000, 1 },
			"even --envs 1 does not fit with --workers 100000; at most --workers 2031 fits with --envs 1"},
		{"huge rollout", func(o *options) { o.rollout, o.steps = 1<<60, 1<<60 },
			"at most --rollout 74724832 fits with --envs 1 --workers 1"},
		{"steps overflow", func(o *options) { o.envs, o.steps = 3, math.MaxInt64 },
			"--steps 9223372036854775807: rounded up to a multiple of W·M = 3 it overflows 64 bits; want at most 9223372036854775806"},
		{"zero steps", func(o *options) { o.steps = 0 }, "--steps 0: want at least 1"},
		{"negative steps", func(o *options) { o.steps = -5 }, "--steps -5: want at least 1"},
		{"zero envs", func(o *options) { o.envs = 0 }, "--envs 0: want at least 1"},
		{"negative workers", func(o *options) { o.workers = -2 }, "--workers -2: want at least 1"},
		{"zero rollout", func(o *options) { o.rollout = 0 }, "--rollout 0: want at least 1"},
		{"negative env threads", func(o *options) { o.envThreads = -1 }, "--env-threads -1: want at least 1"},
		{"pipeline odd envs", func(o *options) { o.pipeline, o.envs = true, 3 }, "--pipeline splits --envs in two halves: --envs 3, want an even number"},
		{"pipeline env threads", func(o *options) { o.pipeline, o.envs, o.envThreads = true, 2, 2 }, "--pipeline with --env-threads 2: want one of them"},
		{"threads -7", func(o *options) { o.flags.Threads = -7 }, fmt.Sprintf("--threads -7: want -1 (one per core) or 1 to %d (the cores here)", cores)},
		{"threads 1000", func(o *options) { o.flags.Threads = 1000 }, "--threads 1000: want -1"},
		{"append without out", func(o *options) { o.appendRun, o.out = true, "" }, "--append needs --out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options{policy: "random", env: "CartPole-v1", envs: 1, workers: 1, rollout: 128, steps: 100, out: out,
				mem: batcher.Memory{Available: 8 << 30, Source: "test"}}
			tc.edit(&o)
			var stdout bytes.Buffer
			err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) || stdout.Len() != 0 {
				t.Fatalf("made the output folder (%v) or printed %q", err, stdout.String())
			}
		})
	}
	// With this machine's memory: a typo-sized --envs and --rollout cannot fit anywhere.
	o := options{policy: "random", env: "CartPole-v1", envs: 100000000, workers: 1, rollout: 100000, steps: 1 << 50}
	if err := run(context.Background(), io.Discard, io.Discard, zap.NewNop(), o); !errors.Is(err, batcher.ErrMemory) {
		t.Fatalf("1e8 envs × 1e5 steps: %v", err)
	}
}

func collect(t *testing.T, out string, seed uint64, appendRun bool) (summary, error) {
	t.Helper()
	var stdout bytes.Buffer
	o := options{policy: "random", env: "CartPole-v1", envs: 4, workers: 2, steps: 80, rollout: 5, out: out, seed: seed, appendRun: appendRun}
	err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o)
	var sum summary
	if err == nil {
		err = json.Unmarshal(stdout.Bytes(), &sum)
	}
	return sum, err
}

// TestRerunRefusedAppendContinues reproduces defect 2 of issue 13 with the command: a second
// run into a folder holding shards is refused, its shards untouched; --append numbers its
// shards after them and the manifest lists both runs.
func TestRerunRefusedAppendContinues(t *testing.T) {
	out := filepath.Join(t.TempDir(), "data")
	first, err := collect(t, out, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, p := range first.Shards {
		before[p], _ = os.ReadFile(p)
	}
	_, err = collect(t, out, 2, false)
	want := "--out: dataset: the output folder already holds a dataset: " + out +
		" holds 2 shards (shard-000000.npz … shard-000001.npz) and manifest.json (1 run); nothing was written; pass --append to add this run's shards after them"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("re-run: %v, want %q", err, want)
	}
	second, err := collect(t, out, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(second.Shards, ","); got != filepath.Join(out, "shard-000002.npz")+","+filepath.Join(out, "shard-000003.npz") {
		t.Fatalf("appended shards %s", got)
	}
	for p, b := range before {
		if now, _ := os.ReadFile(p); !bytes.Equal(now, b) {
			t.Fatalf("append changed %s", p)
		}
	}
	m, err := dataset.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Runs) != 2 {
		t.Fatalf("%d runs in the manifest", len(m.Runs))
	}
	for i, r := range m.Runs {
		// 80 steps over 8 envs: 10 steps per env, in two shards of 5 × 8 rows.
		if r.Seed != uint64(i+1) || r.Steps != 80 || !r.Complete || len(r.Shards) != 2 || r.Shards[0].Rows != 40 ||
			r.Policy != "random" || r.Workers != 2 || r.EnvsPerWorker != 4 || r.Rollout != 5 {
			t.Errorf("run %d: %+v", i+1, r)
		}
	}
	if _, err := collect(t, out, 2, true); err == nil || !strings.Contains(err.Error(), "seed 2 and deterministic=false: this run would repeat its trajectories") {
		t.Fatalf("same seed appended: %v", err)
	}
}

// TestSecondWriterRefused: a writer in another process holds the folder; the command is
// refused, told that process's PID, and runs once it has gone.
func TestSecondWriterRefused(t *testing.T) {
	if dir := os.Getenv("TOWERRL_BATCHER_HOLDER"); dir != "" {
		d, err := dataset.Open(dir, cartPole(t), dataset.Run{}, false)
		if err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		fmt.Println("holding")
		io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
		d.Close()
		os.Exit(0)
	}
	out := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run", "^TestSecondWriterRefused$")
	child.Env = append(os.Environ(), "TOWERRL_BATCHER_HOLDER="+out)
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "holding\n" {
		t.Fatalf("child: %q", line)
	}
	_, err := collect(t, out, 1, false)
	want := fmt.Sprintf("dataset: the output folder is in use by another writer: %s is locked by another writer, PID %d", out, child.Process.Pid)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second writer: %v, want %q", err, want)
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := collect(t, out, 1, false); err != nil {
		t.Fatalf("after the first writer left: %v", err)
	}
}

// TestRefusedPolicyLeavesNoFolder: a run refused after the output folder was taken (here the
// policy does not fit the env) removes the folder it made.
func TestRefusedPolicyLeavesNoFolder(t *testing.T) {
	out := filepath.Join(t.TempDir(), "data")
	o := options{policy: "../../testdata/gaussian_relu.onnx", env: "CartPole-v1", envs: 4, workers: 1, steps: 40, rollout: 10, out: out}
	o.flags.Device = "cpu"
	if err := run(context.Background(), io.Discard, io.Discard, zap.NewNop(), o); !errors.Is(err, bind.ErrPolicy) {
		t.Fatalf("error %v, want the policy refused", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("output folder left: %v", err)
	}
}

// TestForeignPolicies: exports from other libraries collect with no extra flag, at full batch
// (SB3's fixed batch 1 made dynamic), recurrent ones too; a policy without a distribution
// needs --deterministic.
func TestForeignPolicies(t *testing.T) {
	const dir = "../../testdata/foreign/"
	for _, tc := range []struct {
		name, policy, env string
		deterministic     bool
		err               string
	}{
		{name: "sb3 fixed batch", policy: "sb3_ppo_cartpole", env: "CartPole-v1"},
		{name: "sac", policy: "sb3_sac_pendulum", env: "Pendulum-v1"},
		{name: "rllib lstm", policy: "rllib_cartpole_lstm", env: "CartPoleNoVel-v1"},
		{name: "sb3-contrib lstm", policy: "sb3c_recurrentppo_cartpole", env: "CartPoleNoVel-v1"},
		{name: "mean without log_std", policy: "sb3_ppo_pendulum_old", env: "Pendulum-v1", err: "--deterministic"},
		{name: "mean without log_std, deterministic", policy: "sb3_ppo_pendulum_old", env: "Pendulum-v1", deterministic: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "data")
			var stdout bytes.Buffer
			o := options{policy: dir + tc.policy + ".onnx", env: tc.env, envs: 8, workers: 2, steps: 640, rollout: 20, out: out,
				deterministic: tc.deterministic}
			o.flags.Device = "cpu"
			err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o)
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
				Steps  int64    `json:"steps"`
				Shards []string `json:"shards"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.Steps != 640 || len(sum.Shards) != 2 {
				t.Fatalf("summary %s", stdout.String())
			}
		})
	}
}

// TestLogJSONAndStop: with --log-json stderr carries JSON log lines only (no progress bar), and
// a stop request (the first SIGINT/SIGTERM) ends the run after the rollout under way, with its
// shards whole and the manifest marking the run incomplete.
func TestLogJSONAndStop(t *testing.T) {
	var logs bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logs), zapcore.InfoLevel))
	var stderr, stdout bytes.Buffer
	o := options{policy: "random", env: "CartPole-v1", envs: 4, workers: 1, steps: 4000, rollout: 10, seed: 1, jsonLogs: true}
	o.flags.Device = "cpu"
	if err := run(context.Background(), &stdout, io.MultiWriter(&stderr, &logs), log, o); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(logs.String()) {
		if !json.Valid([]byte(line)) {
			t.Fatalf("--log-json wrote a non-JSON line to stderr: %q", line)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"progress"`) {
		t.Errorf("no progress line logged: %s", logs.String())
	}

	out := filepath.Join(t.TempDir(), "data")
	stop := make(chan struct{})
	close(stop)
	o = options{policy: "random", env: "CartPole-v1", envs: 4, workers: 1, steps: 4000, rollout: 10, seed: 1, out: out, stop: stop}
	o.flags.Device = "cpu"
	err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o)
	if err == nil || !strings.Contains(err.Error(), "stopped by a signal after 40 of 4000 steps") {
		t.Fatalf("stopped run: %v", err)
	}
	m, err := dataset.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Runs) != 1 || m.Runs[0].Complete || len(m.Runs[0].Shards) != 1 {
		t.Fatalf("manifest after the stop: %+v", m.Runs)
	}
}

// TestSummaryWithoutEpisodes: a collection in which no episode ended printed "return_mean":0
// and "return_std":0 (train writes null), and --policy random said "device":"random".
func TestSummaryWithoutEpisodes(t *testing.T) {
	sum, stdout := runSummary(t, options{policy: "random", env: "CartPole-v1", envs: 2, workers: 1, steps: 4, rollout: 2, seed: 1})
	if sum["episodes"] != 0.0 || sum["return_mean"] != nil || sum["return_std"] != nil || sum["device"] != "cpu" {
		t.Fatalf("summary %s: want episodes 0, return_mean and return_std null, device cpu", stdout)
	}
}

// cartPole is CartPole-v1's spec.
func cartPole(t testing.TB) envs.Spec {
	t.Helper()
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

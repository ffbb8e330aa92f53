package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/models"
)

// smallRun is a CartPole run of 6 iterations of 512 steps with a checkpoint every 2.
func smallRun(seed uint64) Config {
	return Config{Env: "CartPole-v1", TotalSteps: 512 * 6, CheckpointEvery: 2, Seed: seed, EvalEpisodes: -1}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTrainAfterKilledSetUp: a fresh run killed while it wrote config.json leaves the folder
// holding that write's temporary file (and the lock file); the same command starts the run
// there, and the leftover is gone. Another file of that shape is the user's and is refused.
func TestTrainAfterKilledSetUp(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, ".config.json.tmp-2990714932")
	if err := os.WriteFile(left, []byte(`{"env": "CartPo`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Train(context.Background(), smallRun(1), Options{Out: dir}); err != nil {
		t.Fatalf("Train into a folder holding a killed set-up's config.json temporary: %v", err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover temporary file is still there: %v", err)
	}

	dir = t.TempDir()
	mine := filepath.Join(dir, ".notes.txt.tmp-12")
	if err := os.WriteFile(mine, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Train(context.Background(), smallRun(1), Options{Out: dir}); !errors.Is(err, ErrRunDir) || !strings.Contains(err.Error(), ".notes.txt.tmp-12") {
		t.Fatalf("Train into a folder holding another temporary-looking file: %v", err)
	}
	if !bytes.Equal(readFile(t, mine), []byte("mine")) {
		t.Error("the user's file was changed")
	}
}

// TestTrainRefusesForeignFiles: a folder holding the user's own files (the policy being
// fine-tuned among them) is refused before anything is written, and the files are untouched.
func TestTrainRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	mine := map[string][]byte{"policy.onnx": readFile(t, filepath.Join("..", "testdata", "mlp_tanh.onnx")),
		"config.json": []byte(`{"env": "CartPole-v1", "total_steps": 2048}`), "curve.png": []byte("my picture")}
	for name, b := range mine {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := smallRun(1)
	cfg.InitPolicy = filepath.Join(dir, "policy.onnx")
	_, err := Train(context.Background(), cfg, Options{Out: dir})
	if !errors.Is(err, ErrRunDir) || !strings.Contains(err.Error(), "is not empty") || !strings.Contains(err.Error(), "policy.onnx") {
		t.Fatalf("Train into a folder of the user's files: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(mine) {
		t.Errorf("the folder now holds %d entries, want the user's %d", len(entries), len(mine))
	}
	for name, b := range mine {
		if !bytes.Equal(readFile(t, filepath.Join(dir, name)), b) {
			t.Errorf("%s was changed", name)
		}
	}
}

// TestRunDirLock: while a run holds its directory, a second Train or Resume of it is refused
// naming this process, and the run is unharmed.
func TestRunDirLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	ctx := context.Background()
	var second []error
	cfg := smallRun(2)
	_, err := Train(ctx, cfg, Options{Out: dir, Progress: func(m Metrics) {
		if m.Iteration == 1 {
			_, err := Resume(ctx, dir, Options{})
			second = append(second, err)
			_, err = Train(ctx, cfg, Options{Out: dir})
			second = append(second, err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	pid := "process " + itoa(os.Getpid())
	if !errors.Is(second[0], ErrRunDir) || !strings.Contains(second[0].Error(), "in use by "+pid) {
		t.Errorf("Resume while running: %v", second[0])
	}
	if !errors.Is(second[1], ErrRunDir) {
		t.Errorf("Train while running: %v", second[1])
	}
	if n := len(metricsWithoutTimings(t, dir)); n != 6 {
		t.Errorf("metrics.jsonl has %d lines, want 6", n)
	}
	// Released at the end: a resume of the finished run takes the lock.
	if _, err := Resume(ctx, dir, Options{}); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestResumeGuards covers what a resume refuses and what it repairs.
func TestResumeGuards(t *testing.T) {
	ctx := context.Background()
	runA := filepath.Join(t.TempDir(), "a")
	if _, err := Train(ctx, smallRun(3), Options{Out: runA}); err != nil {
		t.Fatal(err)
	}
	runB := filepath.Join(t.TempDir(), "b")
	if _, err := Train(ctx, smallRun(3), Options{Out: runB}); err != nil {
		t.Fatal(err)
	}

	t.Run("checkpoint of another run", func(t *testing.T) {
		dir := copyRun(t, runB)
		ck := readFile(t, filepath.Join(runA, checkpointFile))
		if err := os.WriteFile(filepath.Join(dir, checkpointFile), ck, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Resume(ctx, dir, Options{}); err == nil || !strings.Contains(err.Error(), "copied from another run") {
			t.Fatalf("resume with run A's checkpoint in run B: %v", err)
		}
	})
	t.Run("config.json edited", func(t *testing.T) {
		dir := copyRun(t, runB)
		path := filepath.Join(dir, configFile)
		edited := bytes.Replace(readFile(t, path), []byte(`"seed": 3`), []byte(`"seed": 4`), 1)
		edited = bytes.Replace(edited, []byte(`"activation": "tanh"`), []byte(`"activation": "relu"`), 1)
		if err := os.WriteFile(path, edited, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Resume(ctx, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), "seed (run: 3, asked: 4)") || !strings.Contains(err.Error(), `activation (run: "tanh", asked: "relu")`) {
			t.Fatalf("resume after editing seed and activation: %v", err)
		}
	})
	t.Run("flags outside the allow-list", func(t *testing.T) {
		dir := copyRun(t, runB)
		_, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.Seed, c.Towers = 9, 2 }})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "seed (run: 3, asked: 9)") || !strings.Contains(err.Error(), "towers") {
			t.Fatalf("resume changing seed and towers: %v", err)
		}
	})
	t.Run("parameters of another shape", func(t *testing.T) {
		// As a checkpoint from a towerrl whose model had another shape would be (a new critic
		// reading more inputs): the run's own checkpoint with one parameter too few.
		dir := copyRun(t, runB)
		path := filepath.Join(dir, checkpointFile)
		ck, err := models.LoadCheckpoint(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := ck.Tensor("params")
		if err := ck.Put("params", []int{len(p.Data) - 1}, p.Data[:len(p.Data)-1]); err != nil {
			t.Fatal(err)
		}
		if err := models.SaveCheckpoint(ctx, path, ck); err != nil {
			t.Fatal(err)
		}
		before := readFile(t, path)
		_, err = Resume(ctx, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`"params" holds %d values, this model has %d`, len(p.Data)-1, len(p.Data))) ||
			!strings.Contains(err.Error(), "train it afresh") {
			t.Fatalf("resume with params of another shape: %v", err)
		}
		if !bytes.Equal(readFile(t, path), before) {
			t.Error("the refused resume changed the checkpoint")
		}
	})
	t.Run("total_steps may grow", func(t *testing.T) {
		dir := copyRun(t, runB)
		tmp := filepath.Join(dir, ".policy.onnx.tmp-123")
		if err := os.WriteFile(tmp, []byte("half a file"), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.TotalSteps = 512 * 8 }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Iterations != 8 || len(metricsWithoutTimings(t, dir)) != 8 {
			t.Fatalf("resumed to %d iterations", res.Iterations)
		}
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the leftover temporary file is still there: %v", err)
		}
		c, err := ParseConfig(readFile(t, filepath.Join(dir, configFile)))
		if err != nil || c.TotalSteps != 512*8 {
			t.Fatalf("config.json after the change: %+v, %v", c, err)
		}
	})
}

// copyRun copies a run directory's files (config, metrics, policy, checkpoint) to a new one.
func copyRun(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	for _, name := range []string{configFile, metricsFile, policyFile, checkpointFile} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), readFile(t, filepath.Join(src, name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestPolicyWriteFails: policy.onnx is written on a goroutine; when a write fails (here its
// path became a folder that is not empty), the run stops with the write's error, naming the
// file, and the checkpoints written before stay; the checkpoint of the iteration whose policy
// failed is not written (a checkpoint is never ahead of policy.onnx: issue 28, item 11).
func TestPolicyWriteFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	block := func(m Metrics) {
		if m.Iteration == 1 { // before the first policy.onnx (iteration 2)
			if err := os.MkdirAll(filepath.Join(dir, policyFile, "x"), 0o755); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := Train(context.Background(), smallRun(5), Options{Out: dir, Progress: block})
	if err == nil || !strings.Contains(err.Error(), policyFile) {
		t.Fatalf("a run whose policy.onnx cannot be written: %v", err)
	}
	ck, lerr := models.LoadCheckpoint(context.Background(), filepath.Join(dir, checkpointFile))
	if lerr != nil || ck.Ints["iteration"] != 0 {
		t.Fatalf("the checkpoint after the failed write: %v (%v)", lerr, err)
	}
	t.Logf("%v; checkpoint at iteration %d", err, ck.Ints["iteration"])
}

// TestStopAndResume: Options.Stop ends the run after the iteration under way with a checkpoint
// (iteration 3 is not a checkpoint interval), the error says how to resume, and the resumed run
// ends with the uninterrupted run's policy. A run cut before its first iteration is resumable.
func TestStopAndResume(t *testing.T) {
	ctx := context.Background()
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, smallRun(4), Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	want := readFile(t, filepath.Join(full, policyFile))

	dir := filepath.Join(t.TempDir(), "stopped")
	err := trainStopped(smallRun(4), Options{Out: dir}, 3)
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "train --resume "+dir) {
		t.Fatalf("stopped run: %v", err)
	}
	c, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
	if err != nil || c.Ints["iteration"] != 3 {
		t.Fatalf("checkpoint after the stop: %v, %v", c, err)
	}
	if _, err := Resume(ctx, dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, policyFile)), want) {
		t.Fatal("the stopped and resumed run's policy differs from the uninterrupted run's")
	}

	// Cut before the first checkpoint: only config.json and an empty metrics.jsonl.
	early := filepath.Join(t.TempDir(), "early")
	if err := os.MkdirAll(early, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{configFile} {
		if err := os.WriteFile(filepath.Join(early, name), readFile(t, filepath.Join(full, name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(early, metricsFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, early, Options{}); err != nil {
		t.Fatalf("resume of a run cut before its first checkpoint: %v", err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(early, policyFile)), want) {
		t.Fatal("the run restarted from its config differs from the uninterrupted run")
	}
}

// TestNonFiniteStops: a learning rate that blows the weights up stops the run at the first
// non-finite loss or weight, naming the iteration and the quantity, and leaves the last good
// policy.onnx and checkpoint as they were.
func TestNonFiniteStops(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := smallRun(5)
	cfg.LR, cfg.ConstantLR, cfg.MaxGradNorm, cfg.CheckpointEvery = 1e38, true, -1, 1
	var lastGood []byte
	_, err := Train(context.Background(), cfg, Options{Out: dir, Progress: func(m Metrics) {
		lastGood = readFile(t, filepath.Join(dir, policyFile))
	}})
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "engine: iteration ") {
		t.Fatalf("diverging run: %v", err)
	}
	t.Log(err)
	if lastGood != nil && !bytes.Equal(readFile(t, filepath.Join(dir, policyFile)), lastGood) {
		t.Fatal("policy.onnx was replaced after the last good iteration")
	}
	c, err := models.LoadCheckpoint(context.Background(), filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Tensor("params")
	if err := finite(algo.Stats{}, p.Data); err != nil {
		t.Fatalf("the checkpoint holds non-finite weights: %v", err)
	}
}

// TestFineTuneResumeNeedsNoFile: InitPolicy given as a relative path is stored absolute with its
// SHA-256, and a resume takes the policy from the checkpoint, so it works after the file is gone.
func TestFineTuneResumeNeedsNoFile(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "pretrained.onnx")
	if err := os.WriteFile(src, readFile(t, filepath.Join("..", "testdata", "mlp_tanh.onnx")), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, src)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallRun(6)
	cfg.InitPolicy = rel
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, cfg, Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cut")
	if err := trainStopped(cfg, Options{Out: dir}, 1); !errors.Is(err, ErrStopped) {
		t.Fatal(err)
	}
	stored, err := ParseConfig(readFile(t, filepath.Join(dir, configFile)))
	if err != nil {
		t.Fatal(err)
	}
	if stored.InitPolicy != src || stored.InitPolicySHA256 != rundir.SHA256Hex(readFile(t, src)) {
		t.Fatalf("config.json records init_policy %q (sha %s), want %q", stored.InitPolicy, stored.InitPolicySHA256, src)
	}
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, dir, Options{}); err != nil {
		t.Fatalf("resume without the InitPolicy file: %v", err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, policyFile)), readFile(t, filepath.Join(full, policyFile))) {
		t.Fatal("the resumed fine-tune differs from the uninterrupted one")
	}
}

// TestFailedSetupLeavesNothing: a fresh run refused before its first checkpoint (here a policy
// that does not fit the env) removes what it wrote, so the corrected command can be run again
// with the same --out.
func TestFailedSetupLeavesNothing(t *testing.T) {
	ctx := context.Background()
	for _, existed := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "run")
		if existed {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cfg := smallRun(7)
		cfg.InitPolicy = filepath.Join("..", "testdata", "gaussian_relu.onnx") // Pendulum's
		if _, err := Train(ctx, cfg, Options{Out: dir}); err == nil {
			t.Fatal("a Pendulum policy fine-tuned on CartPole")
		}
		entries, err := os.ReadDir(dir)
		switch {
		case !existed && !errors.Is(err, os.ErrNotExist):
			t.Errorf("the folder Train made is still there: %v", entries)
		case existed && err != nil:
			t.Errorf("the user's empty folder is gone: %v", err)
		case existed && rundir.CheckEmpty(dir) != nil:
			t.Errorf("the user's folder is left with %v", entries)
		}
		cfg.InitPolicy = ""
		if _, err := Train(ctx, cfg, Options{Out: dir}); err != nil {
			t.Fatalf("the corrected run into the same folder: %v", err)
		}
	}
}

// TestCriticFineTuneResumes: a fine-tune that adds a critic (RLlib's export has no value)
// stopped inside the value warm-up and resumed ends as the uninterrupted run does, byte for
// byte, through the warm-up's end (Adam restarted, the schedule carried on).
func TestCriticFineTuneResumes(t *testing.T) {
	ctx := context.Background()
	cfg := smallRun(8)
	cfg.InitPolicy = filepath.Join("..", "testdata", "foreign", "rllib_cartpole_mlp_weak.onnx")
	cfg.ValueWarmup = 3
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, cfg, Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cut")
	if err := trainStopped(cfg, Options{Out: dir}, 2); !errors.Is(err, ErrStopped) {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, dir, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{policyFile, rundir.TrainedFile} {
		if !bytes.Equal(readFile(t, filepath.Join(dir, name)), readFile(t, filepath.Join(full, name))) {
			t.Errorf("%s of the resumed run differs from the uninterrupted run's", name)
		}
	}
	checkSameInterface(t, cfg.InitPolicy, filepath.Join(dir, policyFile))
}

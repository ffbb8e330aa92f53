package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/towerrl/towerrl/internal/bounded"
	"github.com/towerrl/towerrl/onnx"
)

// TestTypoSizedInput: inputs a typo makes — --envs 5000000, a QueueSize of 1e9, 100,000
// hidden layers of width 1, an InitPolicy that is /dev/zero, /dev/urandom or a FIFO — ended
// in Go's "fatal error: out of memory" or hung, some after the run directory and its first
// checkpoint were written. Train now refuses each at once with an error naming it, and
// writes nothing.
func TestTypoSizedInput(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "policy.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	base := Config{Env: "CartPole-v1", TotalSteps: 1 << 40, EvalEpisodes: -1}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
		is   error
	}{
		{"envs", func(c *Config) { c.Envs = 5_000_000 }, []string{"envs 5000000", "fewer envs"}, bounded.ErrTooLarge},
		{"queue", func(c *Config) { c.Algo, c.QueueSize = "appo", 1_000_000_000 }, []string{"queue_size 1000000000"}, bounded.ErrTooLarge},
		{"overflow", func(c *Config) { c.Workers, c.Envs, c.RolloutSteps = 1<<31, 1<<31, 1<<31 }, []string{"2^63"}, bounded.ErrTooLarge},
		{"layers", func(c *Config) { c.Hidden = slices.Repeat([]int{1}, 100_000) }, []string{"100000 layers"}, ErrConfig},
		{"zero", func(c *Config) { c.InitPolicy = "/dev/zero" }, []string{"/dev/zero", "character device"}, bounded.ErrNotRegular},
		{"urandom", func(c *Config) { c.InitPolicy = "/dev/urandom" }, []string{"/dev/urandom"}, bounded.ErrNotRegular},
		{"fifo", func(c *Config) { c.InitPolicy = fifo }, []string{"FIFO"}, bounded.ErrNotRegular},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.edit(&cfg)
			dir := filepath.Join(t.TempDir(), "run")
			done := make(chan error, 1)
			go func() {
				_, err := Train(context.Background(), cfg, Options{Out: dir})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.is) {
					t.Fatalf("%v, want %v", err, tc.is)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not say %q", err, w)
					}
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Train still running after 20 s")
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused run left %s (%v)", dir, err)
			}
		})
	}
}

// TestEnvsAgainstMemoryLimit: with the Go memory limit at 1 GiB, --envs 100000 (12.8M rows
// a rollout; 11 GB resident, extrapolated from 1.14 GB measured at 10,000) is refused before
// anything is allocated, naming the limit; 1,000 envs still train.
func TestEnvsAgainstMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(1 << 30)
	defer debug.SetMemoryLimit(old)
	_, err := Config{Env: "CartPole-v1", Envs: 100_000, TotalSteps: 1 << 40}.WithDefaults()
	if !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), "GOMEMLIMIT") {
		t.Fatalf("100,000 envs under a 1 GiB limit: %v", err)
	}
	if _, err := (Config{Env: "CartPole-v1", Envs: 1000, TotalSteps: 1 << 40}).WithDefaults(); err != nil {
		t.Fatalf("1,000 envs: %v", err)
	}
}

// TestResumeSmallerQueue: an appo run whose config.json asks for a ring of 1e9 rollouts (older
// versions wrote it, checkpointed, then died of out-of-memory at every resume) is refused by
// the resume, naming queue_size, and resumes with a smaller --queue-size.
func TestResumeSmallerQueue(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 4, CheckpointEvery: 2, Seed: 1, EvalEpisodes: -1}
	if err := trainStopped(cfg, Options{Out: dir}, 2); !errors.Is(err, ErrStopped) {
		t.Fatal(err)
	}
	path := filepath.Join(dir, configFile)
	b := readFile(t, path)
	huge := strings.Replace(string(b), `"queue_size": 2`, `"queue_size": 1000000000`, 1)
	if huge == string(b) {
		t.Fatalf("config.json has no queue_size 2:\n%s", b)
	}
	if err := os.WriteFile(path, []byte(huge), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, dir, Options{}); !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), "queue_size 1000000000") {
		t.Fatalf("resume with the huge queue: %v", err)
	}
	res, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.QueueSize = 3 }})
	if err != nil || res.Iterations != 4 {
		t.Fatalf("resume with queue_size 3: %+v, %v", res, err)
	}
}

// TestMisleadingErrors: "the last good policy.onnx … kept" was said when no policy.onnx had
// been written, and resuming a file said "not a run directory (<nil>)".
func TestMisleadingErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := smallRun(5)
	cfg.LR, cfg.ConstantLR, cfg.MaxGradNorm, cfg.CheckpointEvery = 1e38, true, -1, 10
	_, err := Train(context.Background(), cfg, Options{Out: dir})
	if !errors.Is(err, ErrNonFinite) || strings.Contains(err.Error(), "policy.onnx and checkpoint are kept") ||
		!strings.Contains(err.Error(), "no policy.onnx was written yet") {
		t.Errorf("a run that diverged before its first policy.onnx: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, policyFile)); serr == nil {
		t.Error("the diverged run wrote a policy.onnx")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Resume(context.Background(), file, Options{})
	if !errors.Is(err, ErrRunDir) || strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("resuming a file: %v", err)
	}
}

// TestInitPolicyOfAnotherEnv: fine-tuning a CartPole-v1 policy (4 observations) on Acrobot-v1
// (6) said "cannot tell which tensors carry the head … pass --logits-output"; it now says the
// observation sizes differ, 4 against 6, and which env the policy was trained on.
func TestInitPolicyOfAnotherEnv(t *testing.T) {
	ctx := context.Background()
	cart := filepath.Join(t.TempDir(), "cart")
	cfg := Config{Env: "CartPole-v1", TotalSteps: 512, EvalEpisodes: -1}
	if _, err := Train(ctx, cfg, Options{Out: cart}); err != nil {
		t.Fatal(err)
	}
	_, err := Train(ctx, Config{Env: "Acrobot-v1", TotalSteps: 512, EvalEpisodes: -1, InitPolicy: filepath.Join(cart, policyFile)},
		Options{Out: filepath.Join(t.TempDir(), "acro")})
	if !errors.Is(err, ErrFineTune) {
		t.Fatalf("%v, want ErrFineTune", err)
	}
	for _, w := range []string{"observation sizes differ", "takes 4 values", "Acrobot-v1 gives 6", "trained on CartPole-v1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
}

// TestCriticNotNamedByUser: fine-tuning an actor-only policy (RLlib's export) logged
// "--value-output towerrl_critic_value (named by the user)" though the user named nothing:
// the value is towerrl's new critic, and the log says so.
func TestCriticNotNamedByUser(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	src := filepath.Join("..", "testdata", "foreign", "rllib_cartpole_mlp_weak.onnx")
	_, err := Train(context.Background(), Config{Env: "CartPole-v1", InitPolicy: src, TotalSteps: 512, EvalEpisodes: -1},
		Options{Session: onnx.Config{Logger: zap.New(core)}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "named by the user") {
			t.Errorf("logged %q", e.Message)
		}
		found = found || strings.Contains(e.Message, "the critic towerrl added")
	}
	if !found {
		t.Error("no log line says the value is the critic towerrl added")
	}
}

// TestResumeFreshRunWithOtherSettings: a run that has not finished an iteration (older
// versions wrote its checkpoint, then died of out-of-memory with --envs 100000 at every
// resume) has trained nothing, so a resume may change its settings: it starts again with them
// and ends as a run made with them from the start, byte for byte. A run that has finished an
// iteration still refuses the change.
func TestResumeFreshRunWithOtherSettings(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Env: "CartPole-v1", TotalSteps: 512 * 3, Seed: 4, EvalEpisodes: -1}
	want := cfg
	want.Envs = 8 // 1024 steps an iteration
	want.TotalSteps = 1024 * 2
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, want, Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	// Killed during its first iteration: the checkpoint of iteration 0 and no metrics line.
	cut, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := Train(cut, cfg, Options{Out: dir, Progress: func(Metrics) { cancel() }}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if err := os.Truncate(filepath.Join(dir, metricsFile), 0); err != nil {
		t.Fatal(err)
	}
	res, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.Envs, c.TotalSteps = 8, 1024*2 }})
	if err != nil {
		t.Fatal(err)
	}
	if res.EnvSteps != 2048 {
		t.Fatalf("resumed run: %+v", res)
	}
	sameRun(t, full, dir, 2)
	if _, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.Envs = 4 }}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "envs") {
		t.Fatalf("a run with iterations behind it took another envs: %v", err)
	}
	// Naming the products' default precision is no change; the other precision is one.
	if again, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.MatmulPrecision = "float32" }}); err != nil || !again.Complete {
		t.Fatalf("resumed naming float32 products: %+v, %v", again, err)
	}
	if _, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.MatmulPrecision = "bf16" }}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "matmul_precision") {
		t.Fatalf("a run with iterations behind it took bf16 products: %v", err)
	}
}

package batcher

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/towerrl/towerrl/internal/bounded"
)

// TestAvailableMemory: the batcher's size checks read the memory as every tool does
// (internal/bounded, whose tests cover /proc/meminfo and the cgroups).
func TestAvailableMemory(t *testing.T) {
	m, want := AvailableMemory(), bounded.Available()
	if m.Available == 0 || m.Source == "" || m.Source != want.Source {
		t.Fatalf("this machine: %+v, internal/bounded reads %+v", m, want)
	}
}

func TestCheckMemory(t *testing.T) {
	// CartPole: 4 observation floats, 1 action. Per row (hand-counted from newRollout): two
	// observations 2·4·4 = 32, two actions 2·4 = 8, six float32 columns 24, a version 8: 72
	// bytes; the shard writer adds its env-major scratch 4·4 + 4·4 and terminals, timeouts
	// and policy_version 1+1+8: 42. Per env 48·4 + 32·1 + 256 = 480; per worker 4 MiB; 64 MiB
	// fixed.
	const fixed, perWorker, perEnv = 64 << 20, 4 << 20, 480
	need := uint64(fixed + 2*perWorker + 2*3*(perEnv+5*(72+42)))
	cfg := Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 3, Steps: 5}
	if err := CheckMemory(cfg, true, Memory{need, "test"}); err != nil {
		t.Fatalf("exactly enough: %v", err)
	}
	err := CheckMemory(cfg, true, Memory{need - 1, "test"})
	var me *MemoryError
	if !errors.As(err, &me) || !errors.Is(err, ErrMemory) {
		t.Fatalf("one byte short: %v", err)
	}
	want := &MemoryError{Env: "CartPole-v1", Workers: 2, EnvsPerWorker: 3, Steps: 5, Need: need, Memory: Memory{need - 1, "test"},
		FitWorkers: 1, FitEnvsPerWorker: 2, FitSteps: 4}
	if diff := cmp.Diff(want, me); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// Without shards the rows are 72 bytes: 6·5·42 bytes less.
	if err := CheckMemory(cfg, false, Memory{need - 6*5*42, "test"}); err != nil {
		t.Fatalf("no shards: %v", err)
	}

	// The crash-sized flags of issue 13 defect 7.
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"1e8 envs", Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 100000000, Steps: 128},
			"batcher: not enough memory: CartPole-v1 with 1 worker × 100000000 envs × 128 steps needs about 1.4 TiB, and 8.0 GiB is available (test)"},
		{"2^62 envs × 4 workers", Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 1 << 62, Workers: 4, Steps: 128},
			"needs more than 64 bits can count (the sizes' product overflows), and 8.0 GiB is available (test)"},
		{"2^62 steps", Config{Env: envSpec("Pendulum-v1"), Steps: 1 << 62}, "the sizes' product overflows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMemory(tc.cfg, true, Memory{8 << 30, "test"})
			if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	errors.As(CheckMemory(Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 100000000, Steps: 128}, true, Memory{8 << 30, "test"}), &me)
	// (8 GiB - 68 MiB) / (480 + 128·114) bytes per env.
	if want := (8<<30 - 68<<20) / (480 + 128*114); me.FitEnvsPerWorker != want || me.FitWorkers != 0 {
		t.Fatalf("fits %d envs, %d workers; want %d envs, 0 workers", me.FitEnvsPerWorker, me.FitWorkers, want)
	}
	for _, cfg := range []Config{{Env: envSpec("CartPole-v1"), EnvsPerWorker: -1}, {}} {
		if err := CheckMemory(cfg, false, Memory{8 << 30, "test"}); err == nil || errors.Is(err, ErrMemory) {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
}

func TestCheckEvalMemory(t *testing.T) {
	// Pendulum: 3 observation floats, 1 action: rows of 24+8+32 = 64 bytes, envs of
	// 144+32+256 = 432, 64 bytes an episode, one worker, rollouts of 64 steps.
	envs, episodes := uint64(16), uint64(1000)
	need := 64<<20 + 4<<20 + envs*(432+64*64) + episodes*64
	cfg := EvalConfig{Env: envSpec("Pendulum-v1"), Episodes: int(episodes)}
	if err := CheckEvalMemory(cfg, Memory{need, "test"}); err != nil {
		t.Fatal(err)
	}
	var me *MemoryError
	if err := CheckEvalMemory(cfg, Memory{need - 1, "test"}); !errors.As(err, &me) || me.FitEpisodes != int(episodes)-1 || me.FitEnvsPerWorker != int(envs)-1 {
		t.Fatalf("one byte short: %v (%+v)", err, me)
	}
	for _, tc := range []struct {
		cfg  EvalConfig
		want string
	}{
		{EvalConfig{Env: envSpec("Pendulum-v1"), Episodes: 10, Envs: 100000000}, "Pendulum-v1 with 100000000 envs × 64 steps and 10 episodes needs about 421.8 GiB"},
		{EvalConfig{Env: envSpec("Pendulum-v1"), Episodes: math.MaxInt}, "16 envs × 64 steps and 9223372036854775807 episodes needs more than 64 bits can count"},
	} {
		if err := CheckEvalMemory(tc.cfg, Memory{8 << 30, "test"}); !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	for _, cfg := range []EvalConfig{{Env: envSpec("Pendulum-v1")}, {Env: envSpec("Pendulum-v1"), Episodes: 1, Envs: -2}, {Episodes: 1}} {
		if err := CheckEvalMemory(cfg, Memory{8 << 30, "test"}); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 8 << 30: "8.0 GiB", math.MaxUint64: "16.0 EiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}

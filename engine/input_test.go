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

	"github.com/towerrl/towerrl/internal/bounded"
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

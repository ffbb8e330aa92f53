//go:build !race

// The kill test runs in make test's first pass only: under the race detector each of its
// children (this test binary, race-built) trains several times slower: its 5 runs took 127 s of
// engine's race pass (under load), the longest package there, while what it checks — that a run killed at
// any moment resumes to the same bits — does not depend on the detector. The runs it kills
// (killRuns) and the child's entry point (TestMain) stay in kill_test.go, which other tests
// share.

package engine

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/towerrl/towerrl/engine/rundir"
)

// TestKillAndResume SIGKILLs a training process at random moments — before its first
// iteration, mid-iteration, while writing a checkpoint, during a resume — and resumes it each
// time; the run must end with the policy.onnx of an uninterrupted run, byte for byte (and its
// best_policy.onnx and best.json when it evaluates). The
// short version kills 5 times (3 for each off-policy run); -short=false with TOWERRL_KILLS=20
// runs the 20.
func TestKillAndResume(t *testing.T) {
	for _, name := range []string{"ppo", "dqn", "sac", "sac-init", "sac-sde"} {
		t.Run(name, func(t *testing.T) {
			kills := 5
			if name != "ppo" {
				kills = 3
			}
			if n := os.Getenv("TOWERRL_KILLS"); n != "" {
				kills = atoi(t, n)
			}
			killAndResume(t, name, kills)
		})
	}
}

// killAndResume kills the run killRuns[name] kills times and checks it ends as an
// uninterrupted one.
func killAndResume(t *testing.T, name string, kills int) {
	full := filepath.Join(t.TempDir(), "full")
	start := time.Now()
	if _, err := Train(context.Background(), killRuns[name], Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	span := time.Since(start) + 300*time.Millisecond // the child also loads ONNX Runtime
	want, err := os.ReadFile(filepath.Join(full, policyFile))
	if err != nil {
		t.Fatal(err)
	}

	// Kill at uniform random moments of a whole run's span; a run that finishes before the
	// count is reached is checked and a fresh one started, until kills kills have happened.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	killed, runs := 0, 0
	for killed < kills {
		dir := filepath.Join(t.TempDir(), "killed")
		runs++
		for finished := false; !finished; {
			cmd := exec.Command(os.Args[0], "-test.run", "^$")
			cmd.Env = append(os.Environ(), "TOWERRL_KILL_CHILD="+dir, "TOWERRL_KILL_RUN="+name)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var timer <-chan time.Time
			if killed < kills {
				timer = time.After(time.Duration(rng.Int64N(int64(span))))
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run %d: the child failed: %v\n%s", runs, err, stderr.String())
				}
				finished = true
			case <-timer:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				err := <-done
				var ee *exec.ExitError
				if errors.As(err, &ee) && ee.ExitCode() == 1 {
					t.Fatalf("run %d: the child failed before the kill: %s", runs, stderr.String())
				}
				killed++
			}
		}
		got, err := os.ReadFile(filepath.Join(dir, policyFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("run %d (%d kills so far): the resumed run's policy.onnx differs from the uninterrupted run's", runs, killed)
		}
		if a, b := metricsWithoutTimings(t, full), metricsWithoutTimings(t, dir); len(a) != len(b) {
			t.Fatalf("metrics: %d lines uninterrupted, %d after the kills", len(a), len(b))
		}
		if killRuns[name].EvalEvery > 0 {
			sameFile(t, full, dir, rundir.BestFile)
			sameFile(t, full, dir, rundir.BestPolicyFile)
		}
	}
	t.Logf("%d kills over %d runs, each finished with the uninterrupted run's policy.onnx", killed, runs)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a count: %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

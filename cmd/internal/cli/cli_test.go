package cli

import (
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestNoArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--env", "CartPole-v1", "--seed", "1"}, ""},
		{[]string{"--env", "CartPole-v1", "oops", "--seed", "1"}, `unexpected argument "oops": the tools take flags only, and everything after it (["--seed" "1"]) was not read`},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.String("env", "", "")
		seed := fs.Int("seed", 0, "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := NoArgs(fs)
		if tc.want == "" {
			if err != nil || *seed != 1 {
				t.Errorf("%q: %v (seed %d)", tc.args, err, *seed)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestMainRefusesPositional runs Main in a child process with a stray argument: it must exit
// with status 2 and say why, without running the command's body.
func TestMainRefusesPositional(t *testing.T) {
	if os.Getenv("TOWERRL_CLI_CHILD") == "1" {
		fs := flag.CommandLine
		seed := fs.Int("seed", 0, "")
		if err := fs.Parse([]string{"oops", "--seed", "1"}); err != nil {
			os.Exit(3)
		}
		Main("tool", LogFlags{Level: "info"}, func(context.Context, *zap.Logger) error {
			os.Stdout.WriteString("ran with seed " + string(rune('0'+*seed)))
			return nil
		})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestMainRefusesPositional$")
	cmd.Env = append(os.Environ(), "TOWERRL_CLI_CHILD=1")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("child: %v, output %s; want exit status 2", err, out)
	}
	if !strings.Contains(string(out), `tool: unexpected argument "oops"`) || strings.Contains(string(out), "ran with") {
		t.Fatalf("child output %q", out)
	}
}

// TestSecondSignalExits: a command stuck in a call that ignores its context (here a sleep;
// in the defect, reading --init-policy from a FIFO, or ONNX Runtime creating a session) logged
// "stopping" at each SIGTERM and ran on for 13 minutes. The second SIGTERM of a graceful
// command now ends the process within ForceExitAfter, the third at once, with status 1.
func TestSecondSignalExits(t *testing.T) {
	if os.Getenv("TOWERRL_CLI_CHILD") == "stuck" {
		MainGraceful("tool", LogFlags{Level: "info"}, func(context.Context, <-chan struct{}, *zap.Logger) error {
			os.Stdout.WriteString("ready\n")
			time.Sleep(time.Hour)
			return nil
		})
		return
	}
	for _, signals := range []int{2, 3} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestSecondSignalExits$")
		cmd.Env = append(os.Environ(), "TOWERRL_CLI_CHILD=stuck")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := io.ReadFull(stdout, buf); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for range signals {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			took := time.Since(start)
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 1 {
				t.Fatalf("%d signals: %v; want exit status 1\n%s", signals, err, stderr.String())
			}
			limit := ForceExitAfter + time.Second
			if signals == 3 {
				limit = time.Second
			}
			if took > limit {
				t.Errorf("%d signals: exited %v after the first, want within %v", signals, took, limit)
			}
			t.Logf("%d signals: exited after %v: %s", signals, took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%d signals: still running 10 s later\n%s", signals, stderr.String())
		}
	}
}

package cli

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"

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

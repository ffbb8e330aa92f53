package cli

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestUsage: --help opens with the tool's line and its examples, then lists every flag, and
// parsing still ends with flag.ErrHelp.
func TestUsage(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.String("env", "", "Gymnasium id")
	Usage(fs, "tool", "does one thing", "bin/tool --env CartPole-v1")
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	want := "tool: does one thing\n\nExamples:\n  bin/tool --env CartPole-v1\n\nFlags:\n  -env string\n    \tGymnasium id\n"
	if out.String() != want {
		t.Errorf("usage:\n%s\nwant:\n%s", out.String(), want)
	}
}

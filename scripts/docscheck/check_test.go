package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Speed":                                     "speed",
		"`train`: train or fine-tune a policy":      "train-train-or-fine-tune-a-policy",
		"DD-PPO under MPI (`--algo ddppo`)":         "dd-ppo-under-mpi---algo-ddppo",
		"Not used: `github.com/owulveryck/onnx-go`": "not-used-githubcomowulveryckonnx-go",
		"Asynchronous actor–learner":                "asynchronous-actorlearner",
		"A [link](x.md) in a heading":               "a-link-in-a-heading",
	} {
		if got := Anchor(heading); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestToolFlags(t *testing.T) {
	for text, want := range map[string][][2]string{
		"bin/train --env CartPole-v1 --out runs/cp [--towers 2] [--workers W]":  {{"train", "env"}, {"train", "out"}, {"train", "towers"}, {"train", "workers"}},
		"train --resume DIR --total-steps=5":                                    {{"train", "resume"}, {"train", "total-steps"}},
		"scripts/mpirun.sh -np 4 --bind-to none bin/train --algo ddppo":         {{"train", "algo"}},
		"bin/train --serve 127.0.0.1:4222 & until [ -f x ]; do sleep 0.2; done": {{"train", "serve"}},
		"bin/batcher --connect nats://x --creds c; wait":                        {{"batcher", "connect"}, {"batcher", "creds"}},
		"scripts/cnn_compare.py --infer bin/infer --device cuda":                nil,
		"go run ./cmd/eval --policy p.onnx | jq .":                              {{"eval", "policy"}},
		"--head":                                {{"", "head"}},
		"--bind-to none":                        {{"", "bind-to"}},
		"make demo --always-make":               nil,
		"bin/eval --policy p # --not-a-flag":    {{"eval", "policy"}},
		"go tool pprof bin/train DIR/cpu.pprof": nil,
	} {
		if diff := cmp.Diff(want, ToolFlags(text)); diff != "" {
			t.Errorf("ToolFlags(%q) (-want +got):\n%s", text, diff)
		}
	}
}

func TestHelpFlags(t *testing.T) {
	help := "Usage of train:\n  -env string\n    \tGymnasium id\n  -no-spin\n    \ttowers park\n"
	if diff := cmp.Diff(map[string]bool{"env": true, "no-spin": true}, HelpFlags(help)); diff != "" {
		t.Error(diff)
	}
}

func TestDirectModules(t *testing.T) {
	gomod := "module x\n\nrequire (\n\ta.org/b v1.0.0\n\tc.org/d v0.1.0 // indirect\n)\n\nrequire e.org/f v1.2.3\n// a comment\nrequire g.org/h v0.0.1 // indirect\n"
	if diff := cmp.Diff([]string{"a.org/b", "e.org/f"}, DirectModules(gomod)); diff != "" {
		t.Error(diff)
	}
}

// write makes the files under a temporary root and returns it.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func msgs(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func TestCheckLinks(t *testing.T) {
	root := write(t, map[string]string{
		"docs/a.md": "# A\n\n## Speed\n\n## Speed\n\n[ok](b.md) [ok](b.md#the-b) [ok](#speed-1) [ok](../x.txt)\n" +
			"[bad](c.md) [bad](b.md#nope) [web](https://example.com/x.md) `[not](a link.md)`\n" +
			"```\n[in](block.md)\n```\n",
		"docs/b.md": "# The B\n",
		"x.txt":     "",
	})
	pages := map[string]Page{}
	for _, p := range []string{"docs/a.md", "docs/b.md"} {
		b, _ := os.ReadFile(filepath.Join(root, p))
		pages[p] = Parse(p, string(b))
	}
	got := msgs(CheckLinks(root, pages["docs/a.md"], pages))
	want := []string{
		`docs/a.md:8: link "c.md": docs/c.md does not exist`,
		`docs/a.md:8: link "b.md#nope": docs/b.md has no heading with anchor #nope (it has: the-b)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}

func TestCheckFlagsSnippetsPaths(t *testing.T) {
	root := write(t, map[string]string{
		"x_test.go":     "func Example() {\n\ta := 1\n\tfmt.Println(a)\n}\n",
		"scripts/ok.sh": "",
		"docs/p.md": "Run `bin/train --env X --bogus` or `--nothing`; `eval --policy p`.\n\n" +
			"```sh\nbin/batcher --policy p \\\n    --steps 10 --gone\nbash scripts/ok.sh && bash scripts/missing.sh\nmake build && make nosuch\n```\n\n" +
			"From `x_test.go`:\n\n```go\na := 1\nfmt.Println(b)\n```\n",
	})
	b, _ := os.ReadFile(filepath.Join(root, "docs/p.md"))
	p := Parse("docs/p.md", string(b))
	help := map[string]map[string]bool{
		"train":   {"env": true},
		"eval":    {"policy": true},
		"batcher": {"policy": true, "steps": true},
	}
	got := msgs(CheckFlags(p, help))
	got = append(got, msgs(CheckSnippets(root, p))...)
	got = append(got, msgs(CheckPaths(root, p, map[string]bool{"build": true}))...)
	want := []string{
		`docs/p.md:1: train has no flag --bogus (in "bin/train --env X --bogus")`,
		`docs/p.md:1: no tool has a flag --nothing (in "--nothing")`,
		`docs/p.md:4: batcher has no flag --gone (in "bin/batcher --policy p --steps 10 --gone")`,
		`docs/p.md:14: go block line "fmt.Println(b)" is not in x_test.go`,
		`docs/p.md:6: scripts/missing.sh does not exist`,
		`docs/p.md:7: the Makefile has no target "nosuch"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCheckGoRefs(t *testing.T) {
	root := write(t, map[string]string{
		"docs/a.md": "",
		"x/doc.go":  "// see docs/a.md and ../docs/a.md, docs/gone.md, ../../docs/b.md and DESIGN.md\n// https://github.com/o/r/blob/main/docs/IR.md\n",
		"x/y.pb.go": "// docs/IR.md\n",
	})
	got, err := CheckGoRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"x/doc.go:1: names docs/gone.md, which does not exist",
		"x/doc.go:1: names ../../docs/b.md, which does not exist",
		"x/doc.go:1: names DESIGN.md, which is not in the repository (docs/ has the pages)",
	}
	if diff := cmp.Diff(want, msgs(got)); diff != "" {
		t.Error(diff)
	}
}

// TestSourceFlagsMatchHelp: the flags read from cmd/'s source are exactly those the built
// tools list in --help (eval and infer, the two quickest to link; eval's come partly from
// cmd/internal/cli's PolicyFlags, which embeds HeadFlags, and LogFlags).
func TestSourceFlagsMatchHelp(t *testing.T) {
	root := filepath.Join("..", "..")
	src, err := SourceFlags(root)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/eval", "./cmd/infer")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tool := range []string{"eval", "infer"} {
		out, err := exec.Command(filepath.Join(bin, tool), "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v", tool, err)
		}
		help := HelpFlags(string(out))
		help["help"], help["h"] = true, true
		if diff := cmp.Diff(help, src[tool]); diff != "" {
			t.Errorf("%s: flags in --help (-) and in the source (+):\n%s", tool, diff)
		}
	}
	for _, tool := range Tools {
		if !src[tool]["log-level"] {
			t.Errorf("%s: no --log-level found in the source (cli.LogFlags)", tool)
		}
	}
}

// Command docscheck checks README.md and the pages under docs/ against the repository: every
// relative link resolves (to a file, and to a heading for an anchor), every flag named for a
// tool is in that tool's --help, every go block that quotes a test file matches it, every
// scripts/, configs/ and testdata/ file and make target named exists, every page of docs/ is
// linked from the README, docs/dependencies.md names every module go.mod requires directly,
// and every docs/ page a Go file names exists. It prints each problem as FILE:LINE: what, and exits 1 if there is any.
//
//	go run ./scripts/docscheck              the tools' flags read from cmd/'s source
//	go run ./scripts/docscheck -bin DIR     the flags the built tools in DIR list in --help
//
// scripts/docs_check.sh runs it (make test).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	bin := flag.String("bin", "", "folder holding the built tools ("+strings.Join(Tools, ", ")+") whose --help lists their flags; default: read the flags from cmd/'s source")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: docscheck [-bin DIR] [-root DIR]")
		os.Exit(2)
	}
	problems, err := Run(*root, *bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docscheck:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "docscheck: %d problems\n", len(problems))
		os.Exit(1)
	}
}

// Run checks the pages under root, with the flags the tools in bin list in --help, or with
// those their source defines when bin is "".
func Run(root, bin string) ([]Problem, error) {
	help, err := HelpOf(bin)
	if bin == "" {
		help, err = SourceFlags(root)
	}
	if err != nil {
		return nil, err
	}
	paths := []string{"README.md"}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	pages := map[string]Page{}
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return nil, err
		}
		pages[p] = Parse(p, string(b))
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, err
	}
	targets := MakeTargets(string(makefile))
	var problems []Problem
	for _, path := range paths {
		p := pages[path]
		problems = append(problems, CheckLinks(root, p, pages)...)
		problems = append(problems, CheckFlags(p, help)...)
		problems = append(problems, CheckSnippets(root, p)...)
		problems = append(problems, CheckPaths(root, p, targets)...)
	}
	readme := pages["README.md"]
	for _, path := range paths {
		if filepath.Dir(path) != "docs" {
			continue
		}
		linked := slices.ContainsFunc(readme.Links, func(l Ref) bool {
			f, _, _ := strings.Cut(l.Text, "#")
			return f == path
		})
		if !linked {
			problems = append(problems, Problem{"README.md", 0, fmt.Sprintf("does not link %s", path)})
		}
	}
	goRefs, err := CheckGoRefs(root)
	if err != nil {
		return nil, err
	}
	problems = append(problems, goRefs...)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	deps, ok := pages["docs/dependencies.md"]
	if !ok {
		return append(problems, Problem{"docs/dependencies.md", 0, "missing"}), nil
	}
	text := strings.Join(deps.Lines, "\n")
	for _, m := range DirectModules(string(gomod)) {
		if !strings.Contains(text, "`"+m+"`") {
			problems = append(problems, Problem{"docs/dependencies.md", 0, fmt.Sprintf("does not name %s, which go.mod requires directly", m)})
		}
	}
	return problems, nil
}

// HelpOf runs each tool in bin with --help and reads the flags it lists ("" gives nil).
func HelpOf(bin string) (map[string]map[string]bool, error) {
	if bin == "" {
		return nil, nil
	}
	help := map[string]map[string]bool{}
	for _, t := range Tools {
		out, err := exec.Command(filepath.Join(bin, t), "--help").CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return nil, fmt.Errorf("running %s --help: %w", t, err)
		}
		help[t] = HelpFlags(string(out))
		if len(help[t]) == 0 {
			return nil, fmt.Errorf("%s --help listed no flags:\n%s", t, out)
		}
		help[t]["help"], help[t]["h"] = true, true
	}
	return help, nil
}

// Command gendocs writes the documentation pages made from the code: docs/envs.md (every
// registered env with its spaces, its preset and what no-flag training was measured to
// reach) and docs/config.md (every engine.Config field with its JSON name, type and
// documentation). Run it from the repository root after changing an env, a preset or a
// Config field; `go test ./scripts/gendocs` fails when a committed page differs from what it
// writes.
//
//	go run -tags mujoco ./scripts/gendocs            write the pages
//	go run -tags mujoco ./scripts/gendocs -check     only compare them, exit 1 on a difference
//
// A build without MuJoCo is refused: docs/envs.md lists the MuJoCo envs' spaces, which only a
// build with them knows, and the page it would write would lose them.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/towerrl/towerrl/envs/mujoco"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	check := flag.Bool("check", false, "compare the committed pages instead of writing them")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: gendocs [-root DIR] [-check]")
		os.Exit(2)
	}
	if !mujoco.Available() {
		fmt.Fprintln(os.Stderr, "gendocs: this build has no MuJoCo, and docs/envs.md lists the MuJoCo envs' spaces: "+
			"run go run -tags mujoco ./scripts/gendocs (scripts/setup-mujoco.sh installs MuJoCo 2.2.2)")
		os.Exit(2)
	}
	pages, err := Pages(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
	failed := false
	for _, p := range pages {
		path := filepath.Join(*root, p.Path)
		if *check {
			have, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(have, p.Text) {
				fmt.Fprintf(os.Stderr, "gendocs: %s is not what the generator writes: run go run ./scripts/gendocs\n", p.Path)
				failed = true
			}
			continue
		}
		if err := os.WriteFile(path, p.Text, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gendocs:", err)
			os.Exit(1)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// Page is a generated page: its path under the root, and its text.
type Page struct {
	Path string
	Text []byte
}

// Pages generates every page.
func Pages(root string) ([]Page, error) {
	envsPage, err := EnvsPage()
	if err != nil {
		return nil, err
	}
	configPage, err := ConfigPage(filepath.Join(root, "engine"))
	if err != nil {
		return nil, err
	}
	return []Page{{"docs/envs.md", envsPage}, {"docs/config.md", configPage}}, nil
}

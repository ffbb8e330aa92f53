package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/towerrl/towerrl/envs/mujoco"
)

// TestPagesMatch: the committed docs/envs.md and docs/config.md are what the generator writes.
// In a build without MuJoCo the MuJoCo rows' spaces, time limits and targets cannot be made
// here; their other columns are still compared, and every other line whole.
func TestPagesMatch(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	if !mujoco.Available() {
		t.Log("built without MuJoCo: the MuJoCo rows of docs/envs.md are compared without their spaces, time limits and targets")
	}
	for _, p := range pages {
		have, err := os.ReadFile(filepath.Join(root, p.Path))
		if err != nil {
			t.Fatal(err)
		}
		want, got := string(p.Text), string(have)
		if !mujoco.Available() {
			want, got = withoutMuJoCoSpaces(want), withoutMuJoCoSpaces(got)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s is not what go run ./scripts/gendocs writes (-generated +committed):\n%s", p.Path, diff)
		}
	}
}

// withoutMuJoCoSpaces blanks columns 2–5 (observation, action, time limit, target) of the
// table rows of MuJoCo envs.
func withoutMuJoCoSpaces(page string) string {
	lines := strings.Split(page, "\n")
	for i, l := range lines {
		cols := strings.Split(l, " | ")
		if len(cols) > 5 && slices.Contains(mujoco.IDs, strings.TrimPrefix(cols[0], "| ")) {
			for c := 1; c <= 4; c++ {
				cols[c] = "…"
			}
			lines[i] = strings.Join(cols, " | ")
		}
	}
	return strings.Join(lines, "\n")
}

// TestEnvsPage: every registered env and every MuJoCo id has a row, with the figures of the
// measured table where it has them, and the preset's steps.
func TestEnvsPage(t *testing.T) {
	page, err := EnvsPage()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append([]string{"CartPole-v1", "Pendulum-v1"}, mujoco.IDs...) {
		if !strings.Contains(string(page), "\n| "+id+" | ") {
			t.Errorf("no row for %s", id)
		}
	}
	for _, want := range []string{
		"| CartPole-v1 | `box:4:", "| `discrete:2` | 500 | 475 | 500k | 500.0 on each of seeds 0–4 | 8–10 s |",
		"| Pendulum-v1 |", "| 300k | −178.5 to −160.1 (seeds 0–4) |",
		"| HalfCheetah-v4 |", "| 1M | 4516 to 5271, mean 4916 (seeds 0–2) |",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
}

// TestConfigPage: the reference lists engine.Config's fields with their JSON names, types and
// comments, and a field of a documented group points at the group.
func TestConfigPage(t *testing.T) {
	page, err := ConfigPage(filepath.Join("..", "..", "engine"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `total_steps` | TotalSteps | `int64` | env steps; default 500k (Discrete), 1M (Box); see Algo |",
		"| `hidden` | Hidden | `[]int` | MLP widths; default 64, 64 |",
		"| `norm_reward` | NormReward | `bool` | See `norm_obs`, above. |",
		"| `gae_lambda` | Lambda | `float64` |",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if _, err := ConfigPage(t.TempDir()); err == nil {
		t.Error("a folder without engine.Config gave no error")
	}
}

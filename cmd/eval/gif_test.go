package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/gif"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

type gifRun struct {
	Returns []float64   `json:"returns"`
	GIF     *gifSummary `json:"gif"`
}

// evalGIF runs eval with --gif into a new file and decodes the summary and the GIF.
func evalGIF(t *testing.T, o options) (gifRun, *gif.GIF) {
	t.Helper()
	o.gif.path = filepath.Join(t.TempDir(), "episode.gif")
	o.flags.Device = "cpu"
	var stdout bytes.Buffer
	if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
		t.Fatal(err)
	}
	var sum gifRun
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(o.gif.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := gif.DecodeAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return sum, g
}

// TestGIFRefused: an existing file is never overwritten, a missing folder and an env with no
// drawing are refused before anything runs.
func TestGIFRefused(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "mine.gif")
	os.WriteFile(mine, []byte("my file"), 0o644)
	for _, c := range []struct {
		path, env, want string
	}{
		{mine, "CartPole-v1", "exists"},
		{filepath.Join(dir, "no", "such.gif"), "CartPole-v1", "does not exist"},
		{filepath.Join(dir, "x.gif"), "Unknown-v0", "drawn for"},
	} {
		o := options{policy: "random", env: c.env, episodes: 1, gif: gifFlags{path: c.path}}
		err := run(context.Background(), &bytes.Buffer{}, zap.NewNop(), o)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--gif") {
			t.Errorf("--gif %s --env %s: %v, want an error saying %q", c.path, c.env, err, c.want)
		}
	}
	if b, _ := os.ReadFile(mine); string(b) != "my file" {
		t.Errorf("the existing file now holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.gif")); err == nil {
		t.Error("a GIF was written for an env with no drawing")
	}
}

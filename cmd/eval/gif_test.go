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

// TestGIF: a deterministic Pendulum policy's GIF holds its 200 steps and the first frame (201
// frames of 500×500 at 30 fps: 3 hundredths each), and its return is the evaluation's first;
// random CartPole, Acrobot and MountainCar episodes give Gymnasium's sizes and one frame per
// step plus one.
func TestGIF(t *testing.T) {
	sum, g := evalGIF(t, options{policy: "../../testdata/gaussian_relu.onnx", env: "Pendulum-v1", episodes: 3, seed: 2})
	if s := sum.GIF; s == nil || s.Frames != 201 || s.Length != 200 || s.Width != 500 || s.Height != 500 || s.FPS != 30 {
		t.Fatalf("gif summary %+v", sum.GIF)
	}
	if sum.GIF.Return != sum.Returns[0] {
		t.Errorf("the GIF's episode returned %v, the evaluation's first %v", sum.GIF.Return, sum.Returns[0])
	}
	if len(g.Image) != 201 || g.Config.Width != 500 || g.Config.Height != 500 || g.Delay[0] != 3 || g.LoopCount != 0 {
		t.Errorf("GIF of %d frames, %d×%d, delay %d, loop %d", len(g.Image), g.Config.Width, g.Config.Height, g.Delay[0], g.LoopCount)
	}
	for _, c := range []struct {
		env  string
		w, h int
	}{{"CartPole-v1", 600, 400}, {"Acrobot-v1", 500, 500}, {"MountainCar-v0", 600, 400}} {
		sum, g := evalGIF(t, options{policy: "random", env: c.env, episodes: 1, seed: 3})
		s := sum.GIF
		if s == nil || s.Frames != s.Length+1 || len(g.Image) != s.Frames || g.Config.Width != c.w || g.Config.Height != c.h {
			t.Errorf("%s: summary %+v, GIF of %d frames %d×%d", c.env, s, len(g.Image), g.Config.Width, g.Config.Height)
		}
		if s != nil && s.Return != sum.Returns[0] {
			t.Errorf("%s: the GIF's episode returned %v, the evaluation's %v", c.env, s.Return, sum.Returns[0])
		}
	}
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

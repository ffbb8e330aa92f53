//go:build !race

// TestGIF draws over 200 frames of 500×500 in Go (engine/gif, a single-threaded package
// that make test leaves out of its race pass): under -race it took 98 s of cmd/eval's 126 in a
// loaded make test, against 11 s without, so make test runs it in its first pass only. The
// same eval path with --gif (the batcher's recorded episode, the film, the summary) runs
// under -race in TestGIFMujoco, and its refusals in TestGIFRefused.

package main

import "testing"

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

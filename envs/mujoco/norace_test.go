//go:build mujoco && cgo && !race

// Tests that step, reset and draw MuJoCo envs in the calling goroutine only (no Config.Threads,
// no goroutine of the package's own), in MuJoCo's and Mesa's C code that the race detector does
// not see: make test runs them in its first pass only. In a loaded make test they took 111 of
// envs/mujoco's 287 s there, and 51 of its 202 s in the race pass, where they could find
// nothing. The package's threaded stepping runs under -race in TestConformance's Threads cases
// and TestLibraryErrorsAcrossThreads.

package mujoco

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

// Reset draws v4's distributions: the mean and spread of many first observations.
func TestResetNoise(t *testing.T) {
	const n = 600
	check := func(id string, f func(qpos, qvel [][]float64)) {
		t.Run(id, func(t *testing.T) {
			v, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			v.Reset()
			ph, _ := envs.PhysicsOf(v)
			qpos, qvel := make([][]float64, n), make([][]float64, n)
			for i := range n {
				qpos[i], qvel[i] = make([]float64, ph.NQ()), make([]float64, ph.NV())
				ph.State(i, qpos[i], qvel[i])
			}
			f(qpos, qvel)
		})
	}
	// uniform(±s) has mean 0 and standard deviation s/√3; s × normal has s.
	moments := func(t *testing.T, what string, x [][]float64, j int, mean, sd float64) {
		var m, m2 float64
		for _, row := range x {
			m += row[j]
		}
		m /= float64(len(x))
		for _, row := range x {
			m2 += (row[j] - m) * (row[j] - m)
		}
		s := math.Sqrt(m2 / float64(len(x)-1))
		if math.Abs(m-mean) > 4*sd/math.Sqrt(float64(len(x))) || math.Abs(s-sd) > 0.1*sd {
			t.Errorf("%s[%d]: mean %.5f sd %.5f, want %.5f and %.5f", what, j, m, s, mean, sd)
		}
	}
	check("HalfCheetah-v4", func(qpos, qvel [][]float64) {
		moments(t, "qpos", qpos, 3, 0, 0.1/math.Sqrt(3))
		moments(t, "qvel", qvel, 3, 0, 0.1)
	})
	check("Hopper-v4", func(qpos, qvel [][]float64) {
		moments(t, "qpos", qpos, 1, 1.25, 5e-3/math.Sqrt(3))
		moments(t, "qvel", qvel, 2, 0, 5e-3/math.Sqrt(3))
	})
	check("Ant-v4", func(qpos, qvel [][]float64) {
		moments(t, "qpos", qpos, 2, 0.75, 0.1/math.Sqrt(3))
		moments(t, "qvel", qvel, 0, 0, 0.1)
	})
	check("Reacher-v4", func(qpos, qvel [][]float64) {
		for i := range qpos {
			if norm(qpos[i][2], qpos[i][3]) >= 0.2 || qvel[i][2] != 0 || qvel[i][3] != 0 {
				t.Fatalf("env %d: goal %v (qvel %v), want inside the disc of radius 0.2, still", i, qpos[i][2:], qvel[i][2:])
			}
		}
		moments(t, "qvel", qvel, 0, 0, 0.005/math.Sqrt(3))
	})
	check("Pusher-v4", func(qpos, qvel [][]float64) {
		for i := range qpos {
			cx, cy := qpos[i][7], qpos[i][8]
			if norm(cx, cy) <= 0.17 || cx < -0.3 || cx > 0 || cy < -0.2 || cy > 0.2 || qpos[i][9] != 0 || qpos[i][10] != 0 {
				t.Fatalf("env %d: cylinder %v goal %v", i, qpos[i][7:9], qpos[i][9:])
			}
		}
	})
}

// TestFilmMatchesReference: the camera's frames of a HalfCheetah episode are, pixel for pixel,
// the frames twr_ref_render draws of the same states with plain MuJoCo calls (a fresh mjData,
// mj_forward, the model's "track" camera, its own EGL context, rows flipped by hand); the
// frames are taken before steps 0, 4 and 8 and at the end (10); those of 0 and 8 are compared.
func TestFilmMatchesReference(t *testing.T) {
	const id = "HalfCheetah-v4"
	ep := recordEpisode(t, id, 10)
	steps, frames := shots(t, id, ep)
	if !slices.Equal(steps, []int{0, 4, 8, 10}) {
		t.Fatalf("frames at steps %v, want 0, 4, 8, 10", steps)
	}
	md, err := defs(id).model()
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for k, step := range steps[:3] {
		if step == 4 {
			continue // two states are enough: each reference frame takes a new context (a second or more)
		}
		ref, err := refRender(md, ep.QPos[step*9:(step+1)*9], ep.QVel[step*9:(step+1)*9], 480, 480)
		if err != nil {
			t.Fatal(err)
		}
		img := frames[k]
		bad := 0
		for p := range 480 * 480 {
			if img.Pix[4*p] != ref[3*p] || img.Pix[4*p+1] != ref[3*p+1] || img.Pix[4*p+2] != ref[3*p+2] || img.Pix[4*p+3] != 255 {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("step %d: %d of 480×480 pixels differ from the reference", step, bad)
		}
	}
}

// TestFilm: a 30-step HalfCheetah episode written as a GIF: 9 frames (before steps 0, 4, …, 28,
// and the end) of 480×480 shown 0.2 s each, in full colour (many colours, not a blank
// frame), captioned (white and black pixels in the corner), the body moving from frame to
// frame (a share of the pixels changes between consecutive frames). Set TOWERRL_FRAME_DIR to
// keep the GIF and its first and last frames as PNGs there.
func TestFilm(t *testing.T) {
	const id = "HalfCheetah-v4"
	ep := recordEpisode(t, id, 30)
	f := filmOf(t, id)
	var buf bytes.Buffer
	n, err := f.Write(&buf, ep)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gif.DecodeAll(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if n != 9 || f.Frames(30) != 9 || len(g.Image) != 9 || g.Config.Width != 480 || g.Config.Height != 480 || g.Delay[0] != 20 || f.FPS != 5 {
		t.Fatalf("%d frames (Frames says %d), GIF of %d frames %d×%d shown %d hundredths, fps %d; want 9 of 480×480, 20, 5",
			n, f.Frames(30), len(g.Image), g.Config.Width, g.Config.Height, g.Delay[0], f.FPS)
	}
	t.Logf("%d frames, %d bytes", n, buf.Len())
	for i, img := range g.Image {
		if c := colours(img); c < 64 {
			t.Errorf("frame %d has %d colours", i, c)
		}
		if i > 0 {
			if d := changed(g.Image[i-1], img); d < 0.02 {
				t.Errorf("frames %d and %d differ in %.1f%% of their pixels", i-1, i, 100*d)
			}
		}
		corner := img.SubImage(image.Rect(0, 0, 200, 20))
		white, black := 0, 0
		for y := range 20 {
			for x := range 200 {
				switch color.RGBAModel.Convert(corner.At(x, y)) {
				case color.RGBA{255, 255, 255, 255}:
					white++
				case color.RGBA{0, 0, 0, 255}:
					black++
				}
			}
		}
		if white < 50 || black < 50 {
			t.Errorf("frame %d: %d white and %d black pixels in the caption's corner", i, white, black)
		}
	}
	if dir := os.Getenv("TOWERRL_FRAME_DIR"); dir != "" {
		for _, i := range []int{0, len(g.Image) - 1} {
			out, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.png", id, i)))
			if err != nil {
				t.Fatal(err)
			}
			png.Encode(out, g.Image[i])
			out.Close()
		}
		os.WriteFile(filepath.Join(dir, id+".gif"), buf.Bytes(), 0o644)
	}
}

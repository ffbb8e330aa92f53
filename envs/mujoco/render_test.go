//go:build mujoco && cgo

package mujoco

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/render"
)

// recordEpisode runs env id (seed 1) for at most steps steps with actions a sine of the step
// and the actuator (so that the bodies move), and returns the episode with its physical states
// as batcher.RecordEpisode records them: qpos and qvel before each step.
func recordEpisode(t *testing.T, id string, steps int) render.Episode {
	t.Helper()
	e, err := envs.New(id, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ph, ok := envs.PhysicsOf(e)
	if !ok {
		t.Fatalf("%s has no physics", id)
	}
	obs, err := e.Reset()
	if err != nil {
		t.Fatal(err)
	}
	box := e.Spec().Action.(envs.Box)
	ep := render.Episode{ObsDim: len(obs), ActDim: box.Dim(), NQ: ph.NQ(), NV: ph.NV()}
	ep.Obs = append(ep.Obs, obs...)
	qpos, qvel := make([]float64, ph.NQ()), make([]float64, ph.NV())
	for k := range steps {
		if err := ph.State(0, qpos, qvel); err != nil {
			t.Fatal(err)
		}
		ep.QPos, ep.QVel = append(ep.QPos, qpos...), append(ep.QVel, qvel...)
		a := make([]float32, box.Dim())
		for j := range a {
			a[j] = box.High[j] * float32(math.Sin(0.3*float64(k)+float64(j)))
		}
		obs, r, term, trunc, err := e.Step(envs.Actions{Box: a})
		if err != nil {
			t.Fatal(err)
		}
		ep.Actions, ep.Rewards, ep.Obs = append(ep.Actions, a...), append(ep.Rewards, r), append(ep.Obs, obs...)
		if term || trunc {
			break
		}
	}
	return ep
}

// filmOf returns id's Film, failing the test with the renderer's error (which says what to
// install) where this machine cannot draw.
func filmOf(t *testing.T, id string) render.Film {
	t.Helper()
	f, err := render.FilmOf(id)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return f
}

// TestStepsPerFrame: the frame period of every v4 env, worked by hand from its dt and time
// limit: at least 0.03 s, a whole number of hundredths, at most 250 frames an episode.
func TestStepsPerFrame(t *testing.T) {
	want := map[string][2]int{ // every, delay
		"HalfCheetah-v4": {4, 20}, "Ant-v4": {4, 20}, "InvertedDoublePendulum-v4": {4, 20}, // dt 0.05 s, 1000 steps
		"Hopper-v4": {5, 4}, "Walker2d-v4": {5, 4}, // 0.008 s: 4 steps would be 3.2 hundredths
		"Humanoid-v4": {4, 6}, "HumanoidStandup-v4": {4, 6}, // 0.015 s: 2 steps (0.03 s) would be 500 frames
		"Swimmer-v4": {4, 16}, "InvertedPendulum-v4": {4, 16}, // 0.04 s
		"Reacher-v4": {2, 4}, // 0.02 s, 50 steps
		"Pusher-v4":  {1, 5}, // 0.05 s, 100 steps
	}
	for _, id := range IDs {
		md, err := defs(id).model()
		if err != nil {
			t.Fatal(err)
		}
		every, delay := stepsPerFrame(md.dt, defs(id).spec.MaxEpisodeSteps)
		if w := want[id]; every != w[0] || delay != w[1] {
			t.Errorf("%s: a frame every %d steps for %d hundredths, want %d and %d", id, every, delay, w[0], w[1])
		}
	}
}

// shots films ep with id's camera and keeps copies of the frames and their steps.
func shots(t *testing.T, id string, ep render.Episode) (steps []int, frames []*image.RGBA) {
	t.Helper()
	cam, err := openCamera(id)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	err = cam.Shoot(ep, func(step int, img *image.RGBA) error {
		steps = append(steps, step)
		c := *img
		c.Pix = slices.Clone(img.Pix)
		frames = append(frames, &c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return steps, frames
}

// colours counts the distinct colours of img.
func colours(img image.Image) int {
	seen := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			seen[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
		}
	}
	return len(seen)
}

// changed is the fraction of pixels that differ between a and b.
func changed(a, b image.Image) float64 {
	n, d := 0, 0
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			n++
			if color.RGBAModel.Convert(a.At(x, y)) != color.RGBAModel.Convert(b.At(x, y)) {
				d++
			}
		}
	}
	return float64(d) / float64(n)
}

// TestFilmRefused: an episode without its physical states, or of another env, is an error;
// on a machine where EGL cannot be loaded, or Mesa has no driver, FilmOf is an error that
// says what to install, in a process that goes on (run as a child process with the library
// renamed, or LIBGL_DRIVERS_PATH pointing nowhere, since EGL loads once a process).
func TestFilmRefused(t *testing.T) {
	cam, err := openCamera("InvertedPendulum-v4")
	if err != nil {
		t.Fatal(err)
	}
	ep := recordEpisode(t, "InvertedPendulum-v4", 3)
	bare := ep
	bare.QPos, bare.QVel, bare.NQ, bare.NV = nil, nil, 0, 0
	if err := cam.Shoot(bare, func(int, *image.RGBA) error { return nil }); err == nil || !strings.Contains(err.Error(), "qpos") {
		t.Errorf("an episode without qpos: %v", err)
	}
	other := recordEpisode(t, "Reacher-v4", 3)
	if err := cam.Shoot(other, func(int, *image.RGBA) error { return nil }); err == nil {
		t.Error("a Reacher episode was filmed as InvertedPendulum's")
	}
	for _, c := range []struct{ name, env string }{{"nolib", ""}, {"nodriver", "LIBGL_DRIVERS_PATH=" + t.TempDir()}} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "TOWERRL_FILM_CHILD="+c.name, c.env)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri") || !strings.Contains(string(out), "child: ok") {
			t.Errorf("%s: %v\n%s", c.name, err, out)
		}
	}
}

// TestMain runs TestFilmRefused's child processes: with TOWERRL_FILM_CHILD set (nolib: the
// EGL library renamed; nodriver: LIBGL_DRIVERS_PATH set by the parent), FilmOf must fail with
// ErrNoRenderer, saying what to install, and the envs must still step.
func TestMain(m *testing.M) {
	child := os.Getenv("TOWERRL_FILM_CHILD")
	if child == "" {
		os.Exit(m.Run())
	}
	if child == "nolib" {
		eglLibrary = "libEGL-towerrl-missing.so.1"
	}
	_, err := render.FilmOf("HalfCheetah-v4")
	fmt.Println(err)
	if !errors.Is(err, ErrNoRenderer) {
		fmt.Println("FilmOf did not fail with ErrNoRenderer")
		os.Exit(1)
	}
	e, err := envs.New("HalfCheetah-v4", 1)
	if err == nil {
		_, err = e.Reset()
		e.Close()
	}
	if err != nil {
		fmt.Println("the env does not run:", err)
		os.Exit(1)
	}
	fmt.Println("child: ok")
	os.Exit(0)
}

// TestFilmLastState: the film's last frame is of the episode's last recorded state stepped
// once more with its last action (the record holds the states before each step); that state
// is the one the episode ended in, up to the solver's warm start (the record does not keep
// it): its observation is the episode's last to 1e-4 for HalfCheetah and Hopper, both in
// contact with the floor (they were equal as float32 when this was written).
func TestFilmLastState(t *testing.T) {
	for _, id := range []string{"HalfCheetah-v4", "Hopper-v4"} {
		ep := recordEpisode(t, id, 12)
		n := ep.Length()
		e, err := envs.New(id, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Reset(); err != nil {
			t.Fatal(err)
		}
		ph, _ := envs.PhysicsOf(e)
		if err := ph.SetState(0, ep.QPos[(n-1)*ep.NQ:n*ep.NQ], ep.QVel[(n-1)*ep.NV:n*ep.NV]); err != nil {
			t.Fatal(err)
		}
		obs, _, _, _, err := e.Step(envs.Actions{Box: ep.Actions[(n-1)*ep.ActDim : n*ep.ActDim]})
		if err != nil {
			t.Fatal(err)
		}
		want := ep.Obs[n*ep.ObsDim : (n+1)*ep.ObsDim]
		for j := range want {
			if math.Abs(float64(obs[j]-want[j])) > 1e-4 {
				t.Errorf("%s: observation %d after the replayed last step is %v, the episode ended at %v", id, j, obs[j], want[j])
			}
		}
		e.Close()
	}
}

//go:build mujoco && cgo

package mujoco

import (
	"fmt"
	"image"
	"math"
	"runtime"
	"slices"

	"github.com/towerrl/towerrl/envs/render"
)

// Frames are Gymnasium's default size for MuJoCo envs (mujoco_env.py's DEFAULT_SIZE).
const frameWidth, frameHeight = 480, 480

// shot is how Gymnasium's released v4 envs point their camera (MujocoRenderer): through the
// model's camera named "track" where it has one (mode trackcom: it follows the centre of mass
// at a fixed offset), ignoring the env's DEFAULT_CAMERA_CONFIG; otherwise a free camera looking
// at the median of the geoms' positions from the model's extent (OffScreenViewer._init_camera),
// then the config's distance, lookat and elevation. Gymnasium's main branch (July 2026, not in a
// release up to 1.3.0) uses the free camera and the config everywhere.
type shot struct {
	distance  float64     // 0: the model's extent
	lookat    *[3]float64 // nil: the median of the geoms' positions in the first state
	elevation float64     // 0: mjv_defaultCamera's
}

// freeShots are the DEFAULT_CAMERA_CONFIG of the v4 envs whose models have no "track" camera
// (the config's trackbodyid does not move a free camera).
var freeShots = map[string]shot{
	"InvertedPendulum-v4":       {distance: 2.04},
	"InvertedDoublePendulum-v4": {distance: 4.1225, lookat: &[3]float64{0, 0, 0.12250000000000005}},
	"Reacher-v4":                {},
	"Pusher-v4":                 {distance: 4.0},
}

func init() {
	for _, id := range IDs {
		render.RegisterCamera(id, func() (render.Camera, error) { return openCamera(id) })
	}
}

// maxFrames bounds the frames of an episode that lasts the env's time limit: about 7 MB of
// GIF at 480×480 (a HalfCheetah frame compresses to about 29 kB).
const maxFrames = 250

// stepsPerFrame is the fewest steps of dt seconds a frame can show: at least 0.03 s (a browser
// shows a GIF's frame for 0.02 s at the least), a whole number of GIF's hundredths of a second
// (so that the GIF plays in real time), and no more than maxFrames frames for an episode of
// limit steps. It returns the steps and the frame's duration in hundredths of a second.
// HalfCheetah (dt 0.05 s, 1000 steps) is filmed every 4 steps, 0.2 s a frame; Hopper (dt
// 0.008 s) every 5 steps, 0.04 s a frame; Pusher (100 steps) every step.
func stepsPerFrame(dt float64, limit int) (every, delay int) {
	for k := 1; k <= 1000; k++ {
		cs := 100 * float64(k) * dt
		if cs >= 3-1e-9 && math.Abs(cs-math.Round(cs)) < 1e-6 && (limit <= 0 || (limit+k-1)/k <= maxFrames) {
			return k, int(math.Round(cs))
		}
	}
	k := max(1, int(math.Ceil(0.03/dt)), (limit+maxFrames-1)/maxFrames)
	return k, max(1, int(math.Round(100*float64(k)*dt)))
}

// openCamera compiles id's model and makes its renderer once, to check that it can draw here.
func openCamera(id string) (render.Camera, error) {
	df := defs(id)
	if df == nil {
		return render.Camera{}, fmt.Errorf("mujoco: no env %q", id)
	}
	md, err := df.model()
	if err != nil {
		return render.Camera{}, err
	}
	if err := withFilm(df, md, func(*film) error { return nil }); err != nil {
		return render.Camera{}, err
	}
	every, delay := stepsPerFrame(md.dt, df.spec.MaxEpisodeSteps)
	return render.Camera{Width: frameWidth, Height: frameHeight, Every: every, Delay: delay,
		Shoot: func(ep render.Episode, frame func(int, *image.RGBA) error) error {
			return withFilm(df, md, func(f *film) error { return f.shoot(ep, every, frame) })
		}}, nil
}

// film is one renderer of one env: a copy of its model (whose offscreen buffer it may enlarge),
// an mjData to set the episode's states in, and the view.
type film struct {
	df   *def
	md   *model // the copy
	d    *data
	ptrs dataPtrs
	v    *view
}

// withFilm runs fn with a film of df's model md on a locked OS thread (an EGL context is
// current on one thread) and frees it after.
func withFilm(df *def, md *model, fn func(*film) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cm, err := copyModel(md)
	if err != nil {
		return err
	}
	cp := *md
	cp.m = cm
	defer deleteModel(&cp)
	g := &cm.vis.global // Gymnasium grows the offscreen buffer to the frame, never shrinks it
	g.offwidth = max(g.offwidth, frameWidth)
	g.offheight = max(g.offheight, frameHeight)
	d, err := newData(&cp)
	if err != nil {
		return err
	}
	defer d.free()
	v, err := newView(&cp, frameWidth, frameHeight)
	if err != nil {
		return err
	}
	defer v.free()
	f := &film{df: df, md: &cp, d: d, ptrs: newDataPtrs([]*data{d}), v: v}
	defer f.ptrs.free()
	return fn(f)
}

// aim points the camera as Gymnasium does (see shot), the first state already set.
func (f *film) aim() {
	if id, err := f.md.cameraID("track"); err == nil {
		f.v.fixedCamera(id)
		return
	}
	s := freeShots[f.df.spec.ID]
	lookat := f.md.geomMedian(f.d)
	if s.lookat != nil {
		lookat = *s.lookat
	}
	distance := f.md.extent()
	if s.distance != 0 {
		distance = s.distance
	}
	f.v.freeCamera(lookat, distance, s.elevation)
}

// shoot films ep: the state before steps 0, every, 2·every, … (set from the episode's qpos and
// qvel, then mj_forward), and the episode's end, which the record does not hold: its last
// state stepped once more with its last action (ctrl, frame_skip mj_steps, then mj_forward
// so that the bodies are drawn where qpos puts them, as in the other frames).
func (f *film) shoot(ep render.Episode, every int, frame func(int, *image.RGBA) error) error {
	n, md := ep.Length(), f.md
	if ep.NQ != md.nq || ep.NV != md.nv || len(ep.QPos) < n*md.nq || len(ep.QVel) < n*md.nv || n == 0 {
		return fmt.Errorf("mujoco: filming %s needs the episode's qpos (%d a step) and qvel (%d a step) before each of its %d steps; it has %d and %d values of %d and %d",
			f.df.spec.ID, md.nq, md.nv, n, len(ep.QPos), len(ep.QVel), ep.NQ, ep.NV)
	}
	if len(ep.Actions) < n*ep.ActDim || ep.ActDim != md.nu {
		return fmt.Errorf("mujoco: filming %s needs %d actions of %d values, the episode has %d values of %d", f.df.spec.ID, n, md.nu, len(ep.Actions), ep.ActDim)
	}
	img := image.NewRGBA(image.Rect(0, 0, f.v.width, f.v.height))
	set := func(t int) error {
		return md.setState(f.d, ep.QPos[t*md.nq:(t+1)*md.nq], ep.QVel[t*md.nv:(t+1)*md.nv])
	}
	if err := set(0); err != nil {
		return err
	}
	f.aim()
	for t := 0; t < n; t += every {
		if err := set(t); err != nil {
			return err
		}
		if err := f.v.render(md, f.d, img); err != nil {
			return err
		}
		if err := frame(t, img); err != nil {
			return err
		}
	}
	if err := set(n - 1); err != nil {
		return err
	}
	for j, a := range ep.Actions[(n-1)*md.nu : n*md.nu] {
		f.d.ctrl[j] = float64(a)
	}
	if _, err := md.step(f.ptrs, 0, 1, f.df.frameSkip, false); err != nil {
		return err
	}
	if err := md.forward(f.d); err != nil {
		return err
	}
	if err := f.v.render(md, f.d, img); err != nil {
		return err
	}
	return frame(n, img)
}

// median is numpy's median: the middle value, or the mean of the two middle values.
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	k := len(s) / 2
	if len(s)%2 == 1 {
		return s[k]
	}
	return (s[k-1] + s[k]) / 2
}

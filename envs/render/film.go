package render

import (
	"fmt"
	"image"
	"io"
	"slices"
	"strings"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// A Camera films a simulated env from its physical states (an Episode's QPos and QVel), in
// full colour: package envs/mujoco registers one per MuJoCo env, drawn offscreen by MuJoCo's
// own renderer, so that this package links no OpenGL.
type Camera struct {
	Width, Height int
	// Every is the number of env steps between two frames and Delay the time a frame is
	// shown, in hundredths of a second (GIF's unit): Every steps of the env's time.
	Every, Delay int
	// Shoot calls frame with the frames of ep at steps 0, Every, 2·Every, … before its last
	// step, then at its end (step ep.Length()). img is reused from call to call.
	Shoot func(ep Episode, frame func(step int, img *image.RGBA) error) error
}

var (
	camerasMu sync.Mutex
	cameras   = map[string]func() (Camera, error){}
	opened    = map[string]Camera{} // cameras that opened once: not checked again
)

// RegisterCamera registers open as the maker of env id's Camera (package envs/mujoco does, in
// init). open makes the renderer once and frees it, to check that it can draw here: where it
// cannot, its error says what to install.
func RegisterCamera(id string, open func() (Camera, error)) {
	camerasMu.Lock()
	defer camerasMu.Unlock()
	cameras[id] = open
	delete(opened, id)
}

// camera returns env id's Camera, opening it the first time (later calls reuse it: making a
// renderer takes a second or more); ok is false when id has none.
func camera(id string) (c Camera, ok bool, err error) {
	camerasMu.Lock()
	defer camerasMu.Unlock()
	if c, ok := opened[id]; ok {
		return c, true, nil
	}
	open, ok := cameras[id]
	if !ok {
		return Camera{}, false, nil
	}
	if c, err = open(); err == nil {
		opened[id] = c
	}
	return c, true, err
}

// Film draws the episodes of one env as animated GIFs, with the return so far and the step in
// the top-left corner: a classic-control env's Scene, or a simulated env's Camera.
type Film struct {
	ID            string
	Width, Height int
	FPS           int // frames per second of the GIF (rounded: 100/Delay)
	// Every is the number of env steps between two frames: 1 for a Scene, a Camera's Every.
	Every int
	// Delay is the time a frame is shown, in hundredths of a second.
	Delay  int
	scene  *Scene
	camera *Camera
}

// FilmOf returns the Film of envID. For a simulated env it makes the renderer once a process
// to check that it can draw here (a MuJoCo env on a machine without EGL is an error that says
// what to install; a failure is checked again on the next call).
func FilmOf(envID string) (Film, error) {
	if s, err := For(envID); err == nil {
		return Film{ID: envID, Width: s.Width, Height: s.Height, FPS: s.FPS, Every: 1, Delay: delayOf(s.FPS), scene: &s}, nil
	}
	c, ok, err := camera(envID)
	if !ok {
		return Film{}, fmt.Errorf("%w %q: episodes are drawn for %s", ErrUnsupported, envID, strings.Join(FilmIDs(), ", "))
	}
	if err != nil {
		return Film{}, fmt.Errorf("render: %s: %w", envID, err)
	}
	if c.Shoot == nil || c.Width < 1 || c.Height < 1 || c.Every < 1 || c.Delay < 1 {
		return Film{}, fmt.Errorf("render: %s: the camera registered is incomplete: %d×%d, a frame every %d steps shown for %d hundredths of a second",
			envID, c.Width, c.Height, c.Every, c.Delay)
	}
	return Film{ID: envID, Width: c.Width, Height: c.Height, FPS: max(1, (100+c.Delay/2)/c.Delay), Every: c.Every, Delay: c.Delay, camera: &c}, nil
}

// FilmIDs lists the envs that have a Scene or a Camera in this build.
func FilmIDs() []string {
	ids := IDs()
	camerasMu.Lock()
	for id := range cameras {
		ids = append(ids, id)
	}
	camerasMu.Unlock()
	slices.Sort(ids)
	return ids
}

// Frames is the number of frames Write draws for an episode of steps steps: the first state,
// one every Every steps, and the last.
func (f Film) Frames(steps int) int {
	return (steps+f.Every-1)/f.Every + 1
}

// Write draws ep as an animated GIF on w and returns the number of frames written.
func (f Film) Write(w io.Writer, ep Episode) (int, error) {
	if f.scene != nil {
		return WriteEpisode(w, *f.scene, ep)
	}
	if f.camera == nil {
		return 0, fmt.Errorf("render: the zero Film draws nothing; make one with FilmOf")
	}
	return writeShots(w, *f.camera, ep)
}

// writeShots writes the frames of cam's Shoot as a GIF, each over the median cut of its own
// colours (see quantizer), captioned in white on black.
func writeShots(w io.Writer, cam Camera, ep Episode) (int, error) {
	var (
		g     *GIF
		frame *image.Paletted
		q     = newQuantizer()
	)
	ret, t := 0.0, 0
	err := cam.Shoot(ep, func(step int, img *image.RGBA) error {
		if img.Rect.Dx() != cam.Width || img.Rect.Dy() != cam.Height {
			return fmt.Errorf("render: a %d×%d camera gave a %d×%d frame", cam.Width, cam.Height, img.Rect.Dx(), img.Rect.Dy())
		}
		if g == nil {
			var err error
			if g, err = newGIF(w, cam.Width, cam.Height, cam.Delay, nil); err != nil {
				return err
			}
			frame = image.NewPaletted(image.Rect(0, 0, cam.Width, cam.Height), nil)
		}
		if err := q.cut(img); err != nil {
			return err
		}
		frame.Palette = q.pal
		for ; t < step && t < len(ep.Rewards); t++ {
			ret += float64(ep.Rewards[t])
		}
		q.apply(frame, img)
		shadowCaption(frame, captionText(ret, step), uint8(len(q.pal)-2), uint8(len(q.pal)-1))
		return g.Frame(frame)
	})
	if g == nil {
		if err == nil {
			err = fmt.Errorf("render: the camera gave no frame")
		}
		return 0, err
	}
	if err != nil {
		return g.Frames(), err
	}
	return g.Frames(), g.Close()
}

// captionText is a frame's caption: the return so far and the step.
func captionText(ret float64, step int) string { return fmt.Sprintf("return %.2f  step %d", ret, step) }

// shadowCaption writes text in the top-left corner in colour fg over a one-pixel shadow in
// colour bg (indices into dst's palette), readable on a light or a dark scene.
func shadowCaption(dst *image.Paletted, text string, fg, bg uint8) {
	for _, c := range []struct {
		dx int
		ci uint8
	}{{1, bg}, {0, fg}} {
		d := font.Drawer{Dst: dst, Src: image.NewUniform(dst.Palette[c.ci]), Face: basicfont.Face7x13,
			Dot: fixed.P(dst.Rect.Min.X+6+c.dx, dst.Rect.Min.Y+16+c.dx)}
		d.DrawString(text)
	}
}

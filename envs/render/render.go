// Package render draws the classic-control environments as Gymnasium draws them (the
// render methods of gymnasium/envs/classic_control: screen sizes, scales, shapes and colours)
// into paletted images, in pure Go, and writes episodes as animated GIFs ([GIF]).
//
// A [Scene] draws an env's frame from its observation and the action that led to it (nil for
// the first frame of an episode): every classic env's state can be read back from its
// observation (Acrobot's and Pendulum's angles from their cosines and sines), at float32
// precision. Gymnasium draws with y pointing up and flips the surface; so does a Scene. Edges
// are not anti-aliased (pygame's aapolygon outlines are not drawn), and Pendulum's torque
// arrow (an image in Gymnasium's assets) is drawn as an arc with an arrowhead whose radius grows
// with the torque.
//
// Registered: CartPole-v1 (and CartPoleNoVel-v1, which observes the same position and angle),
// Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0, Pendulum-v1. [For] refuses any other id
// with the list.
//
// Simulated envs are filmed instead: package envs/mujoco registers a [Camera] for each MuJoCo
// env (RegisterCamera), drawn offscreen by MuJoCo's renderer from the episode's physical states
// in full colour; [Film] writes either kind as a GIF, a camera's frames over a median cut of
// the first frame's colours (see quantizer). FilmOf names the envs of both kinds.
//
// Scenes are values with no state: safe for concurrent use. A GIF is owned by one goroutine.
package render

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"slices"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// ErrUnsupported is wrapped by the error of For for an env that has no Scene.
var ErrUnsupported = errors.New("render: no renderer for this environment")

// Palette holds every colour a Scene draws, in this order: white, black, and the colours of
// Gymnasium's shapes.
var Palette = color.Palette{
	color.RGBA{255, 255, 255, 255}, // background
	color.RGBA{0, 0, 0, 255},       // CartPole's cart and track, MountainCar's hill, car and flagpole, Acrobot's line, Pendulum's axle
	color.RGBA{202, 152, 101, 255}, // CartPole's pole
	color.RGBA{129, 132, 203, 255}, // CartPole's axle
	color.RGBA{0, 204, 204, 255},   // Acrobot's links
	color.RGBA{204, 204, 0, 255},   // Acrobot's joints, MountainCar's flag
	color.RGBA{128, 128, 128, 255}, // MountainCar's wheels
	color.RGBA{204, 77, 77, 255},   // Pendulum's rod
}

// Indices into Palette.
const (
	white uint8 = iota
	black
	pole
	axle
	link
	joint
	wheel
	rod
)

// Scene draws the frames of one environment.
type Scene struct {
	ID            string
	Width, Height int
	FPS           int // Gymnasium's metadata["render_fps"]
	draw          func(c canvas, obs, act []float32)
}

var scenes = map[string]Scene{
	"CartPole-v1":              {ID: "CartPole-v1", Width: 600, Height: 400, FPS: 50, draw: cartPole},
	"CartPoleNoVel-v1":         {ID: "CartPoleNoVel-v1", Width: 600, Height: 400, FPS: 50, draw: cartPole},
	"Acrobot-v1":               {ID: "Acrobot-v1", Width: 500, Height: 500, FPS: 15, draw: acrobot},
	"MountainCar-v0":           {ID: "MountainCar-v0", Width: 600, Height: 400, FPS: 30, draw: mountainCar(0.5)},
	"MountainCarContinuous-v0": {ID: "MountainCarContinuous-v0", Width: 600, Height: 400, FPS: 30, draw: mountainCar(0.45)},
	"Pendulum-v1":              {ID: "Pendulum-v1", Width: 500, Height: 500, FPS: 30, draw: pendulum},
}

// IDs lists the envs that have a Scene.
func IDs() []string {
	ids := make([]string, 0, len(scenes))
	for id := range scenes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// For returns envID's Scene.
func For(envID string) (Scene, error) {
	s, ok := scenes[envID]
	if !ok {
		return Scene{}, fmt.Errorf("%w %q: scenes are drawn for %s (MuJoCo envs are filmed by a Camera: FilmOf)",
			ErrUnsupported, envID, strings.Join(IDs(), ", "))
	}
	return s, nil
}

// NewFrame returns a blank frame of the scene's size over Palette.
func (s Scene) NewFrame() *image.Paletted {
	return image.NewPaletted(image.Rect(0, 0, s.Width, s.Height), Palette)
}

// Draw draws into dst (a frame from NewFrame) the env in the state of observation obs,
// reached by action act (the action the env took, clipped to its bounds; nil for an
// episode's first frame).
func (s Scene) Draw(dst *image.Paletted, obs, act []float32) error {
	if dst.Rect.Dx() != s.Width || dst.Rect.Dy() != s.Height {
		return fmt.Errorf("render: %s frames are %d×%d, got %d×%d", s.ID, s.Width, s.Height, dst.Rect.Dx(), dst.Rect.Dy())
	}
	if len(obs) < obsLen[s.ID] {
		return fmt.Errorf("render: %s observations have %d values, got %d", s.ID, obsLen[s.ID], len(obs))
	}
	clear(dst.Pix)
	s.draw(canvas{dst}, obs, act)
	return nil
}

var obsLen = map[string]int{"CartPole-v1": 4, "CartPoleNoVel-v1": 4, "Acrobot-v1": 6, "MountainCar-v0": 2,
	"MountainCarContinuous-v0": 2, "Pendulum-v1": 3}

// Caption writes text in black in the frame's top-left corner (7×13 pixel glyphs).
func Caption(dst *image.Paletted, text string) {
	d := font.Drawer{Dst: dst, Src: image.NewUniform(Palette[black]), Face: basicfont.Face7x13,
		Dot: fixed.P(dst.Rect.Min.X+6, dst.Rect.Min.Y+16)}
	d.DrawString(text)
}

// canvas draws in Gymnasium's coordinates: x to the right, y up from the bottom row; a
// pixel (px, py) is the unit square from (px, py), and is covered when its centre is.
type canvas struct{ img *image.Paletted }

func (c canvas) set(px, py int, ci uint8) {
	r := c.img.Rect
	if px < 0 || px >= r.Dx() || py < 0 || py >= r.Dy() {
		return
	}
	c.img.Pix[(r.Dy()-1-py)*c.img.Stride+px] = ci // Gymnasium's vertical flip
}

type pt struct{ x, y float64 }

// polygon fills the pixels whose centres lie inside the polygon (even-odd rule).
func (c canvas) polygon(ps []pt, ci uint8) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range ps {
		lo, hi = math.Min(lo, p.y), math.Max(hi, p.y)
	}
	var xs []float64
	for py := int(math.Floor(lo)); py <= int(math.Ceil(hi)); py++ {
		y := float64(py) + 0.5
		xs = xs[:0]
		for i, a := range ps {
			b := ps[(i+1)%len(ps)]
			if (a.y <= y) != (b.y <= y) {
				xs = append(xs, a.x+(y-a.y)*(b.x-a.x)/(b.y-a.y))
			}
		}
		slices.Sort(xs)
		for k := 0; k+1 < len(xs); k += 2 {
			for px := int(math.Ceil(xs[k] - 0.5)); float64(px)+0.5 <= xs[k+1]; px++ {
				c.set(px, py, ci)
			}
		}
	}
}

// circle fills the disc of radius r around the pixel (cx, cy), as gfxdraw.filled_circle.
func (c canvas) circle(cx, cy, r int, ci uint8) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			if dx*dx+dy*dy <= r*r {
				c.set(cx+dx, cy+dy, ci)
			}
		}
	}
}

// line draws a one-pixel line from a to b (Bresenham's, on the pixels holding the ends).
func (c canvas) line(a, b pt, ci uint8) {
	x0, y0, x1, y1 := int(math.Floor(a.x)), int(math.Floor(a.y)), int(math.Floor(b.x)), int(math.Floor(b.y))
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.set(x0, y0, ci)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int { return max(x, -x) }

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}

// rotate is pygame's Vector2.rotate_rad: counter-clockwise by a radians.
func rotate(p pt, a float64) pt {
	s, c := math.Sincos(a)
	return pt{p.x*c - p.y*s, p.x*s + p.y*c}
}

// rect returns the corners (l,b), (l,t), (r,t), (r,b) rotated by a and moved by o.
func rect(l, r, t, b, a float64, o pt) []pt {
	ps := []pt{{l, b}, {l, t}, {r, t}, {r, b}}
	for i, p := range ps {
		p = rotate(p, a)
		ps[i] = pt{p.x + o.x, p.y + o.y}
	}
	return ps
}

// cartPole is CartPoleEnv.render: a 600×400 screen, 4.8 m of track.
func cartPole(c canvas, obs, _ []float32) {
	x, theta := float64(obs[0]), float64(obs[2])
	scale := 600 / (2.4 * 2)
	const polewidth, cartwidth, cartheight = 10.0, 50.0, 30.0
	polelen := scale * (2 * 0.5)
	cartx := x*scale + 600/2.0
	carty := 100.0 // top of the cart
	axleoffset := cartheight / 4.0
	c.polygon(rect(-cartwidth/2, cartwidth/2, cartheight/2, -cartheight/2, 0, pt{cartx, carty}), black)
	c.polygon(rect(-polewidth/2, polewidth/2, polelen-polewidth/2, -polewidth/2, -theta, pt{cartx, carty + axleoffset}), pole)
	c.circle(int(cartx), int(carty+axleoffset), int(polewidth/2), axle)
	for px := 0; px <= 600; px++ { // gfxdraw.hline(surf, 0, screen_width, carty)
		c.set(px, int(carty), black)
	}
}

// acrobot is AcrobotEnv.render: a 500×500 screen, 2.2 m each side of the pivot.
func acrobot(c canvas, obs, _ []float32) {
	th1 := math.Atan2(float64(obs[1]), float64(obs[0]))
	th2 := math.Atan2(float64(obs[3]), float64(obs[2]))
	const bound = 1.0 + 1.0 + 0.2
	scale := 500 / (bound * 2)
	offset := 500 / 2.0
	p1 := pt{-1.0 * math.Cos(th1) * scale, 1.0 * math.Sin(th1) * scale}
	xys := []pt{{0, 0}, {p1.y, p1.x}} // [[0, 0], p1][:, ::-1]
	thetas := []float64{th1 - math.Pi/2, th1 + th2 - math.Pi/2}
	c.line(pt{-2.2*scale + offset, 1*scale + offset}, pt{2.2*scale + offset, 1*scale + offset}, black)
	for i, p := range xys {
		x, y := p.x+offset, p.y+offset
		llen := 1.0 * scale
		c.polygon(rect(0, llen, 0.1*scale, -0.1*scale, thetas[i], pt{x, y}), link)
		c.circle(int(x), int(y), int(0.1*scale), joint)
	}
}

// mountainCar is MountainCarEnv.render (and Continuous_MountainCarEnv's, whose flag stands at
// goal 0.45): a 600×400 screen over positions −1.2 to 0.6.
func mountainCar(goal float64) func(c canvas, obs, _ []float32) {
	return func(c canvas, obs, _ []float32) {
		const minPos, maxPos = -1.2, 0.6
		height := func(x float64) float64 { return math.Sin(3*x)*.45 + .55 }
		scale := 600 / (maxPos - minPos)
		const carwidth, carheight, clearance = 40.0, 20.0, 10.0
		pos := float64(obs[0])
		prev := pt{}
		for i := range 100 { // np.linspace(min_position, max_position, 100)
			x := minPos + float64(i)*(maxPos-minPos)/99
			p := pt{(x - minPos) * scale, height(x) * scale}
			if i > 0 {
				c.line(prev, p, black)
			}
			prev = p
		}
		o := pt{(pos - minPos) * scale, clearance + height(pos)*scale}
		c.polygon(rect(-carwidth/2, carwidth/2, carheight, 0, math.Cos(3*pos), o), black)
		for _, w := range []pt{{carwidth / 4, 0}, {-carwidth / 4, 0}} {
			w = rotate(w, math.Cos(3*pos))
			c.circle(int(w.x+o.x), int(w.y+o.y), int(carheight/2.5), wheel)
		}
		flagx := int((goal - minPos) * scale)
		flagy1 := int(height(goal) * scale)
		flagy2 := flagy1 + 50
		for y := flagy1; y <= flagy2; y++ {
			c.set(flagx, y, black)
		}
		fx, fy := float64(flagx), float64(flagy2)
		c.polygon([]pt{{fx, fy}, {fx, fy - 10}, {fx + 25, fy - 5}}, joint)
	}
}

// pendulum is PendulumEnv.render: a 500×500 screen, 2.2 m each side of the pivot; the torque
// (the last action, clipped to ±2) drawn as an arc around the pivot in its direction.
func pendulum(c canvas, obs, act []float32) {
	theta := math.Atan2(float64(obs[1]), float64(obs[0]))
	const bound = 2.2
	scale := 500 / (bound * 2)
	offset := 500 / 2
	o := pt{float64(offset), float64(offset)}
	rodLength, rodWidth := 1*scale, 0.2*scale
	if len(act) > 0 {
		torqueArc(c, o, scale, math.Max(-2, math.Min(2, float64(act[0]))))
	}
	c.polygon(rect(0, rodLength, rodWidth/2, -rodWidth/2, theta+math.Pi/2, o), rod)
	c.circle(offset, offset, int(rodWidth/2), rod)
	end := rotate(pt{rodLength, 0}, theta+math.Pi/2)
	c.circle(int(end.x+o.x), int(end.y+o.y), int(rodWidth/2), rod)
	c.circle(offset, offset, int(0.05*scale), black)
}

// torqueArc stands for Gymnasium's clockwise.png, scaled to scale·|u|/2 pixels and mirrored
// for a positive (counter-clockwise) torque: a black arc of 3/4 turn around the pivot, radius
// scale·|u|/4, with an arrowhead at its end in the torque's direction.
func torqueArc(c canvas, o pt, scale, u float64) {
	r := scale * math.Abs(u) / 4
	if r < 2 {
		return
	}
	dir := math.Copysign(1, u) // + counter-clockwise
	const start, sweep = math.Pi / 2, 1.5 * math.Pi
	steps := int(r*sweep) + 1
	prev := pt{o.x + r*math.Cos(start), o.y + r*math.Sin(start)}
	for i := 1; i <= steps; i++ {
		a := start + dir*sweep*float64(i)/float64(steps)
		p := pt{o.x + r*math.Cos(a), o.y + r*math.Sin(a)}
		c.line(prev, p, black)
		prev = p
	}
	a := start + dir*sweep
	tip := pt{o.x + r*math.Cos(a), o.y + r*math.Sin(a)}
	tangent := pt{-math.Sin(a) * dir, math.Cos(a) * dir} // direction of travel
	normal := pt{math.Cos(a), math.Sin(a)}
	h := math.Max(4, r/4)
	c.polygon([]pt{
		{tip.x + tangent.x*h, tip.y + tangent.y*h},
		{tip.x + normal.x*h/2, tip.y + normal.y*h/2},
		{tip.x - normal.x*h/2, tip.y - normal.y*h/2},
	}, black)
}

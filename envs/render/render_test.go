package render

import (
	"bytes"
	"errors"
	"image"
	"image/gif"
	"testing"
)

// probe is a pixel of a frame (x from the left, row from the top, as in the image) and the
// palette index it must hold.
type probe struct {
	x, row int
	want   uint8
	why    string
}

func checkProbes(t *testing.T, f *image.Paletted, ps []probe) {
	t.Helper()
	for _, p := range ps {
		if got := f.ColorIndexAt(p.x, p.row); got != p.want {
			t.Errorf("pixel (%d, row %d), %s: colour %d %v, want %d %v", p.x, p.row, p.why, got, Palette[got], p.want, Palette[p.want])
		}
	}
}

func draw(t *testing.T, id string, obs, act []float32) *image.Paletted {
	t.Helper()
	s, err := For(id)
	if err != nil {
		t.Fatal(err)
	}
	f := s.NewFrame()
	if err := s.Draw(f, obs, act); err != nil {
		t.Fatal(err)
	}
	return f
}

// The expected pixels below are worked by hand from Gymnasium's render methods: a point at
// height y (y up) lands on row H−1−y after the flip, and a pixel is drawn when its centre
// (x+½, y+½) is inside a polygon.

// TestCartPole: scale = 600/4.8 = 125 px/m, the cart's middle at x·125 + 300, its top at
// y = 100 (the cart spans y 85–115, 50 px wide), the pole 10 px wide and 125 px long from the
// axle at y = 107.5, rotated by −θ, the axle a disc of radius 5 at (int(cartx), 107), the
// track the row y = 100.
func TestCartPole(t *testing.T) {
	if s, _ := For("CartPole-v1"); s.Width != 600 || s.Height != 400 || s.FPS != 50 {
		t.Errorf("CartPole scene %+v, want 600×400 at 50 fps", s)
	}
	f := draw(t, "CartPole-v1", []float32{0, 0, 0, 0}, nil)
	checkProbes(t, f, []probe{
		{300, 399 - 90, black, "cart"},
		{276, 399 - 86, black, "cart's lower left corner (x 275, y 85)"},
		{274, 399 - 86, white, "left of the cart"},
		{324, 399 - 114, black, "cart's upper right corner (x 325, y 115)"},
		{325, 399 - 114, white, "right of the cart (pixel centre 325.5)"},
		{300, 399 - 200, pole, "pole, 92.5 px above the axle"},
		{295, 399 - 200, pole, "pole's left edge (x 295)"},
		{294, 399 - 200, white, "left of the pole"},
		{300, 399 - 226, pole, "pole's top (y 227.5)"},
		{300, 399 - 228, white, "above the pole"},
		{300, 399 - 107, axle, "axle's centre (300, 107)"},
		{303, 399 - 111, axle, "axle, 3² + 4² = 25 = r²"},
		{100, 399 - 100, black, "track (y 100)"},
		{100, 399 - 101, white, "above the track"},
		{599, 399 - 100, black, "track's right end"},
		{5, 5, white, "background"},
	})
	// x = 1, θ = 0.2: cart at 425; the pole's axis point 100 px from the axle is
	// (425 + 100·sin 0.2, 107.5 + 100·cos 0.2) = (444.87, 205.51); 5.9 px across the axis,
	// along (cos 0.2, −sin 0.2), is (450.75, 204.32): outside the 10 px pole.
	f = draw(t, "CartPole-v1", []float32{1, 0, 0.2, 0}, nil)
	checkProbes(t, f, []probe{
		{425, 399 - 90, black, "cart moved to x 425"},
		{300, 399 - 90, white, "where the cart was"},
		{444, 399 - 205, pole, "leaning pole"},
		{450, 399 - 204, white, "beside the leaning pole"},
		{425, 399 - 200, white, "where the upright pole would be"},
	})
}

// TestAcrobot: scale = 500/4.4 px/m, the pivot at (250, 250), links 113.6 px long and
// 22.7 px wide, rotated by θ1 − π/2 and θ1 + θ2 − π/2; joints are discs of radius
// int(0.1·scale) = 11 at the pivot and at (sin θ1·scale, −cos θ1·scale) from it; the line at
// y = 363.6 spans the screen.
func TestAcrobot(t *testing.T) {
	// Hanging down (θ1 = θ2 = 0): link 1 from y 250 to 136.4, link 2 from 136.4 to 22.7.
	f := draw(t, "Acrobot-v1", []float32{1, 0, 1, 0, 0, 0}, nil)
	checkProbes(t, f, []probe{
		{250, 499 - 200, link, "link 1"},
		{250, 499 - 80, link, "link 2"},
		{250, 499 - 250, joint, "pivot"},
		{250, 499 - 136, joint, "elbow (250, int(136.4))"},
		{250, 499 - 20, white, "below link 2's end (22.7)"},
		{270, 499 - 200, white, "beside link 1 (half width 11.4)"},
		{100, 499 - 363, black, "the line at y 363.6"},
		{100, 499 - 300, white, "background"},
	})
	// θ1 = π/2 (cos 0, sin 1): link 1 horizontal to the elbow at (363.6, 250).
	f = draw(t, "Acrobot-v1", []float32{0, 1, 1, 0, 0, 0}, nil)
	checkProbes(t, f, []probe{
		{300, 499 - 250, link, "link 1, horizontal"},
		{363, 499 - 250, joint, "elbow (int(363.6), 250)"},
		{250, 499 - 200, white, "where the hanging link 1 was"},
	})
}

// TestMountainCar: scale = 600/1.8 px/m over positions −1.2 to 0.6; height(x) = 0.45·sin 3x +
// 0.55; the car (40×20 px) stands 10 px above the hill, rotated by cos 3·pos; wheels of
// radius 8 at (±10, 0) rotated; the flag pole at int((goal + 1.2)·scale) from
// int(height(goal)·scale) up 50 px, the flag a triangle 25 px long.
func TestMountainCar(t *testing.T) {
	// pos −0.5: height 0.101127, the car's origin (233.33, 43.71), rotation cos(−1.5) = 0.0707;
	// its local (0, 10) lands on (232.63, 53.68); its wheel (10, 0) on (243.31, 44.42), drawn
	// at (243, 44); 4 px below it, y 40, is wheel and not car.
	f := draw(t, "MountainCar-v0", []float32{-0.5, 0}, nil)
	checkProbes(t, f, []probe{
		{232, 399 - 53, black, "car body"},
		{243, 399 - 40, wheel, "front wheel below the car"},
		{233, 399 - 70, white, "above the car"},
		{566, 399 - 350, black, "flag pole at x int(566.7), y 332 to 382"},
		{570, 399 - 377, joint, "flag (566, 382), (566, 372), (591, 377)"},
		{570, 399 - 385, white, "above the flag"},
		{0, 399 - 249, black, "hill's left end, y = height(−1.2)·scale = 249.7"},
	})
	// MountainCarContinuous's goal is 0.45: the pole at int(1.65·scale) = 549, from y 329
	// (int(height(0.45)·scale)) to 379.
	f = draw(t, "MountainCarContinuous-v0", []float32{-0.5, 0}, nil)
	checkProbes(t, f, []probe{
		{549, 399 - 350, black, "flag pole at x 549"},
		{553, 399 - 374, joint, "flag (549, 379), (549, 369), (574, 374)"},
		{566, 399 - 350, white, "where the discrete env's pole stands"},
	})
}

// TestPendulum: scale = 500/4.4 px/m, the pivot at (250, 250); the rod 113.6 px long, 22.7 px
// wide, rotated by θ + π/2, with discs of radius 11 at both ends; the axle a black disc of
// radius int(0.05·scale) = 5. The torque's arc (radius scale·|u|/4 = 56.8 px at |u| = 2)
// starts at the top of the pivot and turns 3/4 of a turn in the torque's direction, its
// arrowhead (14.2 px) at the end.
func TestPendulum(t *testing.T) {
	f := draw(t, "Pendulum-v1", []float32{1, 0, 0}, nil) // upright
	checkProbes(t, f, []probe{
		{250, 499 - 300, rod, "rod, up"},
		{250, 499 - 250, black, "axle"},
		{257, 499 - 250, rod, "rod's disc around the axle (7² > 5², ≤ 11²)"},
		{250, 499 - 372, rod, "rod end's disc at (250, 363)"},
		{250, 499 - 376, white, "past the rod end's disc"},
		{150, 499 - 250, white, "background"},
	})
	f = draw(t, "Pendulum-v1", []float32{0, 1, 0}, nil) // θ = π/2: the rod points left
	checkProbes(t, f, []probe{{150, 499 - 250, rod, "rod, left"}, {250, 499 - 300, white, "where the upright rod was"}})

	// Hanging (θ = π), torque +2: counter-clockwise from the top (250, 306.8) through the
	// left (193.2, 250) to the right (306.8, 250), whose arrowhead points up.
	ccw := draw(t, "Pendulum-v1", []float32{-1, 0, 0}, []float32{2})
	cw := draw(t, "Pendulum-v1", []float32{-1, 0, 0}, []float32{-2})
	none := draw(t, "Pendulum-v1", []float32{-1, 0, 0}, nil)
	checkProbes(t, ccw, []probe{
		{250, 499 - 306, black, "arc's start, top"},
		{193, 499 - 250, black, "arc, left"},
		{311, 499 - 253, black, "arrowhead at the right end: (306.8±7.1, 250) to (306.8, 264.2)"},
		{188, 499 - 253, white, "no arrowhead at the left"},
	})
	checkProbes(t, cw, []probe{
		{250, 499 - 306, black, "arc's start, top"},
		{188, 499 - 253, black, "arrowhead at the left end: (193.2±7.1, 250) to (193.2, 264.2)"},
		{311, 499 - 253, white, "no arrowhead at the right"},
	})
	checkProbes(t, none, []probe{{250, 499 - 306, white, "no torque before the first action"}})
	// Clipped like the env: a torque of 9 draws the arc of 2.
	big := draw(t, "Pendulum-v1", []float32{-1, 0, 0}, []float32{9})
	if !bytes.Equal(big.Pix, ccw.Pix) {
		t.Error("a torque of 9 is not drawn as 2")
	}
}

// TestForAndDraw checks the errors: an env with no scene, a frame of the wrong size, a short
// observation.
func TestForAndDraw(t *testing.T) {
	if _, err := For("Hopper-v4"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("For(Hopper-v4): %v", err)
	}
	s, _ := For("Pendulum-v1")
	if err := s.Draw(image.NewPaletted(image.Rect(0, 0, 10, 10), Palette), []float32{1, 0, 0}, nil); err == nil {
		t.Error("Draw into a 10×10 frame succeeded")
	}
	if err := s.Draw(s.NewFrame(), []float32{1}, nil); err == nil {
		t.Error("Draw of a 1-value observation succeeded")
	}
	f := s.NewFrame()
	Caption(f, "return -123.4")
	black := 0
	for _, c := range f.Pix[:20*f.Stride] { // the caption's rows
		if c == 1 {
			black++
		}
	}
	if black < 50 {
		t.Errorf("the caption drew %d black pixels in the top 20 rows", black)
	}
}

// TestGIF writes frames and reads them back with image/gif: size, count, delays (50 fps: 2
// hundredths), looping forever, and every pixel.
func TestGIF(t *testing.T) {
	s, _ := For("CartPole-v1")
	var buf bytes.Buffer
	g, err := NewGIF(&buf, s.Width, s.Height, s.FPS)
	if err != nil {
		t.Fatal(err)
	}
	var frames []*image.Paletted
	for i := range 4 {
		f := s.NewFrame()
		if err := s.Draw(f, []float32{float32(i) * 0.3, 0, float32(i) * 0.05, 0}, nil); err != nil {
			t.Fatal(err)
		}
		Caption(f, "return 1")
		if err := g.Frame(f); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	if err := g.Frame(image.NewPaletted(image.Rect(0, 0, 5, 5), Palette)); err == nil {
		t.Error("a 5×5 frame went into a 600×400 GIF")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Frame(frames[0]); err == nil {
		t.Error("Frame after Close succeeded")
	}
	a, err := gif.DecodeAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if a.Config.Width != 600 || a.Config.Height != 400 || len(a.Image) != 4 || a.LoopCount != 0 {
		t.Fatalf("GIF %d×%d, %d frames, loop %d", a.Config.Width, a.Config.Height, len(a.Image), a.LoopCount)
	}
	for i, im := range a.Image {
		if a.Delay[i] != 2 {
			t.Errorf("frame %d delay %d, want 2", i, a.Delay[i])
		}
		for y := range 400 {
			for x := range 600 {
				want := Palette[frames[i].ColorIndexAt(x, y)]
				if r1, g1, b1, _ := im.At(x, y).RGBA(); [3]uint32{r1, g1, b1} != rgb(want) {
					t.Fatalf("frame %d pixel (%d, %d) = %v, want %v", i, x, y, im.At(x, y), want)
				}
			}
		}
	}
	for _, c := range []struct{ w, h, fps int }{{0, 10, 30}, {10, 10, 0}, {70000, 10, 30}} {
		if _, err := NewGIF(&buf, c.w, c.h, c.fps); err == nil {
			t.Errorf("NewGIF(%d, %d, %d fps) succeeded", c.w, c.h, c.fps)
		}
	}
	if g, _ := NewGIF(&bytes.Buffer{}, 5, 5, 30); g.Close() == nil {
		t.Error("a GIF of no frames closed without error")
	}
}

func rgb(c interface{ RGBA() (r, g, b, a uint32) }) [3]uint32 {
	r, g, b, _ := c.RGBA()
	return [3]uint32{r, g, b}
}

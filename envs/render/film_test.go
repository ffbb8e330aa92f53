package render

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"slices"
	"strings"
	"testing"
)

// rgba returns a w×h image whose pixel (x, y) is at(x, y).
func rgba(w, h int, at func(x, y int) color.RGBA) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, at(x, y))
		}
	}
	return img
}

// TestQuantizer: an image of 200 colours keeps each exactly (a median cut gives every colour
// its own box when there are fewer colours than entries), and the caption's white and black
// end the palette; a smooth 256×256 gradient of 65,536 colours is cut to 256 with a mean error
// under 4 levels a channel.
func TestQuantizer(t *testing.T) {
	few := rgba(100, 80, func(x, y int) color.RGBA {
		k := (x/10 + 10*(y/4)) % 200
		return color.RGBA{uint8(8 * (k % 8)), uint8(8 * (k / 8 % 5)), uint8(40 * (k / 40)), 255}
	})
	q := newQuantizer()
	if err := q.cut(few); err != nil {
		t.Fatal(err)
	}
	if len(q.pal) > 256 || q.pal[len(q.pal)-2] != (color.RGBA{255, 255, 255, 255}) || q.pal[len(q.pal)-1] != (color.RGBA{0, 0, 0, 255}) {
		t.Fatalf("palette of %d colours ending %v", len(q.pal), q.pal[len(q.pal)-2:])
	}
	dst := image.NewPaletted(few.Rect, q.pal)
	q.apply(dst, few)
	for y := range 80 {
		for x := range 100 {
			if got, want := dst.At(x, y), few.At(x, y); color.RGBAModel.Convert(got) != want {
				t.Fatalf("pixel (%d, %d): %v, want %v", x, y, got, want)
			}
		}
	}
	grad := rgba(256, 256, func(x, y int) color.RGBA { return color.RGBA{uint8(x), uint8(y), uint8((x + y) / 2), 255} })
	if err := q.cut(grad); err != nil {
		t.Fatal(err)
	}
	if len(q.pal) != 256 {
		t.Fatalf("a gradient of 65,536 colours cut to %d", len(q.pal))
	}
	dst = image.NewPaletted(grad.Rect, q.pal)
	q.apply(dst, grad)
	sum := 0
	for y := range 256 {
		for x := range 256 {
			a, b := dst.At(x, y).(color.RGBA), grad.RGBAAt(x, y)
			sum += absDiff(a.R, b.R) + absDiff(a.G, b.G) + absDiff(a.B, b.B)
		}
	}
	if mean := float64(sum) / (3 * 256 * 256); mean > 4 {
		t.Errorf("mean error %.2f levels a channel", mean)
	}
}

func absDiff(a, b uint8) int { return max(int(a)-int(b), int(b)-int(a)) }

// TestFilmCamera films a 7-step episode with a registered camera that draws a frame a step
// in a colour of its own, a frame every 3 steps: 4 frames (steps 0, 3, 6 and the end, 7),
// shown Delay hundredths each, in the camera's colours, captioned in white over black with the
// return at each frame's step; FilmIDs names the camera's env; a camera that cannot open is
// FilmOf's error.
func TestFilmCamera(t *testing.T) {
	var shot []int
	RegisterCamera("FakeSim-v0", func() (Camera, error) {
		return Camera{Width: 64, Height: 48, Every: 3, Delay: 8, Shoot: func(ep Episode, frame func(int, *image.RGBA) error) error {
			for _, s := range []int{0, 3, 6, ep.Length()} {
				shot = append(shot, s)
				img := rgba(64, 48, func(x, y int) color.RGBA { return color.RGBA{uint8(30 * s), uint8(x * 4), uint8(y * 5), 255} })
				if err := frame(s, img); err != nil {
					return err
				}
			}
			return nil
		}}, nil
	})
	RegisterCamera("BrokenSim-v0", func() (Camera, error) { return Camera{}, errors.New("no renderer here: install it") })
	f, err := FilmOf("FakeSim-v0")
	if err != nil {
		t.Fatal(err)
	}
	if f.FPS != 13 || f.Frames(7) != 4 || f.Frames(6) != 3 || !slices.Contains(FilmIDs(), "FakeSim-v0") || !slices.Contains(FilmIDs(), "CartPole-v1") {
		t.Fatalf("fps %d, Frames(7) %d, Frames(6) %d, FilmIDs %v", f.FPS, f.Frames(7), f.Frames(6), FilmIDs())
	}
	ep := Episode{ObsDim: 1, ActDim: 1, Obs: make([]float32, 8), Actions: make([]float32, 7), Rewards: []float32{1, 2, 3, 4, 5, 6, 7}}
	var buf bytes.Buffer
	n, err := f.Write(&buf, ep)
	if err != nil || n != 4 || !slices.Equal(shot, []int{0, 3, 6, 7}) {
		t.Fatalf("%d frames at %v, %v", n, shot, err)
	}
	g, err := gif.DecodeAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Image) != 4 || g.Config.Width != 64 || g.Config.Height != 48 || g.Delay[3] != 8 {
		t.Fatalf("%d frames of %d×%d, delay %d", len(g.Image), g.Config.Width, g.Config.Height, g.Delay[3])
	}
	for i, s := range []int{0, 3, 6, 7} {
		// Below the caption, the camera's colour: red 30·step.
		if r, _, _, _ := g.Image[i].At(40, 40).RGBA(); absDiff(uint8(r>>8), uint8(30*s)) > 8 {
			t.Errorf("frame %d: red %d at (40, 40), want about %d", i, r>>8, 30*s)
		}
		ret := []float64{0, 6, 21, 28}[i]
		want := rgba(64, 48, func(x, y int) color.RGBA { return color.RGBA{} })
		p := image.NewPaletted(want.Rect, color.Palette{color.RGBA{}, color.RGBA{255, 255, 255, 255}, color.RGBA{0, 0, 0, 255}})
		shadowCaption(p, captionText(ret, s), 1, 2)
		for y := range 20 {
			for x := range 64 {
				if ci := p.ColorIndexAt(x, y); ci != 0 && color.RGBAModel.Convert(g.Image[i].At(x, y)) != p.Palette[ci] {
					t.Fatalf("frame %d: caption pixel (%d, %d) is %v, want %v", i, x, y, g.Image[i].At(x, y), p.Palette[ci])
				}
			}
		}
	}
	if _, err := FilmOf("BrokenSim-v0"); err == nil || !strings.Contains(err.Error(), "install it") {
		t.Errorf("a camera that cannot open: %v", err)
	}
	if _, err := FilmOf("Nothing-v0"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "FakeSim-v0") {
		t.Errorf("an env with no drawing: %v", err)
	}
}

package render

import (
	"bytes"
	"image/gif"
	"testing"
)

// TestWriteEpisode draws a 3-step Pendulum episode: 4 frames (the first observation, then one a
// step), each the Scene's drawing of its observation and the action that led to it, captioned
// with the return so far; an episode whose columns are too short for its rewards is refused.
func TestWriteEpisode(t *testing.T) {
	s, _ := For("Pendulum-v1")
	ep := Episode{ObsDim: 3, ActDim: 1,
		Obs:     []float32{1, 0, 0, 0.8, 0.6, 1, 0, 1, 2, -1, 0, 3},
		Actions: []float32{-2, 0.5, 2},
		Rewards: []float32{-1.5, -0.25, -4}}
	var buf bytes.Buffer
	n, err := WriteEpisode(&buf, s, ep)
	if err != nil || n != 4 {
		t.Fatalf("%d frames, %v; want 4", n, err)
	}
	g, err := gif.DecodeAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Image) != 4 || g.Config.Width != 500 || g.Config.Height != 500 {
		t.Fatalf("%d frames of %d×%d", len(g.Image), g.Config.Width, g.Config.Height)
	}
	for i, caption := range []string{"return 0.00  step 0", "return -1.50  step 1", "return -1.75  step 2", "return -5.75  step 3"} {
		want := s.NewFrame()
		var act []float32
		if i > 0 {
			act = ep.Actions[i-1 : i]
		}
		if err := s.Draw(want, ep.Obs[3*i:3*i+3], act); err != nil {
			t.Fatal(err)
		}
		Caption(want, caption)
		for y := range 500 {
			for x := range 500 {
				if r1, g1, b1, _ := g.Image[i].At(x, y).RGBA(); [3]uint32{r1, g1, b1} != rgb(Palette[want.ColorIndexAt(x, y)]) {
					t.Fatalf("frame %d (%q) pixel (%d, %d) differs", i, caption, x, y)
				}
			}
		}
	}
	ep.Obs = ep.Obs[:9]
	if _, err := WriteEpisode(&buf, s, ep); err == nil {
		t.Error("an episode of 3 steps with 3 observations was drawn")
	}
}

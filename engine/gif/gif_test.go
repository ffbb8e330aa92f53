package gif

import (
	"bytes"
	"image/gif"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/batcher"
)

// TestDrawer: a CartPole episode of 3 steps is a GIF of 4 frames (the first observation, then
// one a step) at Gymnasium's 600×400, the size the Drawer reports; an env with no drawing is
// an error naming the envs that have one.
func TestDrawer(t *testing.T) {
	d, err := Drawer("CartPole-v1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Width != 600 || d.Height != 400 {
		t.Fatalf("Drawer reports %d×%d, want Gymnasium's 600×400", d.Width, d.Height)
	}
	tr := batcher.Trajectory{ObsDim: 4, ActDim: 1, Obs: []float32{0, 0, 0.01, 0, 0.1, 0.2, 0.02, 0.3, 0.2, 0.4, 0.05, 0.6, 0.3, 0.6, 0.1, 0.9},
		Actions: []float32{1, 1, 0}, Rewards: []float32{1, 1, 1}}
	var buf bytes.Buffer
	if err := d.Draw(&buf, tr); err != nil {
		t.Fatal(err)
	}
	g, err := gif.DecodeAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Image) != 4 || g.Config.Width != 600 || g.Config.Height != 400 {
		t.Fatalf("%d frames of %d×%d, want 4 of 600×400", len(g.Image), g.Config.Width, g.Config.Height)
	}
	if _, err := Drawer("HalfCheetah-v4"); err == nil || !strings.Contains(err.Error(), "CartPole-v1") {
		t.Fatalf("Drawer(HalfCheetah-v4) = %v, want an error naming the envs drawn", err)
	}
}

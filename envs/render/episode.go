package render

import (
	"fmt"
	"io"
)

// Episode is the record of an episode to draw (package batcher's Trajectory holds the same
// columns): Length()+1 observations of ObsDim values (the one before each step, then the
// last), Length() actions of ActDim values and Length() rewards. A simulated env's episode
// (what a Camera films) also has the physical state before each step: Length() rows of NQ
// values in QPos and of NV values in QVel (MuJoCo's qpos and qvel).
type Episode struct {
	ObsDim, ActDim        int
	Obs, Actions, Rewards []float32
	NQ, NV                int
	QPos, QVel            []float64
}

// Length is the episode's number of steps.
func (e Episode) Length() int { return len(e.Rewards) }

// WriteEpisode draws ep's frames with scene — the first observation, then one frame per step,
// each with the return so far and the step in the top-left corner — as an animated GIF at
// the scene's frame rate on w, and returns how many frames it wrote. Frames are compressed as
// they are drawn: an episode takes the memory of one frame.
func WriteEpisode(w io.Writer, scene Scene, ep Episode) (int, error) {
	n := ep.Length()
	if len(ep.Obs) < (n+1)*ep.ObsDim || len(ep.Actions) < n*ep.ActDim {
		return 0, fmt.Errorf("render: an episode of %d steps needs %d observation and %d action values, it has %d and %d",
			n, (n+1)*ep.ObsDim, n*ep.ActDim, len(ep.Obs), len(ep.Actions))
	}
	g, err := NewGIF(w, scene.Width, scene.Height, scene.FPS)
	if err != nil {
		return 0, err
	}
	frame := scene.NewFrame()
	ret := 0.0
	for t := 0; t <= n; t++ {
		var act []float32
		if t > 0 {
			act = ep.Actions[(t-1)*ep.ActDim : t*ep.ActDim]
			ret += float64(ep.Rewards[t-1])
		}
		if err := scene.Draw(frame, ep.Obs[t*ep.ObsDim:(t+1)*ep.ObsDim], act); err != nil {
			return g.Frames(), err
		}
		Caption(frame, captionText(ret, t))
		if err := g.Frame(frame); err != nil {
			return g.Frames(), err
		}
	}
	return g.Frames(), g.Close()
}

// Package gif draws a run's episodes for engine.Options.Draw (Config.GifEvery) with package
// envs/render, kept out of package engine so that the engine links no renderer (as package
// engine/curve keeps its plotting out).
package gif

import (
	"io"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/envs/render"
)

// Drawer is the engine.Drawer of env: its episodes drawn as Gymnasium draws the
// classic-control envs, with the return so far in a corner (render.WriteEpisode). An env
// render cannot draw is an error that names the ones it can.
func Drawer(env string) (engine.Drawer, error) {
	scene, err := render.For(env)
	if err != nil {
		return engine.Drawer{}, err
	}
	return engine.Drawer{Width: scene.Width, Height: scene.Height, Draw: func(w io.Writer, tr batcher.Trajectory) error {
		_, err := render.WriteEpisode(w, scene, render.Episode{ObsDim: tr.ObsDim, ActDim: tr.ActDim, Obs: tr.Obs,
			Actions: tr.Actions, Rewards: tr.Rewards})
		return err
	}}, nil
}

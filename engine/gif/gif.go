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
// classic-control envs, or filmed offscreen by MuJoCo for the MuJoCo envs (a binary that links
// package envs/mujoco), with the return so far in a corner (render.Film). An env render cannot
// draw is an error that names the ones it can; a MuJoCo env on a machine where MuJoCo cannot
// draw offscreen is an error that says what to install.
func Drawer(env string) (engine.Drawer, error) {
	film, err := render.FilmOf(env)
	if err != nil {
		return engine.Drawer{}, err
	}
	return engine.Drawer{Width: film.Width, Height: film.Height, Draw: func(w io.Writer, tr batcher.Trajectory) error {
		_, err := film.Write(w, Episode(tr))
		return err
	}}, nil
}

// Episode is tr as render draws it.
func Episode(tr batcher.Trajectory) render.Episode {
	return render.Episode{ObsDim: tr.ObsDim, ActDim: tr.ActDim, Obs: tr.Obs, Actions: tr.Actions, Rewards: tr.Rewards,
		NQ: tr.NQ, NV: tr.NV, QPos: tr.QPos, QVel: tr.QVel}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs/render"
	"github.com/towerrl/towerrl/internal/atomicfile"
	"go.uber.org/zap"
)

// gifFlags are --gif's: the episode to watch.
type gifFlags struct {
	path string
}

func (g *gifFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.path, "gif", "", "also write the first episode (env 0's, as evaluated) as an animated GIF to this new file, drawn as Gymnasium draws the classic-control envs (MuJoCo envs: filmed offscreen by MuJoCo through EGL), with the return in the top-left corner")
}

// check refuses, before anything runs, an env with no drawing (or a MuJoCo env where MuJoCo
// cannot draw offscreen) and a path that exists or whose folder does not.
func (g gifFlags) check(env string) error {
	if g.path == "" {
		return nil
	}
	if _, err := render.FilmOf(env); err != nil {
		return fmt.Errorf("--gif: %w", err)
	}
	if _, err := os.Lstat(g.path); err == nil {
		return fmt.Errorf("--gif %s exists; eval writes no file over another: choose a new name or remove it", g.path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--gif: %w", err)
	}
	if fi, err := os.Stat(filepath.Dir(g.path)); err != nil || !fi.IsDir() {
		return fmt.Errorf("--gif %s: its folder %s does not exist; create it first", g.path, filepath.Dir(g.path))
	}
	return nil
}

// gifSummary describes the GIF in eval's JSON summary.
type gifSummary struct {
	Path   string  `json:"path"`
	Frames int     `json:"frames"` // steps + 1: the first observation, then one per step (MuJoCo: one every "every" steps, and the last)
	Every  int     `json:"every"`  // env steps between two frames
	Width  int     `json:"width"`
	Height int     `json:"height"`
	FPS    int     `json:"fps"`
	Return float64 `json:"return"`
	Length int     `json:"length"`
}

// write records env 0's first episode with policy (nil: random) and writes it as a GIF; nil
// without --gif.
func (g gifFlags) write(ctx context.Context, log *zap.Logger, cfg batcher.EvalConfig, policy *bind.Policy) (*gifSummary, error) {
	if g.path == "" {
		return nil, nil
	}
	film, err := render.FilmOf(cfg.Env.ID)
	if err != nil {
		return nil, fmt.Errorf("--gif: %w", err)
	}
	tr, err := batcher.RecordEpisode(ctx, cfg, policy)
	if err != nil {
		return nil, fmt.Errorf("--gif: recording the episode: %w", err)
	}
	frames := 0
	err = atomicfile.Write(g.path, 0o644, func(w io.Writer) error {
		n, err := film.Write(w, render.Episode{ObsDim: tr.ObsDim, ActDim: tr.ActDim, Obs: tr.Obs, Actions: tr.Actions,
			Rewards: tr.Rewards, NQ: tr.NQ, NV: tr.NV, QPos: tr.QPos, QVel: tr.QVel})
		frames = n
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("--gif %s: %w", g.path, err)
	}
	log.Info("episode written", zap.String("gif", g.path), zap.Int("frames", frames), zap.Float64("return", tr.Return))
	return &gifSummary{Path: g.path, Frames: frames, Every: film.Every, Width: film.Width, Height: film.Height, FPS: film.FPS,
		Return: tr.Return, Length: tr.Length()}, nil
}

// Package curve draws a run's learning curve (gonum/plot), kept out of package engine so that
// library users who never plot do not link a plotting library: pass [Write] as
// engine.Options.Plot.
package curve

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/towerrl/towerrl/engine"
)

// Write draws the learning curve of a run, mean episode return against env steps (the
// iterations in which episodes ended), as a PNG at path.
func Write(path, title string, ms []engine.Metrics) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "env steps"
	p.Y.Label.Text = "mean episode return"
	p.Add(plotter.NewGrid())
	var pts plotter.XYs
	for _, m := range ms {
		if v := float64(m.ReturnMean); !math.IsNaN(v) {
			pts = append(pts, plotter.XY{X: float64(m.EnvSteps), Y: v})
		}
	}
	if len(pts) > 0 {
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("curve: learning curve: %w", err)
		}
		line.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
		line.Width = vg.Points(1.5)
		p.Add(line)
	}
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("curve: writing %s: %w", path, err)
	}
	return nil
}

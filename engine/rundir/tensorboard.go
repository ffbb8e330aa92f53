package rundir

import (
	"errors"
	"fmt"
	"time"

	"github.com/towerrl/towerrl/internal/tfevent"
)

// Scalar is one figure of a metrics line, under its TensorBoard tag.
type Scalar struct {
	Tag   string
	Value float64
}

// Figures turns a metrics line into the TensorBoard step it is drawn at and its figures
// (those that are NaN are left out of the file).
type Figures[M any] func(m M) (step int64, vs []Scalar)

// TensorBoard attaches TensorBoard event files (package internal/tfevent) as the run's Log,
// with a folder: every metrics line goes in as one event of figures(m), handed to the
// operating system before the iteration's checkpoint, so that a TensorBoard watching the
// folder follows the run live. step is the step of the checkpoint the run continues (0 for a
// fresh run): a resumed run's event files are first cut back to it (what a killed run wrote
// past it goes, as its metrics.jsonl lines do; even when off, so that files a later resume
// continues hold no steps this one retrains), and this process writes a new file from there,
// so the files hold each step once. A fresh run's file starts with text (the configuration)
// as the text summary under textTag.
func (r *Dir[M]) TensorBoard(off bool, step int64, textTag string, text func() (string, error), figures Figures[M]) error {
	if r.dir == "" {
		return nil
	}
	files, err := tfevent.Files(r.dir)
	if err != nil {
		return fmt.Errorf("engine: TensorBoard log: %w", err)
	}
	for _, path := range files {
		if _, err := tfevent.Truncate(path, step); err != nil {
			return fmt.Errorf("engine: TensorBoard log: %w; move the file out of the run directory (or resume with --no-tensorboard)", err)
		}
	}
	if off {
		return nil
	}
	now := time.Now()
	w, err := tfevent.Create(r.dir, now)
	if err != nil {
		return fmt.Errorf("engine: TensorBoard log: %w (or train with --no-tensorboard)", err)
	}
	if len(files) == 0 {
		s, err := text()
		if err == nil {
			err = w.Text(now, step, textTag, s)
		}
		if err != nil {
			return fmt.Errorf("engine: TensorBoard log: %w", errors.Join(err, w.Close()))
		}
	}
	r.Attach(&tensorBoard[M]{w: w, figures: figures})
	return nil
}

// tensorBoard is the Log of TensorBoard event files.
type tensorBoard[M any] struct {
	w       *tfevent.Writer
	figures Figures[M]
	vs      []tfevent.Scalar // reused
}

func (b *tensorBoard[M]) Write(m M) error {
	step, vs := b.figures(m)
	b.vs = b.vs[:0]
	for _, v := range vs {
		b.vs = append(b.vs, tfevent.Scalar{Tag: v.Tag, Value: v.Value})
	}
	return b.w.Scalars(time.Now(), step, b.vs)
}

func (b *tensorBoard[M]) Close() error { return b.w.Close() }

// image writes an encoded image under tag at step into the event file.
func (b *tensorBoard[M]) image(step int64, tag string, width, height int, encoded []byte) error {
	return b.w.Image(time.Now(), step, tag, width, height, 3, encoded)
}

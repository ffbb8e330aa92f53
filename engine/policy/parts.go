package policy

import (
	"errors"
	"fmt"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/learner"
)

// partRows is the most rows a tower of a RowMean algorithm (PPO) runs at once: a larger slice
// is computed in parts of at most this many rows, one after the other, whose gradients and
// statistics are weighed by their rows. What a part's layers write and read back (activations
// and their gradients) then stays in the core's cache. A 1-tower PPO update of CartPole's 64×64
// actor-critic ran 1.5M rows/s on 1,024 or 2,048 rows, 1.1M on 8,192 and 1.0–1.1M on 16,384 at
// once, 1.34–1.40M on 16,384 in parts; 2 towers of 8,192 rows (issue 32's run, minibatch
// 16,384) 1.74–1.87M, in parts 2.6M, and the run end to end 1.5× (parts of 2,048 rows:
// 1.2–1.3×; docs/benchmarks.md). An imported graph (CleanRL's CartPole export fine-tuned in
// that run) learned at 1.41–1.46M rows/s at once, 2.18M in parts. The sums over rows are then
// taken in another order, so a slice of more rows than this trains to other bits than one
// graph over all of them would; slices of up to partRows rows are computed as before.
//
// Parts of 512 rows rather than 1,024: issue 32's run (2 towers of 4,096 rows) learned in
// 64–70 ms an iteration against 72–77 with 1,024, 757–827k env steps/s against 700–756k, in
// 7 alternated rounds with float32 products (docs/benchmarks.md); with bf16 products 759–776k
// against 722–735k. Parts of 256 were no better than 512.
const partRows = 512

// inParts is build(rows), or, for a RowMean algorithm on more than partRows rows, a tower that
// runs its slice in parts of at most partRows rows (splitRows) through towers of those sizes,
// one built per size.
func inParts(rows int, a algo.Algorithm, build func(rows int) (learner.Tower, error)) (learner.Tower, error) {
	if _, ok := a.(algo.RowMean); !ok || rows <= partRows {
		return build(rows)
	}
	t := &partsTower{rows: rows}
	bySize := map[int]learner.Tower{}
	off := 0
	for _, n := range splitRows(rows, partRows) {
		tw, ok := bySize[n]
		if !ok {
			var err error
			if tw, err = build(n); err != nil {
				return nil, errors.Join(err, t.Close())
			}
			bySize[n] = tw
			t.own = append(t.own, tw)
		}
		t.parts = append(t.parts, towerPart{tw: tw, off: off, rows: n})
		off += n
	}
	t.names = t.own[0].StatNames()
	t.stats = make([]float64, len(t.names))
	return t, nil
}

// splitRows splits rows into the fewest parts of at most most rows, of nearly equal sizes (the
// larger first).
func splitRows(rows, most int) []int {
	n := (rows + most - 1) / most
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = rows / n
		if i < rows%n {
			sizes[i]++
		}
	}
	return sizes
}

// partsTower is a learner.Tower over rows rows that runs them in parts, each through a tower of
// its size, and weighs the parts' gradients and statistics by their rows.
type partsTower struct {
	rows  int
	names []string
	parts []towerPart
	own   []learner.Tower // one tower per part size
	view  learner.SampleBatch
	grad  []float32 // one part's gradient
	stats []float64 // one part's statistics
}

// towerPart is rows rows of the slice from row off, run by tw.
type towerPart struct {
	tw        learner.Tower
	off, rows int
}

func (t *partsTower) StatNames() []string { return t.names }

// Columns implements learner.ColumnTower: what its parts read.
func (t *partsTower) Columns() learner.Columns { return learner.ColumnsOf(t.own[0]) }

func (t *partsTower) Close() error {
	var errs []error
	for _, tw := range t.own {
		errs = append(errs, tw.Close())
	}
	return errors.Join(errs...)
}

// Grad computes the loss's gradient over mb's rows (exactly the tower's size): the parts'
// gradients and statistics, each weighed by its share of the rows.
func (t *partsTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	if n := mb.Len(); n != t.rows {
		return fmt.Errorf("engine: a tower of %d rows got %d", t.rows, n)
	}
	if len(t.grad) != len(grads) {
		t.grad = make([]float32, len(grads))
	}
	clear(grads)
	clear(stats)
	for _, p := range t.parts {
		if err := mb.View(&t.view, p.off, p.off+p.rows); err != nil {
			return err
		}
		if err := p.tw.Grad(&t.view, t.grad, t.stats); err != nil {
			return err
		}
		w := float64(p.rows) / float64(t.rows)
		kernels.Axpy(float32(w), t.grad, grads) // grads[i] += w·t.grad[i], Go's loop's bits
		for i, s := range t.stats {
			stats[i] += w * s
		}
	}
	return nil
}

// towerColumns is what a tower of algorithm a reads of its slice (learner.ColumnTower): the
// observations and actions, and the columns a's losses read (every column when a does not
// say: algo.ColumnReader).
func towerColumns(a algo.Algorithm) learner.Columns {
	if cr, ok := a.(algo.ColumnReader); ok {
		return learner.ColObs | learner.ColActions | cr.Columns()
	}
	return learner.AllColumns
}

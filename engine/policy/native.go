package policy

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// Native is one of towerrl's own architectures (package models), trained from scratch: its
// export is policy.onnx, it binds the batchers' default names, carries no state and has no
// warm-up.
type Native struct{ Params *models.Params }

// Native's Model methods: its parameters are models.Params' flat vector, its export (models.Export)
// is the artifact, with the batchers' default names; the config makes it again, so a
// checkpoint keeps no source; it has no recurrent state and nothing that warms up first.

func (n Native) Flat() []float32                                     { return n.Params.Data() }
func (n Native) HeadSpec() head.Spec                                 { return n.Params.Config().Spec }
func (n Native) Export(v int64) ([]byte, error)                      { return models.Export(n.Params, v) }
func (n Native) Towers(a algo.Algorithm, _ int) learner.TowerFactory { return Towers(n.Params, a) }
func (n Native) Artifact(m []byte, _ int64) ([]byte, error)          { return m, nil }
func (n Native) Trained([]byte) []byte                               { return nil }
func (n Native) Binding() Binding                                    { return Binding{Input: models.InputObs} }
func (n Native) States() []State                                     { return nil }
func (n Native) Source() []byte                                      { return nil }
func (n Native) Schedule(s learner.Schedule, _ int) learner.Schedule { return s }
func (n Native) BeginIteration(int, learner.Optimizer)               {}
func (n Native) Targets(int, []float32)                              {}

// PublishLayout places the parameters' tensors in the exported graph, for Batcher.Publish.
func (n Native) PublishLayout() []bind.Param {
	p := n.Params
	ps := make([]bind.Param, p.Len())
	for i, name := range p.Names() {
		size := 1
		for _, d := range p.Shape(i) {
			size *= d
		}
		ps[i] = bind.Param{Name: name, Offset: p.Offset(i), Len: size}
	}
	return ps
}

// Towers is the learner.TowerFactory of an algorithm's loss over params' architecture
// (towerrl's own MLPs), for callers building their own learner.Towers (benchmarks, custom
// loops).
func Towers(params *models.Params, a algo.Algorithm) learner.TowerFactory {
	return func(_ int, dev device.Device, rows int, flat []float32) (learner.Tower, error) {
		if dev.Kind() != device.KindCPU {
			return nil, fmt.Errorf("engine: towers run on the CPU for now, not %s", dev)
		}
		if &flat[0] != &params.Data()[0] {
			return nil, errors.New("engine: towers must read the model's own parameter vector")
		}
		return newNativeTower(params, rows, a)
	}
}

// partRows is the most rows a tower of a RowMean algorithm (PPO) runs through towerrl's MLP at
// once: a larger slice is computed in parts of at most this many rows, one after the other,
// whose gradients and statistics are weighed by their rows. What a part's layers write and read
// back (activations and their gradients) then stays in the core's cache. A 1-tower PPO update
// of CartPole's 64×64 actor-critic ran 1.5M rows/s on 1,024 or 2,048 rows, 1.1M on 8,192 and
// 1.0–1.1M on 16,384 at once, 1.34–1.40M on 16,384 in parts; 2 towers of 8,192 rows (issue
// 32's run, minibatch 16,384) 1.74–1.87M, in parts 2.6M, and the run end to end 1.5× (parts
// of 2,048 rows: 1.2–1.3×; docs/benchmarks.md). The sums over rows are then taken in another
// order, so a slice of more rows than this trains to other bits than one graph over all of
// them would; slices of up to partRows rows are computed as before.
const partRows = 1024

// nativeTower computes an algorithm's loss's gradient over towerrl's own MLP on a fixed slice
// of rows: a learner.Tower. The slice is one part, or, for a RowMean algorithm on more than
// partRows rows, several parts of nearly equal size run one after the other (a part of each
// size is built once).
type nativeTower struct {
	rows  int
	names []string
	parts []towerPart
	grad  []float32 // one part's gradient, with several parts
	stats []float64 // one part's statistics, with several parts
}

// towerPart is rows rows of a tower's slice from row off: its policy graph and loss are shared
// by the parts of its size.
type towerPart struct {
	pol        *models.Policy
	loss       algo.Loss
	off, rows  int
	rowOf      func(k int) int // loss row k → slice row off+k
	graphOwner bool            // the first part of its size, which closes the graph
}

func newNativeTower(params *models.Params, rows int, a algo.Algorithm) (t *nativeTower, err error) {
	t = &nativeTower{rows: rows, names: a.StatNames()}
	sizes := []int{rows}
	if _, ok := a.(algo.RowMean); ok && rows > partRows && params.Config().Arch == models.MLP {
		sizes = splitRows(rows, partRows)
		t.grad = make([]float32, params.Size())
		t.stats = make([]float64, len(t.names))
	}
	built := map[int]towerPart{}
	off := 0
	for _, n := range sizes {
		p, ok := built[n]
		if !ok {
			if p.pol, p.loss, err = buildTowerGraph(params, n, a); err != nil {
				return nil, errors.Join(err, t.Close())
			}
			p.graphOwner = true
			built[n] = towerPart{pol: p.pol, loss: p.loss}
		}
		p.off, p.rows = off, n
		if len(sizes) > 1 {
			from := off
			p.rowOf = func(k int) int { return from + k }
		}
		t.parts = append(t.parts, p)
		off += n
	}
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

// buildTowerGraph builds params' policy graph for rows rows with a's loss, differentiated and
// compiled.
func buildTowerGraph(params *models.Params, rows int, a algo.Algorithm) (pol *models.Policy, loss algo.Loss, err error) {
	if pol, err = models.Build(G.NewGraph(), params, rows); err != nil {
		return nil, nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Join(fmt.Errorf("engine: building the %s loss: %v", a.Name(), r), pol.Close())
		}
	}()
	h := algo.Heads{Spec: pol.Spec(), Rows: rows, Params: pol.Logits, Value: pol.Value}
	if pol.Logits == nil {
		h.Params, h.LogStd = pol.Mean, pol.LogStd
	}
	if loss, err = a.Loss(h); err != nil {
		return nil, nil, errors.Join(err, pol.Close())
	}
	if err := pol.Backward(loss.Node()); err != nil {
		return nil, nil, errors.Join(err, pol.Close())
	}
	if err := pol.Compile(); err != nil {
		return nil, nil, errors.Join(err, pol.Close())
	}
	return pol, loss, nil
}

func (t *nativeTower) StatNames() []string { return t.names }

func (t *nativeTower) Close() error {
	var errs []error
	for _, p := range t.parts {
		if p.graphOwner {
			errs = append(errs, p.pol.Close())
		}
	}
	return errors.Join(errs...)
}

// Grad computes the loss's gradient over mb's rows (exactly the tower's size).
func (t *nativeTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	n := mb.Len()
	if n != t.rows {
		return fmt.Errorf("engine: a tower of %d rows got %d", t.rows, n)
	}
	spec := t.parts[0].pol.Spec()
	if spec.Head != head.CategoricalKind && mb.ActDim != spec.ActionDim() {
		return fmt.Errorf("engine: the batch has %d action values per row, the %s head %d", mb.ActDim, spec.Head, spec.ActionDim())
	}
	if len(t.parts) == 1 {
		return t.parts[0].grad(mb, grads, stats)
	}
	clear(grads)
	clear(stats)
	for _, p := range t.parts {
		if err := p.grad(mb, t.grad, t.stats); err != nil {
			return err
		}
		w := float64(p.rows) / float64(t.rows)
		w32 := float32(w)
		for i, g := range t.grad {
			grads[i] += w32 * g
		}
		for i, s := range t.stats {
			stats[i] += w * s
		}
	}
	return nil
}

// grad runs the part's rows of mb through its graph and writes their loss's gradient and
// statistics.
func (p *towerPart) grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	copy(p.pol.ObsData(), mb.Obs[p.off*mb.ObsDim:(p.off+p.rows)*mb.ObsDim])
	if err := p.loss.Fill(mb, p.rowOf); err != nil {
		return err
	}
	if err := p.pol.Run(); err != nil {
		return err
	}
	if err := p.pol.Grads(grads); err != nil {
		return err
	}
	p.loss.Stats(stats)
	return nil
}

// SequenceRows is factory for a batch of whole sequences of seqLen steps (V-trace's): the
// learner splits it by sequences and asks for towers of that many, and a feed-forward tower,
// which reads rows in no particular order, takes their seqLen rows each.
func SequenceRows(factory learner.TowerFactory, seqLen int) learner.TowerFactory {
	return func(i int, dev device.Device, seqs int, flat []float32) (learner.Tower, error) {
		return factory(i, dev, seqs*seqLen, flat)
	}
}

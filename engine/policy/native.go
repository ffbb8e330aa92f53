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
		build := func(n int) (learner.Tower, error) { return newNativeTower(params, n, a) }
		if params.Config().Arch != models.MLP {
			return build(rows)
		}
		return inParts(rows, a, build)
	}
}

// nativeTower computes an algorithm's loss's gradient over towerrl's own MLP on a fixed slice
// of rows: a learner.Tower.
type nativeTower struct {
	pol   *models.Policy
	rows  int
	names []string
	loss  algo.Loss
	cols  learner.Columns // what Grad reads of a slice
}

func newNativeTower(params *models.Params, rows int, a algo.Algorithm) (t *nativeTower, err error) {
	pol, err := models.Build(G.NewGraph(), params, rows)
	if err != nil {
		return nil, err
	}
	t = &nativeTower{pol: pol, rows: rows, names: a.StatNames(), cols: towerColumns(a)}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Join(fmt.Errorf("engine: building the %s loss: %v", a.Name(), r), pol.Close())
		}
	}()
	h := algo.Heads{Spec: pol.Spec(), Rows: rows, Params: pol.Logits, Value: pol.Value}
	if pol.Logits == nil {
		h.Params, h.LogStd = pol.Mean, pol.LogStd
	}
	if t.loss, err = a.Loss(h); err != nil {
		return nil, errors.Join(err, pol.Close())
	}
	if err := pol.Backward(t.loss.Node()); err != nil {
		return nil, errors.Join(err, pol.Close())
	}
	if err := pol.Compile(); err != nil {
		return nil, errors.Join(err, pol.Close())
	}
	return t, nil
}

func (t *nativeTower) StatNames() []string      { return t.names }
func (t *nativeTower) Columns() learner.Columns { return t.cols }
func (t *nativeTower) Close() error             { return t.pol.Close() }

// Grad computes the loss's gradient over mb's rows (exactly the tower's size).
func (t *nativeTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	n := mb.Len()
	if n != t.rows {
		return fmt.Errorf("engine: a tower of %d rows got %d", t.rows, n)
	}
	if t.pol.Spec().Head != head.CategoricalKind && mb.ActDim != t.pol.Spec().ActionDim() {
		return fmt.Errorf("engine: the batch has %d action values per row, the %s head %d", mb.ActDim, t.pol.Spec().Head, t.pol.Spec().ActionDim())
	}
	copy(t.pol.ObsData(), mb.Obs[:n*mb.ObsDim])
	if err := t.loss.Fill(mb, nil); err != nil {
		return err
	}
	if err := t.pol.Run(); err != nil {
		return err
	}
	if err := t.pol.Grads(grads); err != nil {
		return err
	}
	t.loss.Stats(stats)
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

package engine

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

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

// nativeTower computes an algorithm's loss's gradient over towerrl's own MLP on a fixed slice
// of rows: a learner.Tower.
type nativeTower struct {
	pol   *models.Policy
	rows  int
	names []string
	loss  algo.Loss
}

func newNativeTower(params *models.Params, rows int, a algo.Algorithm) (t *nativeTower, err error) {
	pol, err := models.Build(G.NewGraph(), params, rows)
	if err != nil {
		return nil, err
	}
	t = &nativeTower{pol: pol, rows: rows, names: a.StatNames()}
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

func (t *nativeTower) StatNames() []string { return t.names }
func (t *nativeTower) Close() error        { return t.pol.Close() }

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

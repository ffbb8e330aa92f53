package policy

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/graph"
)

// Towers makes the algorithm's towers over the imported graph: feed-forward, or recurrent
// (unrolled over sequences of seqLen steps; the learner's rows count sequences then).
func (f *Foreign) Towers(a algo.Algorithm, seqLen int) learner.TowerFactory {
	return func(_ int, dev device.Device, rows int, flat []float32) (learner.Tower, error) {
		if dev.Kind() != device.KindCPU {
			return nil, fmt.Errorf("engine: towers run on the CPU for now, not %s", dev)
		}
		if &flat[0] != &f.flat[0] {
			return nil, errors.New("engine: towers must read the model's own parameter vector")
		}
		if f.recurrent() {
			return newRecurrentTower(f, rows, seqLen, a)
		}
		return inParts(rows, a, func(n int) (learner.Tower, error) { return newForeignTower(f, n, a) })
	}
}

// foreignTower computes an algorithm's loss's gradient on an imported graph.
type foreignTower struct {
	f       *Foreign
	gr      *graph.Graph
	rows    int
	vm      *tape.Machine
	obsNode *G.Node
	obs     *tensor.Dense
	loss    *headLoss
	cols    learner.Columns // what Grad reads of a slice
}

func newForeignTower(f *Foreign, rows int, a algo.Algorithm) (t *foreignTower, err error) {
	g := G.NewGraph()
	gr, err := f.model.BuildWith(g, f.params, graph.BuildOptions{Batch: rows, Outputs: f.outputs(), StopGradient: f.stop})
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("engine: building the %s loss on the imported graph: %v", a.Name(), r)
		}
	}()
	t = &foreignTower{f: f, rows: rows, gr: gr, cols: towerColumns(a)}
	if t.obsNode, err = gr.Input(f.input); err != nil {
		return nil, err
	}
	// The other inputs (RLlib's dummy state, seq_lens) hold constants, bound once.
	for name, v := range f.consts {
		n, err := gr.Input(name)
		if err != nil {
			return nil, err
		}
		if err := G.Let(n, filled(n.Shape(), v)); err != nil {
			return nil, err
		}
	}
	t.obs = tensor.New(tensor.WithShape(t.obsNode.Shape().Clone()...), tensor.WithBacking(make([]float32, t.obsNode.Shape().TotalSize())))
	params, err := gr.Output(f.outs.params)
	if err != nil {
		return nil, err
	}
	value, err := gr.Output(f.outs.value)
	if err != nil {
		return nil, err
	}
	var ls *G.Node
	if f.outs.logStd != "" && !f.outs.split {
		if ls, err = gr.Output(f.outs.logStd); err != nil {
			return nil, err
		}
	}
	if t.loss, err = f.newHeadLoss(a, rows, params, ls, value, gr.Learnables()); err != nil {
		return nil, err
	}
	t.vm = tape.New(g, G.BindDualValues(t.loss.learn...))
	return t, nil
}

// filled is a float32 tensor of shape holding v everywhere.
func filled(shape tensor.Shape, v float32) *tensor.Dense {
	data := make([]float32, shape.TotalSize())
	for i := range data {
		data[i] = v
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(data))
}

// headLoss is an algorithm's loss over the head outputs of an imported graph, differentiated
// with respect to learn.
type headLoss struct {
	f     *Foreign
	names []string
	loss  algo.Loss
	learn G.Nodes
	value *G.Node // the values the loss reads, for tests
}

// newHeadLoss adds a's loss to the graph over its head outputs for rows rows — params (the
// logits or the mean; RLlib's mean and log_std side by side when split), ls (a log_std
// output, nil when split or categorical) and value — and differentiates it with respect to
// learn. Panics of gorgonia are the caller's to recover.
func (f *Foreign) newHeadLoss(a algo.Algorithm, rows int, params, ls, value *G.Node, learn G.Nodes) (*headLoss, error) {
	d := f.spec.ActionDim()
	h := algo.Heads{Spec: f.spec, Rows: rows, Params: params, Value: value}
	if f.spec.Head != head.CategoricalKind {
		if f.outs.split {
			// RLlib's Box head: each row holds the mean, then the log_std.
			if params.Dims() != 2 || params.Shape()[1] != 2*d {
				return nil, fmt.Errorf("engine: output %q has shape %v, want [%d, %d] (mean and log_std side by side)", f.outs.params, params.Shape(), rows, 2*d)
			}
			h.Params = G.Must(G.Slice(params, nil, G.S(0, d)))
			ls = G.Must(G.Slice(params, nil, G.S(d, 2*d)))
		}
		var err error
		if h.LogStd, err = broadcastLogStd(ls, h.Params, rows, d); err != nil {
			return nil, err
		}
	}
	l, err := a.Loss(h)
	if err != nil {
		return nil, err
	}
	if _, err := G.Grad(l.Node(), learn...); err != nil {
		return nil, fmt.Errorf("engine: differentiating the %s loss on the imported graph: %w", a.Name(), err)
	}
	return &headLoss{f: f, names: a.StatNames(), loss: l, learn: learn, value: value}, nil
}

// run runs vm and writes the gradients of gr's parameters into grads (the flat layout), the
// actor's zeroed during a new critic's warm-up, and the loss's statistics into stats.
func (h *headLoss) run(vm *tape.Machine, gr *graph.Graph, grads []float32, stats []float64) error {
	for _, p := range h.learn {
		if g, err := p.Grad(); err == nil {
			if d, ok := g.(tensor.Tensor); ok {
				d.Zero()
			}
		}
	}
	defer vm.Reset()
	if err := vm.Run(); err != nil {
		return fmt.Errorf("engine: running the imported graph: %w", err)
	}
	if err := gr.Gradients(grads); err != nil {
		return fmt.Errorf("engine: gradients of the imported graph: %w", err)
	}
	if h.f.actorFrozen.Load() {
		for _, r := range h.f.actorRanges {
			clear(grads[r[0]:r[1]])
		}
	}
	h.loss.Stats(stats)
	return nil
}

func (t *foreignTower) StatNames() []string      { return t.loss.names }
func (t *foreignTower) Columns() learner.Columns { return t.cols }
func (t *foreignTower) Close() error             { return t.vm.Close() }

// Grad computes the loss's gradient over mb's rows into grads (the flat parameter layout).
func (t *foreignTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) (err error) {
	n := mb.Len()
	if n != t.rows {
		return fmt.Errorf("engine: a tower of %d rows got %d", t.rows, n)
	}
	copy(t.obs.Data().([]float32), mb.Obs[:n*mb.ObsDim])
	if err := t.loss.loss.Fill(mb, nil); err != nil {
		return err
	}
	if err := G.Let(t.obsNode, t.obs); err != nil {
		return err
	}
	return t.loss.run(t.vm, t.gr, grads, stats)
}

// broadcastLogStd gives a Gaussian's log_std the mean's shape [rows, D]: it may be per row
// already, or one shared row ([D] or [1, D], head.LogStdLayout's shared forms).
func broadcastLogStd(ls, mean *G.Node, rows, d int) (*G.Node, error) {
	switch s := ls.Shape(); {
	case s.Eq(mean.Shape()):
		return ls, nil
	case s.TotalSize() == d:
		row, err := G.Reshape(ls, tensor.Shape{1, d})
		if err != nil {
			return nil, err
		}
		// 0·mean + log_std, broadcast over the rows: the mean's gradient gets 0 from it.
		zero := G.NewConstant(float32(0), G.WithName("towerrl.zero"))
		z, err := G.HadamardProd(mean, zero)
		if err != nil {
			return nil, err
		}
		return G.BroadcastAdd(z, row, nil, []byte{0})
	default:
		return nil, fmt.Errorf("engine: log_std of shape %v for a mean of shape %v: want [%d], [1, %d] or [%d, %d]", s, mean.Shape(), d, d, rows, d)
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/graph"
)

// foreign is a pretrained ONNX policy imported for fine-tuning: its own graph and names, with
// its initializers as the trainable parameters, gathered in one flat vector.
type foreign struct {
	model  *graph.Model
	params *graph.Params
	flat   []float32
	spec   head.Spec
	names  head.Names // the outputs as the config named them (for the batchers' binding)
	source []byte     // the model as loaded, kept in checkpoints so a resume needs no file
	input  string     // observation input
	outs   struct{ params, logStd, value string }
}

// loadForeign imports model for fine-tuning on an env whose head spec is spec. The outputs
// carrying the head's parameters and the value are found as the batchers find them (head.Bind).
func loadForeign(ctx context.Context, data []byte, spec head.Spec, names head.Names, session onnx.Config) (*foreign, error) {
	m, err := graph.Parse(data)
	if err != nil {
		return nil, err
	}
	sc := session
	sc.MaxBatch = 1
	s, err := onnx.New(ctx, data, sc)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	infos := s.Outputs()
	o, err := head.Bind(spec, infos, names)
	if err != nil {
		return nil, err
	}
	if o.Value < 0 {
		return nil, fmt.Errorf("engine: fine-tuning needs a value output; the model's outputs are %v", infos)
	}
	if len(m.Inputs()) != 1 {
		return nil, fmt.Errorf("engine: fine-tuning needs a model with one input (the observations), this one has %d", len(m.Inputs()))
	}
	f := &foreign{model: m, params: m.NewParams(), spec: spec, names: names, input: m.Inputs()[0].Name}
	f.outs.params, f.outs.value = infos[o.Params].Name, infos[o.Value].Name
	if o.LogStd >= 0 {
		f.outs.logStd = infos[o.LogStd].Name
	}
	if f.flat, err = f.params.Flat(); err != nil {
		return nil, err
	}
	return f, nil
}

// export writes the foreign graph back with the current weights and towerrl.version = version.
func (f *foreign) export(version int64) ([]byte, error) {
	return f.model.WriteBack(f.params, graph.WriteOptions{Version: strconv.FormatInt(version, 10)})
}

// towers makes the PPO towers over the imported graph.
func (f *foreign) towers(c Loss) learner.TowerFactory {
	return func(_ int, dev device.Device, rows int, flat []float32) (learner.Tower, error) {
		if dev.Kind() != device.KindCPU {
			return nil, fmt.Errorf("engine: PPO towers run on the CPU for now, not %s", dev)
		}
		if &flat[0] != &f.flat[0] {
			return nil, errors.New("engine: towers must read the model's own parameter vector")
		}
		return newForeignTower(f, rows, c)
	}
}

// foreignTower computes the PPO loss's gradient on an imported graph.
type foreignTower struct {
	f                         *foreign
	rows                      int
	vm                        *tape.Machine
	obsNode                   *G.Node
	obs                       *tensor.Dense
	acts                      []int32   // categorical actions, read by the loss op
	act                       []float32 // Gaussian actions, read by the loss op
	adv, ret, oldLogp, oldVal []float32
	learn                     G.Nodes
	nodes                     lossNodes
}

func newForeignTower(f *foreign, rows int, c Loss) (t *foreignTower, err error) {
	g := G.NewGraph()
	gr, err := f.model.Build(g, f.params, rows)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("engine: building the PPO loss on the imported graph: %v", r)
		}
	}()
	t = &foreignTower{f: f, rows: rows, learn: gr.Learnables()}
	if t.obsNode, err = gr.Input(f.input); err != nil {
		return nil, err
	}
	t.obs = tensor.New(tensor.WithShape(t.obsNode.Shape().Clone()...), tensor.WithBacking(make([]float32, t.obsNode.Shape().TotalSize())))
	in := func(name string, shape ...int) (*G.Node, []float32) {
		data := make([]float32, tensor.Shape(shape).TotalSize())
		v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
		return G.NewTensor(g, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName("towerrl."+name), G.WithValue(v)), data
	}
	must := G.Must
	d := f.spec.ActionDim()
	params, err := gr.Output(f.outs.params)
	if err != nil {
		return nil, err
	}
	value, err := gr.Output(f.outs.value)
	if err != nil {
		return nil, err
	}
	var terms headTerms
	ins := []*G.Node{params}
	if f.spec.Head == head.CategoricalKind {
		t.acts = make([]int32, rows)
		terms = &categoricalTerms{n: f.spec.N, acts: t.acts}
	} else {
		ls, err := gr.Output(f.outs.logStd)
		if err != nil {
			return nil, err
		}
		if !ls.Shape().Eq(params.Shape()) {
			return nil, fmt.Errorf("engine: log_std output %v and mean output %v differ in shape", ls.Shape(), params.Shape())
		}
		t.act = make([]float32, rows*d)
		terms = &gaussianTerms{d: d, acts: t.act}
		ins = append(ins, ls)
	}
	var adv, ret, oldLogp, oldVal *G.Node
	adv, t.adv = in("advantages", rows)
	ret, t.ret = in("returns", rows)
	oldLogp, t.oldLogp = in("old_logp", rows)
	oldVal, t.oldVal = in("old_values", rows)
	// The same one-op loss as the native towers: log-probability, entropy, loss and their
	// gradients from the imported graph's head outputs.
	op := newPPOHeadLossOp(c, rows, value.Dims(), terms)
	t.nodes = lossNodes{loss: must(G.ApplyOp(op, append(ins, value, adv, ret, oldLogp, oldVal)...)), op: &op.ppoLossOp}
	if _, err := G.Grad(t.nodes.loss, t.learn...); err != nil {
		return nil, fmt.Errorf("engine: differentiating the PPO loss on the imported graph: %w", err)
	}
	t.vm = tape.New(g, G.BindDualValues(t.learn...))
	return t, nil
}

func (t *foreignTower) StatNames() []string { return ppoStats }
func (t *foreignTower) Close() error        { return t.vm.Close() }

// Grad computes the PPO loss's gradient over mb's rows into grads (the flat parameter layout).
func (t *foreignTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) (err error) {
	n := mb.Len()
	if n != t.rows {
		return fmt.Errorf("engine: a PPO tower of %d rows got %d", t.rows, n)
	}
	copy(t.obs.Data().([]float32), mb.Obs[:n*mb.ObsDim])
	// The loss op reads the actions, and refuses a categorical one outside the head or a NaN.
	if t.f.spec.Head == head.CategoricalKind {
		for i := range n {
			t.acts[i] = int32(mb.Actions[i])
		}
	} else {
		if mb.ActDim != t.f.spec.ActionDim() {
			return fmt.Errorf("engine: the batch has %d action values per row, the %s head %d", mb.ActDim, t.f.spec.Head, t.f.spec.ActionDim())
		}
		copy(t.act, mb.Actions[:n*mb.ActDim])
	}
	copy(t.adv, mb.Advantages[:n])
	copy(t.ret, mb.Returns[:n])
	copy(t.oldLogp, mb.LogP[:n])
	copy(t.oldVal, mb.Values[:n])
	if err := G.Let(t.obsNode, t.obs); err != nil {
		return err
	}
	for _, p := range t.learn {
		if g, err := p.Grad(); err == nil {
			if d, ok := g.(tensor.Tensor); ok {
				d.Zero()
			}
		}
	}
	defer t.vm.Reset()
	if err := t.vm.Run(); err != nil {
		return fmt.Errorf("engine: running the imported graph: %w", err)
	}
	off := 0
	for _, p := range t.learn {
		g, err := p.Grad()
		if err != nil {
			return fmt.Errorf("engine: gradient of %s: %w", p.Name(), err)
		}
		d := g.(tensor.Tensor).Data().([]float32)
		copy(grads[off:off+len(d)], d)
		off += len(d)
	}
	if off != len(grads) {
		return fmt.Errorf("engine: gradients of %d values for %d parameters", off, len(grads))
	}
	t.nodes.stats(stats)
	return nil
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/graph"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// foreign is a pretrained ONNX policy imported for fine-tuning: its own graph and names, with
// its initializers as the trainable parameters, gathered in one flat vector. The head is bound
// as the batchers bind it (models/layout: the exporter's layout, towerrl metadata, or the
// names the user gave), so the tensors the loss reads may be inner tensors of the graph.
type foreign struct {
	model  *graph.Model // the graph trained: the policy, its batch made dynamic when it was fixed
	orig   *graph.Model // the graph written back: the policy as given
	params *graph.Params
	flat   []float32
	spec   head.Spec      // the head the loss computes: a tanh-gaussian is a Gaussian over the pre-tanh action
	names  head.Names     // the outputs as the config named them (for the batchers' binding)
	bind   layout.Binding // what was recognised
	source []byte         // the model as loaded, kept in checkpoints so a resume needs no file
	input  string         // observation input
	outs   struct {
		params, logStd, value string
		split                 bool // params holds the mean then the log_std (RLlib)
	}
	// consts are the other inputs and the values they are fed (zeros, or ones for seq_lens).
	consts map[string]float32
	// critic: the graph trained is the policy with a new critic (models.AddCritic); rewritten:
	// its batch was made dynamic. Either way the batchers run the graph trained, and
	// policy.onnx is orig written back with the trained weights, through origParams.
	critic, rewritten bool
	origParams        *graph.Params
	// actorFrozen zeroes the gradients of every parameter but the new critic's (the value
	// warm-up); set by the trainer between iterations, read by the towers.
	actorFrozen atomic.Bool
	warmedUp    atomic.Bool // the warm-up is over (set by the trainer, read by the schedule)
	actorRanges [][2]int
	criticBias  int // index in flat of the critic's output bias
}

// ErrFineTune is wrapped by errors about a foreign policy that cannot be fine-tuned.
var ErrFineTune = errors.New("engine: cannot fine-tune this policy")

// loadForeign imports model for fine-tuning on an env whose head spec is spec, bound with the
// user's overrides o (names, head).
//
// A policy without a value output gets a new critic, initialised from rng.
func loadForeign(ctx context.Context, data []byte, spec head.Spec, o layout.Overrides, session onnx.Config, rng *rand.Rand) (*foreign, error) {
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		return nil, fmt.Errorf("%w: not a readable ONNX model: %v", graph.ErrModel, err)
	}
	if session.Logger == nil {
		session.Logger = zap.NewNop()
	}
	// Recognised as the batchers recognise it (from the graph's declarations, no probing
	// session), so the learner and the batchers bind the same tensors.
	b, err := layout.Recognise(&mp, nil, spec, o)
	if err != nil {
		return nil, err
	}
	notes := strings.Join(b.Notes, "; ")
	switch {
	case b.DeterministicOnly:
		return nil, fmt.Errorf("%w: no action distribution could be found in the graph (%s); it runs in eval and batcher with --deterministic. Name the logits or the mean and log_std with --logits-output and --logstd-output if the graph computes them",
			ErrFineTune, notes)
	case len(b.State) > 0:
		return nil, fmt.Errorf("%w: it is recurrent (%d state inputs); fine-tuning recurrent policies is not implemented yet (they run in eval and batcher)", ErrFineTune, len(b.State))
	}
	orig, err := graph.New(&mp)
	if err != nil {
		return nil, err
	}
	m, train := orig, data
	critic := b.Value == ""
	if critic {
		// No value in the graph (RLlib's export, actor-only policies): PPO gets a new critic,
		// an MLP on the observations added to a copy of the graph, trained from scratch (with a
		// value warm-up before the actor moves). policy.onnx stays the original graph.
		aug := proto.Clone(&mp).(*onnxpb.ModelProto)
		if err := models.AddCritic(aug, b.Observation, obsSize(spec), []int{64, 64}, rng); err != nil {
			return nil, fmt.Errorf("%w: adding a critic: %v", ErrFineTune, err)
		}
		if train, err = proto.Marshal(aug); err != nil {
			return nil, err
		}
		if m, err = graph.New(aug); err != nil {
			return nil, err
		}
		b.Value = models.CriticOutput
		b.Notes = append(b.Notes, "value: "+models.CriticOutput+", a new critic")
		session.Logger.Info("fine-tuning: the policy has no value output; training a new critic (64×64 tanh MLP on the observations)")
	}
	// A batch fixed at export is made dynamic for training; a dynamic model comes back as it is.
	dyn, rep, err := edit.DynamicBatch(ctx, train, edit.Options{Config: session})
	if err != nil {
		return nil, fmt.Errorf("%w: its batch is fixed and could not be made dynamic: %v", ErrFineTune, err)
	}
	if !rep.Dynamic {
		session.Logger.Info("fine-tuning: the policy's fixed batch was made dynamic", zap.String("report", rep.String()))
		if m, err = graph.Parse(dyn); err != nil {
			return nil, err
		}
	}
	f := &foreign{model: m, orig: orig, origParams: orig.NewParams(), spec: spec, names: o.Names, bind: b, input: b.Observation,
		consts: map[string]float32{}, critic: critic, rewritten: !rep.Dynamic}
	if f.spec.Head == head.TanhGaussianKind {
		f.spec.Head = head.GaussianKind // PPO over the pre-tanh action u (the batcher stores u and log N(u))
	}
	f.outs.params, f.outs.logStd, f.outs.value, f.outs.split = b.Params, b.LogStd, b.Value, b.Split
	if f.spec.Head == head.GaussianKind && f.outs.logStd == "" {
		return nil, fmt.Errorf("%w: the Gaussian head has no log_std in the graph (%s); name it with --logstd-output", ErrFineTune, notes)
	}
	for _, in := range m.Inputs() {
		switch in.Name {
		case f.input:
		case b.SeqLens:
			f.consts[in.Name] = 1
		default:
			f.consts[in.Name] = 0
		}
	}
	if f.input == "" {
		if ins := m.Inputs(); len(ins) == 1 {
			f.input = ins[0].Name
		} else {
			return nil, fmt.Errorf("%w: which of its %d inputs takes the observations was not recognised", ErrFineTune, len(ins))
		}
	}
	if f.params, err = m.NewParamsFor(graph.TrainOptions{Outputs: f.outputs()}); err != nil {
		return nil, err
	}
	if f.flat, err = f.params.Flat(); err != nil {
		return nil, err
	}
	if critic {
		// The flat ranges of every trainable parameter but the critic's.
		off := 0
		for _, name := range f.params.TrainableNames() {
			v, _ := f.params.Value(name)
			n := v.Shape().TotalSize()
			switch {
			case !strings.HasPrefix(name, models.CriticPrefix+"."):
				f.actorRanges = append(f.actorRanges, [2]int{off, off + n})
			case name == models.CriticBias:
				f.criticBias = off
			}
			off += n
		}
	}
	session.Logger.Info("fine-tuning a foreign policy", zap.String("binding", notes),
		zap.Int("trainable", len(f.flat)), zap.Strings("frozen", f.params.Frozen()))
	return f, nil
}

// outputs are the tensors the loss reads.
func (f *foreign) outputs() []string {
	outs := []string{f.outs.params, f.outs.value}
	if f.outs.logStd != "" && !f.outs.split {
		outs = append(outs, f.outs.logStd)
	}
	return outs
}

// export writes the graph trained back with the current weights and towerrl.version =
// version: what the batchers run.
func (f *foreign) export(version int64) ([]byte, error) {
	return f.model.WriteBack(f.params, graph.WriteOptions{Version: strconv.FormatInt(version, 10)})
}

// artifact is policy.onnx for the batchers' model (the export of version): the policy as it
// was given — its inputs, outputs, opset, names and batch — with the trained weights. A new
// critic is not part of it (it is in the checkpoint and in policy_with_critic.onnx).
func (f *foreign) artifact(model []byte, version int64) ([]byte, error) {
	if !f.critic && !f.rewritten {
		return model, nil
	}
	// The original graph's parameters are a subset of the graph trained (the same names and
	// shapes; the critic and the batch rewrite only add): write their trained values back
	// into the original with its own write-back.
	for _, name := range f.origParams.Names() {
		dst, _ := f.origParams.Value(name)
		src, ok := f.params.Value(name)
		if !ok || !src.Shape().Eq(dst.Shape()) {
			return nil, fmt.Errorf("engine: the trained graph has no parameter %q shaped %v as the policy's", name, dst.Shape())
		}
		copy(dst.Data().([]float32), src.Data().([]float32))
	}
	return f.orig.WriteBack(f.origParams, graph.WriteOptions{Version: strconv.FormatInt(version, 10)})
}

// obsSize is the number of values in one observation of spec.
func obsSize(spec head.Spec) int {
	n := 1
	for _, d := range spec.ObsShape {
		n *= d
	}
	return n
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
	gr                        *graph.Graph
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
	gr, err := f.model.Build(g, f.params, rows, f.outputs()...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("engine: building the PPO loss on the imported graph: %v", r)
		}
	}()
	t = &foreignTower{f: f, rows: rows, gr: gr, learn: gr.Learnables()}
	if t.obsNode, err = gr.Input(f.input); err != nil {
		return nil, err
	}
	// The other inputs (RLlib's dummy state, seq_lens) hold constants, bound once.
	for name, v := range f.consts {
		n, err := gr.Input(name)
		if err != nil {
			return nil, err
		}
		data := make([]float32, n.Shape().TotalSize())
		for i := range data {
			data[i] = v
		}
		if err := G.Let(n, tensor.New(tensor.WithShape(n.Shape().Clone()...), tensor.WithBacking(data))); err != nil {
			return nil, err
		}
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
		var ls *G.Node
		if f.outs.split {
			// RLlib's Box head: each row holds the mean, then the log_std.
			if params.Dims() != 2 || params.Shape()[1] != 2*d {
				return nil, fmt.Errorf("engine: output %q has shape %v, want [%d, %d] (mean and log_std side by side)", f.outs.params, params.Shape(), rows, 2*d)
			}
			both := params
			params = must(G.Slice(both, nil, G.S(0, d)))
			ls = must(G.Slice(both, nil, G.S(d, 2*d)))
			ins[0] = params
		} else if ls, err = gr.Output(f.outs.logStd); err != nil {
			return nil, err
		}
		if ls, err = broadcastLogStd(ls, params, rows, d); err != nil {
			return nil, err
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
	if err := t.gr.Gradients(grads); err != nil {
		return fmt.Errorf("engine: gradients of the imported graph: %w", err)
	}
	if t.f.actorFrozen.Load() {
		for _, r := range t.f.actorRanges {
			clear(grads[r[0]:r[1]])
		}
	}
	t.nodes.stats(stats)
	return nil
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

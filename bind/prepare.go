package bind

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// prepared is a model made ready for sessions: its batch freed, its head recognised, the
// tensors the head reads exposed, its recurrent states batch-first.
type prepared struct {
	model   *onnx.Model    // what sessions are made from: the given model when nothing was edited
	fixed   int            // the batch a model that could not be freed is fixed at; 0 otherwise
	binding layout.Binding // as Recognise gave it: names in the given graph
	exposed layout.Binding // names of the outputs the session returns
	states  []layout.State // exposed.State with the session's (batch-first) names
	reweigh *reweigh       // carries the edits over to re-exports; nil when nothing was edited
}

// prepare frees a fixed batch (edit.DynamicBatch), recognises the head (layout.Recognise),
// exposes the tensors it reads (layout.Expose) and makes recurrent states batch-first, logging
// each step at info level. Recognise's error is returned as it is.
func prepare(ctx context.Context, model *onnx.Model, env head.Spec, over layout.Overrides,
	sc onnx.Config, log *zap.Logger) (prepared, error) {
	pr := prepared{model: model}
	orig := model.Proto()
	m := orig
	if fixedBatch(orig) {
		freed, fixed, err := freeBatch(ctx, model, sc, log)
		if err != nil {
			return pr, err
		}
		if pr.model, pr.fixed = freed, fixed; fixed == 0 {
			m = freed.Proto()
		}
	}
	b, err := layout.Recognise(m, nil, env, over)
	if err != nil {
		return pr, err
	}
	b = probabilityLogits(m, b)
	pr.binding = b
	log.Info("policy: bound", zap.String("family", string(b.Family)), zap.String("head", string(b.Head)),
		zap.Bool("deterministic_only", b.DeterministicOnly), zap.Int("recurrent_states", len(b.State)))
	for _, note := range b.Notes {
		log.Info("policy: " + note)
	}
	exposed, eb, err := layout.Expose(m, b)
	if err != nil {
		return pr, err
	}
	pr.exposed = eb
	axes, err := stateAxes(exposed, eb.State)
	if err != nil {
		return pr, err
	}
	pr.states = slices.Clone(eb.State)
	transposed := len(axes) > 0
	added := len(exposed.GetGraph().GetOutput()) - len(m.GetGraph().GetOutput())
	if added == 0 && !transposed && pr.model == model {
		return pr, nil
	}
	if added > 0 {
		log.Info("policy: exposed inner tensors as outputs", zap.Int("outputs", added))
	}
	if transposed {
		log.Info("policy: recurrent states with the batch on axis 1 are fed and read batch-first (a Transpose at the graph's edge)")
	}
	if pr.model, err = onnx.FromProto(exposed); err != nil {
		return pr, fmt.Errorf("bind: writing the prepared policy: %w", err)
	}
	if transposed {
		var renamed map[string]string
		if pr.model, renamed, err = edit.BatchFirst(pr.model, axes); err != nil {
			return pr, fmt.Errorf("bind: making the recurrent states batch-first: %w", err)
		}
		for i, st := range pr.states {
			if in, ok := renamed[st.Input]; ok {
				pr.states[i].Input, pr.states[i].Output = in, renamed[st.Output]
			}
		}
	}
	pr.reweigh = newReweigh(orig, pr.model.Proto())
	return pr, nil
}

// fixedBatch reports whether every graph input (initializers aside) has only fixed dimensions:
// a model traced without dynamic axes, whose batch edit.DynamicBatch may free.
func fixedBatch(m *onnxpb.ModelProto) bool {
	g := m.GetGraph()
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	n := 0
	for _, in := range g.GetInput() {
		if inits[in.GetName()] {
			continue
		}
		n++
		for _, d := range in.GetType().GetTensorType().GetShape().GetDim() {
			if _, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); !ok || d.GetDimValue() < 1 {
				return false
			}
		}
	}
	return n > 0
}

// freeBatch makes a fixed-batch model's batch dynamic with edit.DynamicBatch. It returns the
// rewritten model, or the original and the batch it is fixed at when the batch cannot be freed
// (the agents then run one fixed batch per call). Both outcomes are logged.
func freeBatch(ctx context.Context, model *onnx.Model, sc onnx.Config, log *zap.Logger) (out *onnx.Model, fixed int, err error) {
	opts := edit.Options{Config: onnx.Config{Library: sc.Library, IntraOpThreads: sc.IntraOpThreads, Logger: sc.Logger}}
	dyn, rep, err := edit.DynamicBatchModel(ctx, model, opts)
	switch {
	case err == nil:
		if out, err = onnx.Parse(dyn); err != nil {
			return nil, 0, fmt.Errorf("bind: the policy with its batch freed: %w", err)
		}
		if !rep.Dynamic {
			log.Info("policy: the model fixes its batch; made it dynamic and checked the rewrite against the original row by row",
				zap.Int("fixed_batch", rep.Batch), zap.Int("rows_checked", rep.Rows), zap.Float64("max_diff", rep.MaxDiff))
			for _, line := range rep.Rewrites {
				log.Info("policy: batch rewrite: " + line)
			}
			for _, line := range rep.Assumed {
				log.Info("policy: batch rewrite assumed (verified): " + line)
			}
		}
		return out, 0, nil
	case errors.Is(err, edit.ErrFixedBatch):
		fixed = firstBatch(model.Proto())
		log.Warn("policy: the model's fixed batch cannot be made dynamic; each worker runs it one fixed batch per call, which is slower: re-export it with a dynamic batch axis for full speed",
			zap.Int("fixed_batch", fixed), zap.Error(err))
		return model, fixed, nil
	}
	return nil, 0, fmt.Errorf("bind: freeing the policy's fixed batch: %w", err)
}

// firstBatch is the first graph input's dimension 0: the batch a fixed-batch model runs at.
func firstBatch(m *onnxpb.ModelProto) int {
	for _, in := range m.GetGraph().GetInput() {
		if dims := in.GetType().GetTensorType().GetShape().GetDim(); len(dims) > 0 {
			return int(dims[0].GetDimValue())
		}
		return 1
	}
	return 1
}

// stateAxes checks the recurrent states whose batch is not on axis 0 (torch's [layers, batch,
// hidden]) and returns the axis of each one's graph input and output, for edit.BatchFirst:
// sessions batch on axis 0 only, and a worker keeps each env's state as one contiguous row.
func stateAxes(m *onnxpb.ModelProto, states []layout.State) (map[string]int, error) {
	g := m.GetGraph()
	axes := map[string]int{}
	for _, s := range states {
		if s.BatchAxis == 0 {
			continue
		}
		in := findValueInfo(g.GetInput(), s.Input)
		out := findValueInfo(g.GetOutput(), s.Output)
		if in == nil || out == nil {
			return nil, fmt.Errorf("%w: recurrent state %s → %s is not a graph input and output", ErrPolicy, s.Input, s.Output)
		}
		rank := len(in.GetType().GetTensorType().GetShape().GetDim())
		if s.BatchAxis < 0 || s.BatchAxis >= rank {
			return nil, fmt.Errorf("%w: recurrent state %s has its batch on axis %d of %d", ErrPolicy, s.Input, s.BatchAxis, rank)
		}
		axes[s.Input], axes[s.Output] = s.BatchAxis, s.BatchAxis
	}
	return axes, nil
}

func findValueInfo(list []*onnxpb.ValueInfoProto, name string) *onnxpb.ValueInfoProto {
	for _, v := range list {
		if v.GetName() == name {
			return v
		}
	}
	return nil
}

// reweigh applies the edits NewPolicy made to a model (batch freed, inner tensors exposed,
// states made batch-first) to a re-export of the same graph with other weights, without
// analysing or verifying anything again: it keeps the edited graph and takes each weight from
// the re-export by name. It is immutable once built and shared by the policies WithModel makes.
type reweigh struct {
	skeleton *onnxpb.ModelProto    // the edited model without its initializers
	inits    []*onnxpb.TensorProto // the edited model's initializers, in order
	// weight marks the initializers the edits left as the original had them: those are taken
	// from a re-export. The others (constants the batch rewrite changed or added) are kept.
	weight []bool
	// identity gives, by output name, the Identity nodes of the edited graph: a re-export
	// whose weights were untied (onnx/graph's write-back) holds an initializer named after
	// such a node's output instead of the node.
	identity   map[string]bool
	listsInits bool // IR < 4: every initializer is also listed among the graph inputs
}

// newReweigh records how to carry the edits of edited (made from original) over to re-exports.
func newReweigh(original, edited *onnxpb.ModelProto) *reweigh {
	orig := map[string]*onnxpb.TensorProto{}
	for _, t := range original.GetGraph().GetInitializer() {
		orig[t.GetName()] = t
	}
	r := &reweigh{identity: map[string]bool{}}
	for _, t := range edited.GetGraph().GetInitializer() {
		o, ok := orig[t.GetName()]
		r.inits = append(r.inits, t)
		r.weight = append(r.weight, ok && proto.Equal(o, t))
	}
	for _, in := range edited.GetGraph().GetInput() {
		if _, ok := orig[in.GetName()]; ok {
			r.listsInits = true
		}
	}
	for _, n := range edited.GetGraph().GetNode() {
		if n.GetOpType() == "Identity" && len(n.GetOutput()) == 1 {
			r.identity[n.GetOutput()[0]] = true
		}
	}
	r.skeleton = proto.Clone(edited).(*onnxpb.ModelProto) // edited is shared: the copy drops the weights
	r.skeleton.Graph.Initializer = nil
	return r
}

// apply returns the edited model with the weights of model, a re-export of the original graph.
func (r *reweigh) apply(model []byte) (*onnx.Model, error) {
	re, err := onnx.Parse(model)
	if err != nil {
		return nil, err
	}
	m := re.Proto()
	fresh := map[string]*onnxpb.TensorProto{}
	for _, t := range m.GetGraph().GetInitializer() {
		fresh[t.GetName()] = t
	}
	out := proto.Clone(r.skeleton).(*onnxpb.ModelProto)
	g := out.GetGraph()
	g.Initializer = make([]*onnxpb.TensorProto, 0, len(r.inits))
	known := make(map[string]bool, len(r.inits))
	for i, t := range r.inits {
		known[t.GetName()] = true
		if !r.weight[i] {
			g.Initializer = append(g.Initializer, t)
			continue
		}
		n, ok := fresh[t.GetName()]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: the new model has no initializer %q; WithModel takes a re-export of the same graph with other weights",
				ErrPolicy, t.GetName())
		case n.GetDataType() != t.GetDataType() || !slices.Equal(n.GetDims(), t.GetDims()):
			return nil, fmt.Errorf("%w: the new model's initializer %q has type %d and shape %v, the policy's has %d and %v; WithModel takes a re-export of the same graph with other weights",
				ErrPolicy, t.GetName(), n.GetDataType(), n.GetDims(), t.GetDataType(), t.GetDims())
		}
		g.Initializer = append(g.Initializer, n)
	}
	// Untied weights: the Identity node becomes the initializer it copied.
	drop := map[string]bool{}
	for _, t := range m.GetGraph().GetInitializer() {
		if name := t.GetName(); !known[name] && r.identity[name] {
			drop[name] = true
			g.Initializer = append(g.Initializer, t)
			if r.listsInits {
				g.Input = append(g.Input, initializerInfo(t))
			}
		}
	}
	if len(drop) > 0 {
		g.Node = slices.DeleteFunc(g.Node, func(n *onnxpb.NodeProto) bool {
			return n.GetOpType() == "Identity" && len(n.GetOutput()) == 1 && drop[n.GetOutput()[0]]
		})
	}
	edited, err := onnx.FromProto(out)
	if err != nil {
		return nil, fmt.Errorf("bind: writing the policy with new weights: %w", err)
	}
	return edited, nil
}

// initializerInfo declares initializer t as a graph input, as IR < 4 models list them.
func initializerInfo(t *onnxpb.TensorProto) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range t.GetDims() {
		sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(t.GetName()), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(t.GetDataType()), Shape: sh}}}}
}

// probabilityLogits rebinds a categorical head whose bound tensor is the output of a Softmax
// over the actions (a hand-written export that returns the action probabilities) to that
// Softmax's input, the logits: sampled as logits, probabilities would give every action
// nearly the same chance. A LogSoftmax's output is kept (log-probabilities are logits up to a
// constant, which sampling and log-probabilities ignore) and said in a note.
func probabilityLogits(m *onnxpb.ModelProto, b layout.Binding) layout.Binding {
	if b.Head != head.CategoricalKind || b.Params == "" {
		return b
	}
	var producer *onnxpb.NodeProto
	for _, n := range m.GetGraph().GetNode() {
		if slices.Contains(n.GetOutput(), b.Params) {
			producer = n
		}
	}
	if producer == nil || len(producer.GetInput()) != 1 || (producer.GetDomain() != "" && producer.GetDomain() != "ai.onnx") {
		return b
	}
	axis := int64(-1)
	for _, a := range producer.GetAttribute() {
		if a.GetName() == "axis" {
			axis = a.GetI()
		}
	}
	if axis != -1 && axis != 1 { // the actions' axis of a [batch, actions] output
		return b
	}
	switch producer.GetOpType() {
	case "Softmax":
		b.Notes = append(b.Notes, fmt.Sprintf("%s holds the action probabilities (a Softmax): sampling from its input %s, the logits", b.Params, producer.GetInput()[0]))
		b.Params = producer.GetInput()[0]
	case "LogSoftmax":
		b.Notes = append(b.Notes, fmt.Sprintf("%s holds the action log-probabilities (a LogSoftmax), sampled as the logits they are up to a constant", b.Params))
	}
	return b
}

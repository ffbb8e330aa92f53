package graph

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Graph is one gorgonia expression graph built from a [Model] for a fixed batch size, whose
// parameter nodes are bound to the tensors of a shared [Params].
//
// A Graph belongs to one goroutine (with the tape machine that runs it); build one Graph per
// tower over the same Params.
type Graph struct {
	model    *Model
	params   *Params
	g        *G.ExprGraph
	batch    int
	inputs   G.Nodes  // in model input order
	outNames []string // the tensors computed, in the order asked for
	outputs  G.Nodes  // their nodes
	learn    G.Nodes  // trainable parameter nodes the graph uses, in Params order
	pnodes   map[string]*G.Node
}

// BuildOptions tunes [Model.BuildWith].
type BuildOptions struct {
	// Batch is the batch size: dimension 0 of every input whose dimension 0 is dynamic and
	// that Shapes does not name. Required (positive).
	Batch int
	// Outputs are the tensors to compute: graph outputs or inner tensors (any name of
	// [Model.Tensors]). Only the nodes they depend on are built, so nodes that only feed
	// other tensors (an ArgMax of actions, a log-probability) may use any operator. Default:
	// the graph outputs.
	Outputs []string
	// NoFusion builds every node on its own. By default a dense layer (a Gemm, or a MatMul
	// and an Add of a bias row, then a Tanh or Relu) whose intermediate tensors nothing else
	// reads is one fused op over the native policies' matrix kernels, several times faster.
	// Default false.
	NoFusion bool
	// Shapes gives the full concrete shape of an input by name, for inputs with dynamic
	// dimensions besides dimension 0 or whose batch is not on dimension 0 (a recurrent state
	// [layers, batch, hidden]). Each must agree with the declared fixed dimensions. Default:
	// none.
	Shapes map[string][]int
	// Inputs gives nodes of g to stand for inputs by name, in place of new input nodes: the
	// output of an earlier build (a recurrent state carried from one step to the next), or a
	// node the caller made. Each must have the input's concrete shape (Shapes or the batch)
	// and the graph's element type. Default: none.
	Inputs map[string]*G.Node
	// Share is a graph built earlier on the same gorgonia graph over the same Params: this
	// build uses its parameter nodes instead of making its own, so the gradient of each
	// parameter sums over every build that reads it (a recurrent policy unrolled through
	// time, one build per step). Parameters only this build reads get nodes of their own,
	// which [Graph.Gradients] of Share does not see: build the one that reads the most first.
	// Default: nil.
	Share *Graph
	// StopGradient names tensors the gradient does not flow back through: their readers see
	// their values, but what computes them gets no gradient from those readers (a new value
	// head reading a policy's features trains without moving the policy). Default: none.
	StopGradient []string
}

// Build adds the computation of the named tensors (graph outputs or inner tensors; the graph
// outputs when none are named) for batch rows to g: BuildWith with only Batch and Outputs.
func (m *Model) Build(g *G.ExprGraph, p *Params, batch int, outputs ...string) (*Graph, error) {
	return m.BuildWith(g, p, BuildOptions{Batch: batch, Outputs: outputs})
}

// BuildWith adds the model's computation of opts.Outputs to g and returns the graph's
// handles. Only the nodes those tensors depend on are built; an unknown name is an
// [ErrNoTensor] error and the unsupported operators on their path are listed together in an
// [*UnsupportedError]. Parameter nodes are bound to p's tensors (no copy), so graphs built
// over the same p share one set of weights; the graph computes in p's element type (float32,
// or float64 after [Params.As]). Input nodes have no value: bind one with gorgonia.Let before
// each run (inputs the computed tensors do not read need none).
//
// Shape-only subgraphs (Shape, Gather, Unsqueeze, Concat of shapes, Constant...) are
// evaluated here, since shapes are static once the batch is fixed. On error g may hold a
// partial graph and should be dropped. Bad models and shapes are errors, never panics.
func (m *Model) BuildWith(g *G.ExprGraph, p *Params, opts BuildOptions) (gr *Graph, err error) {
	if g == nil {
		return nil, fmt.Errorf("%w: nil gorgonia graph", ErrModel)
	}
	if opts.Batch <= 0 {
		return nil, fmt.Errorf("%w: batch %d, must be positive", ErrShape, opts.Batch)
	}
	if err := m.checkParams(p); err != nil {
		return nil, err
	}
	outs, err := m.resolve(opts.Outputs)
	if err != nil {
		return nil, err
	}
	need := m.needed(outs)
	if err := m.unsupported(need, outs); err != nil {
		return nil, err
	}
	for name := range opts.Shapes {
		if !slices.ContainsFunc(m.inputs, func(in Input) bool { return in.Name == name }) {
			return nil, fmt.Errorf("%w: BuildOptions.Shapes names %q, which is not a graph input; the inputs are %v", ErrModel, name, m.inputNames())
		}
	}
	for name, n := range opts.Inputs {
		if !slices.ContainsFunc(m.inputs, func(in Input) bool { return in.Name == name }) {
			return nil, fmt.Errorf("%w: BuildOptions.Inputs names %q, which is not a graph input; the inputs are %v", ErrModel, name, m.inputNames())
		}
		if n == nil || n.Graph() != g {
			return nil, fmt.Errorf("%w: BuildOptions.Inputs gives input %q a node that is not in the graph being built", ErrModel, name)
		}
	}
	for _, name := range opts.StopGradient {
		if !slices.Contains(m.Tensors(), name) {
			return nil, fmt.Errorf("%w: BuildOptions.StopGradient names %q, which the graph does not compute", ErrNoTensor, name)
		}
	}
	if s := opts.Share; s != nil && (s.g != g || s.params != p || s.model != m) {
		return nil, fmt.Errorf("%w: BuildOptions.Share is a graph of another gorgonia graph, Params or model", ErrModel)
	}
	b := &builder{m: m, g: g, dt: p.dt, batch: opts.Batch, env: map[string]value{}, refs: map[string]*G.Node{}}
	defer func() {
		if r := recover(); r != nil {
			gr, err = nil, fmt.Errorf("%w: gorgonia refused node %q (op %s): %v", ErrShape, b.at.name, b.at.op, r)
		}
	}()
	gr = &Graph{model: m, params: p, g: g, batch: opts.Batch, outNames: outs, pnodes: map[string]*G.Node{}}
	for name, c := range m.consts {
		b.env[name] = value{c: c}
	}
	used := m.usedParams(outs)
	for _, pa := range m.params {
		if !used[pa.name] {
			continue
		}
		b.at = nodeRef{name: pa.name, op: "parameter"}
		if opts.Share != nil {
			if n, ok := opts.Share.pnodes[pa.name]; ok {
				b.env[pa.name] = value{n: n}
				gr.pnodes[pa.name] = n
				if !p.frozen[pa.name] {
					gr.learn = append(gr.learn, n)
				}
				continue
			}
		}
		n := G.NewTensor(g, b.dt, len(pa.shape), G.WithShape(pa.shape...), G.WithName(pa.name), G.WithValue(p.vals[pa.name]))
		b.env[pa.name] = value{n: n}
		gr.pnodes[pa.name] = n
		if !p.frozen[pa.name] {
			gr.learn = append(gr.learn, n)
		}
	}
	for _, in := range m.inputs {
		b.at = nodeRef{name: in.Name, op: "input"}
		shape, err := concreteShape(in, opts.Batch, opts.Shapes[in.Name])
		if err != nil {
			return nil, err
		}
		n, given := opts.Inputs[in.Name]
		switch {
		case !given:
			n = G.NewTensor(g, b.dt, len(shape), G.WithShape(shape...), G.WithName(in.Name))
		case !slices.Equal([]int(n.Shape()), shape) || n.Dtype() != b.dt:
			return nil, fmt.Errorf("%w: BuildOptions.Inputs gives input %q a %v node of shape %v, want %v %v", ErrShape, in.Name, n.Dtype(), n.Shape(), b.dt, shape)
		}
		b.env[in.Name] = value{n: n}
		gr.inputs = append(gr.inputs, n)
	}
	var plans map[int]*dense
	if !opts.NoFusion {
		plans = m.planDense(need, outs)
		// A stopped tensor inside a fused layer would never be built on its own: leave that
		// layer unfused.
		stoppedInside := func(d *dense, j int) bool {
			return j >= 0 && slices.ContainsFunc(m.nodes[j].GetOutput(), func(o string) bool {
				return o != d.out && slices.Contains(opts.StopGradient, o)
			})
		}
		for k, d := range plans {
			if stoppedInside(d, k) || stoppedInside(d, d.add) || stoppedInside(d, d.act) {
				delete(plans, k)
			}
		}
	}
	done := map[int]bool{}
	for k, pn := range m.nodes {
		if !need[k] || done[k] {
			continue
		}
		if d, ok := plans[k]; ok {
			b.at = m.refs[k]
			fused, err := b.buildDense(d)
			if err != nil {
				return nil, nodeError(m.refs[k], err)
			}
			if fused {
				done[d.add], done[d.act] = true, true
				if err := b.stop(opts.StopGradient, d.out); err != nil {
					return nil, err
				}
				continue
			}
		}
		if err := b.node(pn, m.refs[k]); err != nil {
			return nil, err
		}
		if err := b.stop(opts.StopGradient, pn.GetOutput()...); err != nil {
			return nil, err
		}
	}
	for _, out := range outs {
		b.at = nodeRef{name: out, op: "output"}
		v, ok := b.env[out]
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q was not computed", ErrModel, out)
		}
		n, err := b.toNode(v)
		if err != nil {
			return nil, err
		}
		gr.outputs = append(gr.outputs, n)
	}
	// An asked-for tensor that other nodes read is copied to a node of its own: gorgonia's
	// tape machine frees a value after its last reader within the graph and may overwrite it
	// in place there, not knowing the caller reads it after the run.
	for k, n := range gr.outputs {
		if to := g.To(n.ID()); n.Op() == nil || to == nil || to.Len() == 0 {
			continue
		}
		b.at = nodeRef{name: outs[k], op: "output"}
		if gr.outputs[k], err = copyNode(n); err != nil {
			return nil, err
		}
	}
	return gr, nil
}

// stop puts a StopGradient between each of the tensors outs that names lists and its
// readers.
func (b *builder) stop(names []string, outs ...string) error {
	for _, out := range outs {
		v, ok := b.env[out]
		if !ok || v.n == nil || !slices.Contains(names, out) {
			continue
		}
		b.at = nodeRef{name: out, op: "StopGradient"}
		var err error
		if v.n, err = stopGradient(v.n); err != nil {
			return err
		}
		b.env[out] = v
	}
	return nil
}

// stopGradient returns a node holding a copy of x's value through which no gradient flows.
func stopGradient(x *G.Node) (*G.Node, error) {
	shape := []int(x.Shape())
	if x.IsScalar() {
		shape = nil
	}
	return G.ApplyOp(&fnOp{spec: fnSpec{desc: "StopGradient", shape: shape,
		fwd: func(in [][]float64, y []float64) error { copy(y, in[0]); return nil },
	}, shapes: [][]int{shape}}, x)
}

// copyNode returns a node holding a copy of x's value.
func copyNode(x *G.Node) (*G.Node, error) {
	shape := []int(x.Shape())
	if x.IsScalar() {
		shape = nil
	}
	return G.ApplyOp(&fnOp{spec: fnSpec{desc: "Copy", shape: shape,
		fwd:   func(in [][]float64, y []float64) error { copy(y, in[0]); return nil },
		grads: []gradFn{func(_ [][]float64, _, dy, dx []float64) { copy(dx, dy) }},
	}, shapes: [][]int{shape}}, x)
}

func (m *Model) inputNames() []string {
	out := make([]string, len(m.inputs))
	for k, in := range m.inputs {
		out[k] = in.Name
	}
	return out
}

func concreteShape(in Input, batch int, given []int) ([]int, error) {
	if len(in.Shape) == 0 {
		return nil, fmt.Errorf("%w: input %q is a scalar; inputs need a batch dimension", ErrShape, in.Name)
	}
	if given != nil {
		if len(given) != len(in.Shape) {
			return nil, fmt.Errorf("%w: BuildOptions.Shapes gives input %q shape %v, its declared rank is %d (%v)", ErrShape, in.Name, given, len(in.Shape), in.Shape)
		}
		for k, d := range given {
			if d <= 0 || (in.Shape[k] >= 0 && in.Shape[k] != d) {
				return nil, fmt.Errorf("%w: BuildOptions.Shapes gives input %q shape %v, its declared shape is %v (-1 dynamic)", ErrShape, in.Name, given, in.Shape)
			}
		}
		return slices.Clone(given), checkShape(given)
	}
	shape := slices.Clone(in.Shape)
	switch {
	case shape[0] < 0:
		shape[0] = batch
	case shape[0] != batch:
		return nil, fmt.Errorf("%w: input %q has a fixed batch of %d, asked for %d", ErrShape, in.Name, shape[0], batch)
	}
	for k, d := range shape[1:] {
		if d < 0 {
			return nil, fmt.Errorf("%w: input %q has dynamic dimension %d besides the batch; give its full shape in BuildOptions.Shapes", ErrShape, in.Name, k+1)
		}
	}
	return shape, checkShape(shape)
}

// ExprGraph is the gorgonia graph the nodes live in.
func (gr *Graph) ExprGraph() *G.ExprGraph { return gr.g }

// Batch is the batch size the graph was built for.
func (gr *Graph) Batch() int { return gr.batch }

// Model is the model the graph was built from.
func (gr *Graph) Model() *Model { return gr.model }

// Params is the parameter set the graph's parameter nodes are bound to.
func (gr *Graph) Params() *Params { return gr.params }

// Inputs returns the input nodes, in [Model.Inputs] order; bind each a value with gorgonia.Let.
func (gr *Graph) Inputs() G.Nodes { return slices.Clone(gr.inputs) }

// Outputs returns the nodes of the tensors computed, in the order they were asked for
// ([Model.Outputs] order by default).
func (gr *Graph) Outputs() G.Nodes { return slices.Clone(gr.outputs) }

// Learnables returns the nodes of the trainable parameters the graph uses, in [Params.Names]
// order: the nodes to differentiate with gorgonia.Grad and to bind dual values for. Frozen
// parameters and those the computed tensors do not depend on are left out.
func (gr *Graph) Learnables() G.Nodes { return slices.Clone(gr.learn) }

// Input returns the input node called name.
func (gr *Graph) Input(name string) (*G.Node, error) {
	for k, in := range gr.model.inputs {
		if in.Name == name {
			return gr.inputs[k], nil
		}
	}
	return nil, fmt.Errorf("%w: the model has no input %q; its inputs are %v", ErrNoTensor, name, gr.model.inputNames())
}

// Output returns the node of a tensor the graph computes (one of the names it was built for).
func (gr *Graph) Output(name string) (*G.Node, error) {
	for k, out := range gr.outNames {
		if out == name {
			return gr.outputs[k], nil
		}
	}
	return nil, fmt.Errorf("%w: the graph was not built to compute %q (it computes %s); name it in Build's outputs",
		ErrNoTensor, name, strings.Join(quoteAll(gr.outNames), ", "))
}

// Param returns the node of the named parameter, trainable or frozen, if the graph uses it.
func (gr *Graph) Param(name string) (*G.Node, error) {
	if n, ok := gr.pnodes[name]; ok {
		return n, nil
	}
	if _, ok := gr.params.vals[name]; ok {
		return nil, fmt.Errorf("%w: the graph does not use parameter %q (no computed tensor depends on it)", ErrParams, name)
	}
	return nil, fmt.Errorf("%w: the model has no parameter %q", ErrParams, name)
}

// Gradients writes the gradients of the trainable parameters, after a run of a graph
// differentiated with respect to [Graph.Learnables], into dst in the [Params.Flat] layout
// ([Params.TrainableNames] order): zero for a trainable parameter this graph does not use.
func (gr *Graph) Gradients(dst []float32) error {
	if n := gr.params.TrainableSize(); len(dst) != n {
		return fmt.Errorf("%w: %d gradient values for %d trainable parameter values", ErrParams, len(dst), n)
	}
	off := 0
	for _, name := range gr.params.TrainableNames() {
		size := gr.params.vals[name].Shape().TotalSize()
		part := dst[off : off+size]
		off += size
		n, ok := gr.pnodes[name]
		if !ok {
			clear(part)
			continue
		}
		g, err := n.Grad()
		if err != nil {
			return fmt.Errorf("%w: no gradient for %q (differentiate with respect to Learnables and run first): %v", ErrParams, name, err)
		}
		d, ok := g.(tensor.Tensor)
		if !ok || d.Shape().TotalSize() != size {
			return fmt.Errorf("%w: the gradient of %q is %v, want %d values", ErrParams, name, g, size)
		}
		switch data := d.Data().(type) {
		case []float32:
			copy(part, data)
		case []float64:
			for k, v := range data {
				part[k] = float32(v)
			}
		default:
			return fmt.Errorf("%w: the gradient of %q holds %T", ErrParams, name, data)
		}
	}
	return nil
}

// value is what a tensor name stands for while building: a gorgonia node, or a constant
// known at import time. Exactly one is set.
type value struct {
	n *G.Node
	c *constant
}

func (v value) shape() []int {
	if v.c != nil {
		return v.c.shape
	}
	return []int(v.n.Shape())
}

type builder struct {
	m      *Model
	g      *G.ExprGraph
	dt     tensor.Dtype
	batch  int
	env    map[string]value
	refs   map[string]*G.Node // constant tensors of ones by shape, the size references of Expand
	at     nodeRef            // the node being built, for errors
	nconst int                // constants made so far, for unique names
	depth  int                // If branches being built, nested
}

// onode is an ONNX node being built, with its inputs resolved.
type onode struct {
	*onnxpb.NodeProto
	ref nodeRef
	in  []value // absent optional inputs are the zero value
}

func (n *onode) has(k int) bool { return k < len(n.in) && (n.in[k].n != nil || n.in[k].c != nil) }

// attr and attrInt are onnxpb's lookups on the node, under the names this package uses.
func (n *onode) attr(name string) *onnxpb.AttributeProto { return n.Attr(name) }

func (n *onode) attrInt(name string, def int64) int64 { return n.AttrInt(name, def) }

func (n *onode) attrFloat(name string, def float32) float32 {
	if a := n.attr(name); a != nil {
		return a.GetF()
	}
	return def
}

func (n *onode) attrInts(name string) ([]int64, bool) {
	if a := n.attr(name); a != nil {
		return a.GetInts(), true
	}
	return nil, false
}

func (n *onode) attrString(name, def string) string {
	if a := n.attr(name); a != nil {
		return string(a.GetS())
	}
	return def
}

func (b *builder) node(pn *onnxpb.NodeProto, ref nodeRef) error {
	n := &onode{NodeProto: pn, ref: ref}
	b.at = n.ref
	for _, name := range pn.GetInput() {
		n.in = append(n.in, b.env[name]) // "" (absent) maps to the zero value
	}
	o, ok := ops[pn.GetOpType()]
	if d := pn.GetDomain(); !ok || (d != "" && d != "ai.onnx") {
		return &UnsupportedError{Nodes: []UnsupportedNode{{Node: ref.name, OpType: pn.GetOpType(), Domain: d}}, Outputs: []string{b.at.name}}
	}
	outs, err := o.build(b, n)
	if err != nil {
		var ue *UnsupportedError
		if errors.As(err, &ue) {
			return err
		}
		return nodeError(n.ref, err)
	}
	for k, name := range pn.GetOutput() {
		if name == "" || k >= len(outs) {
			continue
		}
		b.env[name] = outs[k]
	}
	return nil
}

// toNode returns v as a node, making a gorgonia constant of a constant (in the graph's
// element type; a rank-0 constant becomes a scalar).
func (b *builder) toNode(v value) (*G.Node, error) {
	if v.n != nil {
		return v.n, nil
	}
	if v.c == nil {
		return nil, fmt.Errorf("%w: a required input is missing", ErrModel)
	}
	if len(v.c.shape) == 0 {
		return b.scalar(v.c.floats()[0]), nil
	}
	// gorgonia merges constants of the same name, so each gets its own.
	b.nconst++
	name := fmt.Sprintf("%s/const%d", b.at.name, b.nconst)
	return G.NewConstant(newDense(b.dt, tensor.Shape(v.c.shape), v.c.floats()), G.WithName(name), G.In(b.g)), nil
}

// inputPair returns node n's first two inputs as nodes (toNode), for the ops with an input and
// a weight (Gemm, MatMul, Conv).
func (b *builder) inputPair(n *onode) (x, w *G.Node, err error) {
	if x, err = b.toNode(n.in[0]); err != nil {
		return nil, nil, err
	}
	w, err = b.toNode(n.in[1])
	return x, w, err
}

func (b *builder) scalar(x float64) *G.Node {
	if b.dt == tensor.Float64 {
		return G.NewConstant(x, G.In(b.g))
	}
	return G.NewConstant(float32(x), G.In(b.g))
}

// reshape returns x with a new shape of the same size (x itself when unchanged). It copies:
// gorgonia's own Reshape shares its input's memory, and its tape machine, tracking liveness
// per node, may then overwrite that memory in place while the input (a graph input, a
// parameter, an op's output read later) still needs it.
func reshape(x *G.Node, shape []int) (*G.Node, error) {
	if slices.Equal([]int(x.Shape()), shape) {
		return x, nil
	}
	if product([]int(x.Shape())) != product(shape) {
		return nil, fmt.Errorf("%w: cannot reshape %v to %v", ErrShape, x.Shape(), shape)
	}
	in := []int(x.Shape())
	if x.IsScalar() {
		in = nil
	}
	return G.ApplyOp(&fnOp{spec: fnSpec{desc: "Reshape", shape: slices.Clone(shape),
		fwd:   func(in [][]float64, y []float64) error { copy(y, in[0]); return nil },
		grads: []gradFn{func(_ [][]float64, _, dy, dx []float64) { copy(dx, dy) }},
	}, shapes: [][]int{in}}, x)
}

// broadcastShape is numpy's (and ONNX's multidirectional) broadcast of two shapes.
func broadcastShape(a, b []int) ([]int, error) {
	r := max(len(a), len(b))
	out := make([]int, r)
	for k := range r {
		da, db := 1, 1
		if i := k - (r - len(a)); i >= 0 {
			da = a[i]
		}
		if i := k - (r - len(b)); i >= 0 {
			db = b[i]
		}
		switch {
		case da == db, db == 1:
			out[k] = da
		case da == 1:
			out[k] = db
		default:
			return nil, fmt.Errorf("%w: shapes %v and %v do not broadcast", ErrShape, a, b)
		}
	}
	return out, checkShape(out)
}

func padShape(s []int, rank int) []int {
	out := make([]int, rank-len(s), rank)
	for k := range out {
		out[k] = 1
	}
	return append(out, s...)
}

// broadcastPair makes a and b the same shape following numpy's rules (a gorgonia scalar stays
// a scalar: gorgonia's element-wise ops take it as it is).
func (b *builder) broadcastPair(x, y *G.Node) (*G.Node, *G.Node, error) {
	sx, sy := []int(x.Shape()), []int(y.Shape())
	if slices.Equal(sx, sy) || x.IsScalar() || y.IsScalar() {
		return x, y, nil
	}
	out, err := broadcastShape(sx, sy)
	if err != nil {
		return nil, nil, err
	}
	if x, err = reshape(x, padShape(sx, len(out))); err != nil {
		return nil, nil, err
	}
	if y, err = reshape(y, padShape(sy, len(out))); err != nil {
		return nil, nil, err
	}
	var left, right []byte
	for k, d := range out {
		if d == 1 {
			continue
		}
		if x.Shape()[k] == 1 {
			left = append(left, byte(k))
		}
		if y.Shape()[k] == 1 {
			right = append(right, byte(k))
		}
	}
	if len(left)+len(right) == 0 {
		return x, y, nil
	}
	if err := checkBroadcastAxes(left, right); err != nil {
		return nil, nil, err
	}
	return G.Broadcast(x, y, G.NewBroadcastPattern(left, right))
}

func checkBroadcastAxes(axes ...[]byte) error {
	for _, as := range axes {
		for _, a := range as {
			if a >= 4 {
				return fmt.Errorf("%w: broadcasting along axis %d; gorgonia broadcasts along axes 0-3 only", ErrShape, a)
			}
		}
	}
	return nil
}

// broadcastTo repeats x along its size-1 axes (after left-padding its shape) to shape out.
func (b *builder) broadcastTo(x *G.Node, out []int) (*G.Node, error) {
	sx := []int(x.Shape())
	if slices.Equal(sx, out) {
		return x, nil
	}
	if len(sx) > len(out) {
		return nil, fmt.Errorf("%w: cannot broadcast %v to %v", ErrShape, sx, out)
	}
	var err error
	if x.IsScalar() {
		sx = nil
	}
	if x, err = reshape(x, padShape(sx, len(out))); err != nil {
		return nil, err
	}
	var left []byte
	for k, d := range out {
		switch xd := x.Shape()[k]; {
		case xd == d:
		case xd == 1:
			left = append(left, byte(k))
		default:
			return nil, fmt.Errorf("%w: cannot broadcast %v to %v", ErrShape, sx, out)
		}
	}
	if err := checkBroadcastAxes(left); err != nil {
		return nil, err
	}
	key := fmt.Sprint(out)
	ref, ok := b.refs[key]
	if !ok {
		ones := make([]float64, product(out))
		for k := range ones {
			ones[k] = 1
		}
		ref = G.NewConstant(newDense(b.dt, tensor.Shape(out), ones), G.WithName("ones"+key), G.In(b.g))
		b.refs[key] = ref
	}
	x, _, err = G.Broadcast(x, ref, G.NewBroadcastPattern(left, nil))
	return x, err
}

// axis normalises a possibly negative axis against rank.
func axis(a int64, rank int) (int, error) {
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || a >= int64(rank) {
		return 0, fmt.Errorf("%w: axis %d out of range for rank %d", ErrShape, a, rank)
	}
	return int(a), nil
}

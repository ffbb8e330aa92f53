package graph

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Input describes one graph input the caller feeds.
type Input struct {
	Name string
	// Shape is the declared shape; a dynamic dimension is -1. Dimension 0 is the batch.
	Shape []int
}

// param is one trainable tensor of a model.
type param struct {
	name  string
	shape []int
	// init is the initializer its value comes from: its own, or for an untied Identity the
	// shared initializer the Identity reads.
	init *onnxpb.TensorProto
	// untied is true for a parameter made from an Identity over an initializer; name is then
	// the Identity's output.
	untied bool
}

// Model is an ONNX graph checked for import: its inputs, outputs, parameters and nodes. Build
// turns it into gorgonia graphs, NewParams makes the parameter values, and WriteBack writes
// new values back into the original ONNX model.
//
// A Model is immutable after New and safe for concurrent use.
type Model struct {
	proto   *onnxpb.ModelProto // a private copy of the original, never modified
	opset   int64
	inputs  []Input
	outputs []string
	params  []param
	consts  map[string]*constant // non-float (or rank-0) initializers
	nodes   []*onnxpb.NodeProto  // the nodes to build, untied Identities left out
	untied  map[*onnxpb.NodeProto]bool
}

// Parse reads a serialized ONNX model and checks it for import.
func Parse(data []byte) (*Model, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: the model is empty (0 bytes)", ErrModel)
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		return nil, fmt.Errorf("%w: not a readable ONNX model: %v", ErrModel, err)
	}
	return New(&mp)
}

// New checks an ONNX model for import. It keeps its own copy of model, so the caller may
// change or reuse model afterwards.
//
// Every FLOAT or DOUBLE initializer of rank ≥ 1 becomes a parameter named after it; an
// Identity node whose input is such an initializer becomes a parameter of its own named
// after the Identity's output (the untie rule, see the package doc). Other initializers
// (integer, rank 0) are constants. Every node's operator must be one of [SupportedOps]; the
// first that is not is an [*UnsupportedError].
func New(model *onnxpb.ModelProto) (*Model, error) {
	if model == nil || model.GetGraph() == nil {
		return nil, fmt.Errorf("%w: the model has no graph", ErrModel)
	}
	m := &Model{
		proto:  proto.Clone(model).(*onnxpb.ModelProto),
		consts: map[string]*constant{},
		untied: map[*onnxpb.NodeProto]bool{},
	}
	g := m.proto.GetGraph()
	for _, o := range m.proto.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			m.opset = o.GetVersion()
		}
	}
	if m.opset == 0 {
		return nil, fmt.Errorf("%w: the model imports no version of the default ONNX operator set", ErrModel)
	}
	if len(g.GetSparseInitializer()) > 0 {
		return nil, fmt.Errorf("%w: sparse initializers are not supported", ErrModel)
	}

	// Initializers: float tensors become parameters, the rest constants.
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range g.GetInitializer() {
		if t.GetName() == "" {
			return nil, fmt.Errorf("%w: an initializer has no name", ErrModel)
		}
		if _, dup := inits[t.GetName()]; dup {
			return nil, fmt.Errorf("%w: two initializers are named %q", ErrModel, t.GetName())
		}
		inits[t.GetName()] = t
		c, err := decodeTensor(t)
		if err != nil {
			return nil, err
		}
		if isFloatType(t.GetDataType()) && len(c.shape) > 0 {
			m.params = append(m.params, param{name: t.GetName(), shape: c.shape, init: t})
		} else {
			m.consts[t.GetName()] = c
		}
	}

	// Inputs: graph inputs that no initializer backs (IR < 4 lists initializers as inputs).
	for _, vi := range g.GetInput() {
		if _, ok := inits[vi.GetName()]; ok {
			continue
		}
		in, err := inputOf(vi)
		if err != nil {
			return nil, err
		}
		m.inputs = append(m.inputs, in)
	}
	if len(m.inputs) == 0 {
		return nil, fmt.Errorf("%w: the graph has no input to feed", ErrModel)
	}
	for _, vi := range g.GetOutput() {
		m.outputs = append(m.outputs, vi.GetName())
	}
	if len(m.outputs) == 0 {
		return nil, fmt.Errorf("%w: the graph has no output", ErrModel)
	}

	// Nodes: check operators and that every input is defined before use; untie Identities.
	defined := map[string]bool{"": true}
	for name := range inits {
		defined[name] = true
	}
	for _, in := range m.inputs {
		defined[in.Name] = true
	}
	isParam := map[string]*param{}
	for k := range m.params {
		isParam[m.params[k].name] = &m.params[k]
	}
	var untied []param
	for k, n := range g.GetNode() {
		ref := refOf(n, k)
		if d := n.GetDomain(); d != "" && d != "ai.onnx" {
			return nil, &UnsupportedError{Node: ref.name, OpType: n.GetOpType(), Domain: d}
		}
		if _, ok := ops[n.GetOpType()]; !ok {
			return nil, &UnsupportedError{Node: ref.name, OpType: n.GetOpType()}
		}
		for _, in := range n.GetInput() {
			if !defined[in] {
				return nil, nodeError(ref, fmt.Errorf("%w: input %q is not defined by an earlier node, an initializer or a graph input", ErrModel, in))
			}
		}
		for _, out := range n.GetOutput() {
			if out != "" && defined[out] {
				return nil, nodeError(ref, fmt.Errorf("%w: output %q is defined twice", ErrModel, out))
			}
			defined[out] = true
		}
		if n.GetOpType() == "Identity" && len(n.GetInput()) == 1 && len(n.GetOutput()) == 1 {
			if src, ok := isParam[n.GetInput()[0]]; ok && !src.untied {
				m.untied[n] = true
				untied = append(untied, param{name: n.GetOutput()[0], shape: src.shape, init: src.init, untied: true})
				continue
			}
		}
		m.nodes = append(m.nodes, n)
	}
	m.params = append(m.params, untied...)
	for _, out := range m.outputs {
		if !defined[out] {
			return nil, fmt.Errorf("%w: graph output %q is never computed", ErrModel, out)
		}
	}
	return m, nil
}

func refOf(n *onnxpb.NodeProto, index int) nodeRef {
	name := n.GetName()
	if name == "" && len(n.GetOutput()) > 0 {
		name = n.GetOutput()[0]
	}
	if name == "" {
		name = fmt.Sprintf("#%d", index)
	}
	return nodeRef{name: name, op: n.GetOpType()}
}

func inputOf(vi *onnxpb.ValueInfoProto) (Input, error) {
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		return Input{}, fmt.Errorf("%w: input %q is not a tensor", ErrModel, vi.GetName())
	}
	if !isFloatType(tt.GetElemType()) {
		return Input{}, fmt.Errorf("%w: input %q has element type %v; only float inputs are supported",
			ErrModel, vi.GetName(), onnxpb.TensorProto_DataType(tt.GetElemType()))
	}
	if tt.GetShape() == nil {
		return Input{}, fmt.Errorf("%w: input %q has no declared shape", ErrModel, vi.GetName())
	}
	in := Input{Name: vi.GetName()}
	for _, d := range tt.GetShape().GetDim() {
		if _, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && d.GetDimValue() >= 0 {
			in.Shape = append(in.Shape, int(d.GetDimValue()))
		} else {
			in.Shape = append(in.Shape, -1)
		}
	}
	return in, nil
}

// Opset is the version of the default ONNX operator set the model imports.
func (m *Model) Opset() int64 { return m.opset }

// Inputs describes the inputs a caller feeds, in graph order.
func (m *Model) Inputs() []Input {
	out := make([]Input, len(m.inputs))
	for k, in := range m.inputs {
		out[k] = Input{Name: in.Name, Shape: slices.Clone(in.Shape)}
	}
	return out
}

// Outputs are the graph's output names, in graph order.
func (m *Model) Outputs() []string { return slices.Clone(m.outputs) }

// ParamNames are the parameter names, in the order [Params.Names] uses.
func (m *Model) ParamNames() []string {
	out := make([]string, len(m.params))
	for k, p := range m.params {
		out[k] = p.name
	}
	return out
}

// Untied returns, for each parameter made by the untie rule, the initializer it was
// initialised from (Identity output name → initializer name).
func (m *Model) Untied() map[string]string {
	out := map[string]string{}
	for _, p := range m.params {
		if p.untied {
			out[p.name] = p.init.GetName()
		}
	}
	return out
}

// Metadata returns the model's metadata_props.
func (m *Model) Metadata() map[string]string {
	out := map[string]string{}
	for _, kv := range m.proto.GetMetadataProps() {
		out[kv.GetKey()] = kv.GetValue()
	}
	return out
}

// NewParams returns fresh float32 parameter values, read from the initializers (an untied
// parameter gets its own copy of the shared value).
func (m *Model) NewParams() *Params {
	p := &Params{vals: make(map[string]*tensor.Dense, len(m.params)), dt: tensor.Float32}
	for _, pa := range m.params {
		c, err := decodeTensor(pa.init)
		if err != nil { // New decoded every initializer already
			panic(fmt.Sprintf("graph: initializer %q no longer decodes: %v", pa.init.GetName(), err))
		}
		p.names = append(p.names, pa.name)
		p.vals[pa.name] = newDense(tensor.Float32, tensor.Shape(pa.shape), c.f)
	}
	return p
}

// checkParams verifies that p belongs to m.
func (m *Model) checkParams(p *Params) error {
	if p == nil {
		return fmt.Errorf("%w: nil Params", ErrParams)
	}
	if p.dt != tensor.Float32 && p.dt != tensor.Float64 {
		return fmt.Errorf("%w: element type %v", ErrParams, p.dt)
	}
	if len(p.vals) != len(m.params) {
		return fmt.Errorf("%w: %d parameters, the model has %d", ErrParams, len(p.vals), len(m.params))
	}
	for _, pa := range m.params {
		v, ok := p.vals[pa.name]
		if !ok {
			return fmt.Errorf("%w: no value for %q", ErrParams, pa.name)
		}
		if !v.Shape().Eq(tensor.Shape(pa.shape)) {
			return fmt.Errorf("%w: %q has shape %v, the model %v", ErrParams, pa.name, v.Shape(), pa.shape)
		}
		if v.Dtype() != p.dt {
			return fmt.Errorf("%w: %q has element type %v, the set %v", ErrParams, pa.name, v.Dtype(), p.dt)
		}
		if v.IsView() {
			return fmt.Errorf("%w: %q is a view; parameters must own contiguous data", ErrParams, pa.name)
		}
	}
	return nil
}

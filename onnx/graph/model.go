package graph

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Input describes one graph input the caller feeds.
type Input struct {
	Name string
	// Shape is the declared shape; a dynamic dimension is -1. Dimension 0 is the batch.
	Shape []int
	// ElemType is the declared element type. Integer inputs (uint8 pixels, int64 indices)
	// are accepted: their graph node holds floats like every other, so feed the integers'
	// values converted to float32 (float64 for a float64 Params).
	ElemType onnxpb.TensorProto_DataType
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
	nodes   []*onnxpb.NodeProto  // the nodes in graph order, untied Identities left out
	refs    []nodeRef            // the nodes' names for errors, by index in nodes
	untied  map[*onnxpb.NodeProto]bool
	// producer maps a node output to the index in nodes of the node computing it.
	producer map[string]int
	// outer lists, for a node with subgraphs (If), the enclosing graph's tensors they read,
	// by index in nodes.
	outer map[int][]string
	// tensors lists every tensor name (inputs, initializers, parameters, node outputs) in
	// graph order.
	tensors []string
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
// (integer, rank 0) are constants. New checks the graph's structure (every node input
// defined before use, no name defined twice, inputs with a declared shape) but not its
// operators: [Model.Check] and [Model.Build] report the unsupported operators on the path
// to the tensors asked for, so nodes no asked-for tensor needs may use any operator.
func New(model *onnxpb.ModelProto) (*Model, error) {
	if model == nil || model.GetGraph() == nil {
		return nil, fmt.Errorf("%w: the model has no graph", ErrModel)
	}
	m := &Model{
		proto:    proto.Clone(model).(*onnxpb.ModelProto),
		consts:   map[string]*constant{},
		untied:   map[*onnxpb.NodeProto]bool{},
		producer: map[string]int{},
		outer:    map[int][]string{},
	}
	g := m.proto.GetGraph()
	for _, o := range m.proto.GetOpsetImport() {
		if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
			m.opset = o.GetVersion()
		}
	}
	if m.opset <= 0 {
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
	seenInput := map[string]bool{}
	for _, vi := range g.GetInput() {
		if _, ok := inits[vi.GetName()]; ok {
			continue
		}
		in, err := inputOf(vi)
		if err != nil {
			return nil, err
		}
		if seenInput[in.Name] {
			return nil, fmt.Errorf("%w: two inputs are named %q", ErrModel, in.Name)
		}
		seenInput[in.Name] = true
		m.inputs = append(m.inputs, in)
		m.tensors = append(m.tensors, in.Name)
	}
	if len(m.inputs) == 0 {
		return nil, fmt.Errorf("%w: the graph has no input to feed", ErrModel)
	}
	for _, t := range g.GetInitializer() {
		m.tensors = append(m.tensors, t.GetName())
	}
	for _, vi := range g.GetOutput() {
		m.outputs = append(m.outputs, vi.GetName())
	}
	if len(m.outputs) == 0 {
		return nil, fmt.Errorf("%w: the graph has no output", ErrModel)
	}

	// Nodes: check that every input is defined before use; untie Identities.
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
		for _, in := range n.GetInput() {
			if !defined[in] {
				return nil, nodeError(ref, fmt.Errorf("%w: input %q is not defined by an earlier node, an initializer or a graph input", ErrModel, in))
			}
		}
		outer := outerNames(n, 0)
		for _, in := range outer {
			if !defined[in] {
				return nil, nodeError(ref, fmt.Errorf("%w: a subgraph reads %q, which is not defined before the node", ErrModel, in))
			}
		}
		for _, out := range n.GetOutput() {
			if out != "" && defined[out] {
				return nil, nodeError(ref, fmt.Errorf("%w: output %q is defined twice", ErrModel, out))
			}
			defined[out] = true
			if out != "" {
				m.tensors = append(m.tensors, out)
			}
		}
		if n.GetOpType() == "Identity" && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") &&
			len(n.GetInput()) == 1 && len(n.GetOutput()) == 1 {
			if src, ok := isParam[n.GetInput()[0]]; ok && !src.untied {
				m.untied[n] = true
				untied = append(untied, param{name: n.GetOutput()[0], shape: src.shape, init: src.init, untied: true})
				continue
			}
		}
		for _, out := range n.GetOutput() {
			if out != "" {
				m.producer[out] = len(m.nodes)
			}
		}
		if len(outer) > 0 {
			m.outer[len(m.nodes)] = outer
		}
		m.nodes = append(m.nodes, n)
		m.refs = append(m.refs, ref)
	}
	m.params = append(m.params, untied...)
	for _, out := range m.outputs {
		if !defined[out] {
			return nil, fmt.Errorf("%w: graph output %q is never computed", ErrModel, out)
		}
	}
	return m, nil
}

// resolve returns the tensors asked for (the graph outputs when none are named), checking
// that the graph defines each.
func (m *Model) resolve(names []string) ([]string, error) {
	if len(names) == 0 {
		return slices.Clone(m.outputs), nil
	}
	known := map[string]bool{}
	for _, t := range m.tensors {
		known[t] = true
	}
	for _, pa := range m.params {
		known[pa.name] = true
	}
	var missing []string
	for _, n := range names {
		if !known[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s; the nearest tensor names the graph has are %s; "+
			"name a graph output (%s) or an inner tensor ([Model.Tensors] lists them)",
			ErrNoTensor, strings.Join(quoteAll(missing), ", "),
			strings.Join(quoteAll(nearest(missing[0], m.tensors, 8)), ", "), strings.Join(quoteAll(m.outputs), ", "))
	}
	return slices.Clone(names), nil
}

// needed marks the nodes (by index in m.nodes) the given tensors depend on.
func (m *Model) needed(outputs []string) []bool {
	need := make([]bool, len(m.nodes))
	stack := slices.Clone(outputs)
	seen := map[string]bool{}
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[t] {
			continue
		}
		seen[t] = true
		k, ok := m.producer[t]
		if !ok || need[k] {
			continue
		}
		need[k] = true
		for _, in := range append(slices.Clone(m.nodes[k].GetInput()), m.outer[k]...) {
			if in != "" && !seen[in] {
				stack = append(stack, in)
			}
		}
	}
	return need
}

// unsupported returns the needed nodes whose operator the importer lacks, as an
// *UnsupportedError, or nil.
func (m *Model) unsupported(need []bool, outputs []string) error {
	var bad []UnsupportedNode
	var check func(n *onnxpb.NodeProto, ref nodeRef, depth int)
	check = func(n *onnxpb.NodeProto, ref nodeRef, depth int) {
		d := n.GetDomain()
		_, known := ops[n.GetOpType()]
		if (d != "" && d != "ai.onnx") || !known {
			bad = append(bad, UnsupportedNode{Node: ref.name, OpType: n.GetOpType(), Domain: d})
			return
		}
		if depth >= maxSubgraphDepth {
			return
		}
		for _, a := range n.GetAttribute() { // the branches of an If
			for k, sn := range a.GetG().GetNode() {
				check(sn, refOf(sn, k), depth+1)
			}
		}
	}
	for k, n := range m.nodes {
		if need[k] {
			check(n, m.refs[k], 0)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &UnsupportedError{Nodes: bad, Outputs: outputs}
}

// Check reports whether the model can compute the named tensors (graph outputs or inner
// tensors; the graph outputs when none are named): an [ErrNoTensor] error naming the nearest
// names for an unknown tensor, or an [*UnsupportedError] listing every node on their path
// whose operator the importer lacks. Attribute values outside the importer's limits are found
// only by [Model.Build].
func (m *Model) Check(outputs ...string) error {
	outs, err := m.resolve(outputs)
	if err != nil {
		return err
	}
	return m.unsupported(m.needed(outs), outs)
}

// Tensors lists every tensor name of the graph in graph order: inputs, initializers, then
// each node's outputs (an untied Identity's output included). Any of them may be asked for
// as an output of [Model.Build].
func (m *Model) Tensors() []string { return slices.Clone(m.tensors) }

// Producer returns the operator type of the node computing tensor name, "input" for a graph
// input, "initializer" for an initializer, and false when the graph has no such tensor.
func (m *Model) Producer(name string) (string, bool) {
	if k, ok := m.producer[name]; ok {
		return m.nodes[k].GetOpType(), true
	}
	for _, in := range m.inputs {
		if in.Name == name {
			return "input", true
		}
	}
	if _, ok := m.consts[name]; ok {
		return "initializer", true
	}
	for _, pa := range m.params {
		if pa.name == name {
			if pa.untied {
				return "Identity", true
			}
			return "initializer", true
		}
	}
	return "", false
}

// maxSubgraphDepth bounds the nesting of subgraphs (If inside If) the importer follows.
const maxSubgraphDepth = 16

// outerNames lists the tensors the subgraphs of n (If's branches) read from enclosing graphs:
// the names their nodes use that the subgraph does not define itself.
func outerNames(n *onnxpb.NodeProto, depth int) []string {
	var out []string
	if depth >= maxSubgraphDepth {
		return nil
	}
	for _, a := range n.GetAttribute() {
		sg := a.GetG()
		if sg == nil {
			continue
		}
		local := map[string]bool{"": true}
		for _, t := range sg.GetInitializer() {
			local[t.GetName()] = true
		}
		for _, vi := range sg.GetInput() {
			local[vi.GetName()] = true
		}
		use := func(name string) {
			if !local[name] && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		for _, sn := range sg.GetNode() {
			for _, in := range sn.GetInput() {
				use(in)
			}
			for _, in := range outerNames(sn, depth+1) {
				use(in)
			}
			for _, o := range sn.GetOutput() {
				local[o] = true
			}
		}
		for _, vi := range sg.GetOutput() {
			use(vi.GetName())
		}
	}
	return out
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
	if !isFloatType(tt.GetElemType()) && !isIntType(tt.GetElemType()) {
		return Input{}, fmt.Errorf("%w: input %q has element type %v; only float, double and integer inputs are supported",
			ErrModel, vi.GetName(), onnxpb.TensorProto_DataType(tt.GetElemType()))
	}
	if tt.GetShape() == nil {
		return Input{}, fmt.Errorf("%w: input %q has no declared shape", ErrModel, vi.GetName())
	}
	in := Input{Name: vi.GetName(), ElemType: onnxpb.TensorProto_DataType(tt.GetElemType())}
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
		out[k] = Input{Name: in.Name, Shape: slices.Clone(in.Shape), ElemType: in.ElemType}
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

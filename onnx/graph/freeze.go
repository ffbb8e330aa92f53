package graph

import (
	"fmt"
	"regexp"
	"slices"

	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// TrainOptions chooses which parameters of a [Model] train. The zero value trains every
// parameter the graph outputs depend on, except the input-preprocessing constants (the
// default rule, see the package doc).
type TrainOptions struct {
	// Outputs are the tensors the trainer computes: graph outputs or inner tensors, the names
	// given to [Model.Build]. Parameters none of them depends on are frozen. Default: the
	// graph outputs.
	Outputs []string
	// Train matches the names of parameters to train even where the default rule freezes
	// them (an observation normaliser to adapt). It cannot train a parameter none of Outputs
	// depends on. Default nil: no override.
	Train *regexp.Regexp
	// Freeze matches the names of parameters to keep fixed. It is applied after Train, so a
	// name both match is frozen. Default nil: no override.
	Freeze *regexp.Regexp
}

// NewParams returns fresh float32 parameter values, read from the initializers (an untied
// parameter gets its own copy of the shared value), with the default trainable set: that of
// NewParamsFor(TrainOptions{}).
func (m *Model) NewParams() *Params {
	p, err := m.NewParamsFor(TrainOptions{})
	if err != nil { // the graph outputs always resolve: New checked them
		panic(fmt.Sprintf("graph: the default parameters fail: %v", err))
	}
	return p
}

// NewParamsFor returns fresh float32 parameter values, read from the initializers, with the
// trainable set opts chooses. Frozen parameters keep their values: they are read by the graphs
// built over the Params like any other, but are no [Graph.Learnables] and stay out of
// [Params.Flat]; [Model.WriteBack] writes them unchanged. An unknown name in opts.Outputs is
// an [ErrNoTensor] error.
func (m *Model) NewParamsFor(opts TrainOptions) (*Params, error) {
	outs, err := m.resolve(opts.Outputs)
	if err != nil {
		return nil, err
	}
	frozen := m.defaultFrozen(outs, m.needed(outs))
	used := m.usedParams(outs)
	p := &Params{vals: make(map[string]*tensor.Dense, len(m.params)), dt: tensor.Float32, frozen: map[string]bool{}}
	for _, pa := range m.params {
		c, err := decodeTensor(pa.init)
		if err != nil { // New decoded every initializer already
			return nil, err
		}
		p.names = append(p.names, pa.name)
		p.vals[pa.name] = newDense(tensor.Float32, tensor.Shape(pa.shape), c.f)
		f := frozen[pa.name]
		if opts.Train != nil && opts.Train.MatchString(pa.name) && used[pa.name] {
			f = false
		}
		if opts.Freeze != nil && opts.Freeze.MatchString(pa.name) {
			f = true
		}
		if f {
			p.frozen[pa.name] = true
		}
	}
	return p, nil
}

// usedParams marks the parameters the given tensors depend on.
func (m *Model) usedParams(outputs []string) map[string]bool {
	used := map[string]bool{}
	for _, o := range outputs {
		used[o] = true
	}
	need := m.needed(outputs)
	for k, n := range m.nodes {
		if need[k] {
			for _, in := range slices.Concat(n.GetInput(), m.outer[k]) {
				used[in] = true
			}
		}
	}
	out := map[string]bool{}
	for _, pa := range m.params {
		if used[pa.name] {
			out[pa.name] = true
		}
	}
	return out
}

// layerKind says how a node takes part in the default freezing rule: not a layer, a layer
// whose input 0 is its data (the others its weights), or a layer all of whose inputs are data
// (a decomposed LayerNormalization's division).
type layerKind int

const (
	notLayer layerKind = iota
	weightedLayer
	dataLayer
)

// layerOps are the operators whose input 0 is data and whose other inputs are weights.
var layerOps = map[string]bool{
	"Gemm": true, "MatMul": true, "Conv": true, "ConvTranspose": true,
	"LayerNormalization": true, "BatchNormalization": true, "InstanceNormalization": true,
	"GroupNormalization": true, "LSTM": true, "GRU": true, "RNN": true,
}

func (m *Model) layerOf(k int) layerKind {
	n := m.nodes[k]
	if layerOps[n.GetOpType()] {
		return weightedLayer
	}
	if m.isDecomposedNorm(k) {
		return dataLayer
	}
	return notLayer
}

// isDecomposedNorm recognises the division of a LayerNorm exported as primitives (torch
// before opset 17): Div(Sub(x, ReduceMean(x)), Sqrt(...)).
func (m *Model) isDecomposedNorm(k int) bool {
	n := m.nodes[k]
	if n.GetOpType() != "Div" || len(n.GetInput()) != 2 {
		return false
	}
	sub, ok := m.producerNode(n.GetInput()[0])
	if !ok || sub.GetOpType() != "Sub" || len(sub.GetInput()) != 2 {
		return false
	}
	mean, ok := m.producerNode(sub.GetInput()[1])
	if !ok || mean.GetOpType() != "ReduceMean" || len(mean.GetInput()) == 0 || mean.GetInput()[0] != sub.GetInput()[0] {
		return false
	}
	sqrt, ok := m.producerNode(n.GetInput()[1])
	return ok && sqrt.GetOpType() == "Sqrt"
}

func (m *Model) producerNode(t string) (*onnxpb.NodeProto, bool) {
	k, ok := m.producer[t]
	if !ok {
		return nil, false
	}
	return m.nodes[k], true
}

// defaultFrozen applies the default rule: a parameter is frozen when every path from it to
// the outputs enters a layer (Gemm, MatMul, Conv, a normalisation, a recurrent layer)
// through the layer's data input while still in the preprocessing region (tensors no layer
// precedes), or when no output depends on it. A path that reaches a layer's weight inputs,
// mixes with a tensor some layer precedes, or reaches an output directly makes it trainable.
func (m *Model) defaultFrozen(outputs []string, need []bool) map[string]bool {
	isOut := map[string]bool{}
	for _, o := range outputs {
		isOut[o] = true
	}
	// pre: tensors no layer precedes (inputs and initializers are).
	pre := map[string]bool{}
	preOf := func(t string) bool {
		if _, ok := m.producer[t]; ok {
			return pre[t]
		}
		return true
	}
	kinds := make([]layerKind, len(m.nodes))
	type use struct{ node, slot int }
	consumers := map[string][]use{}
	for k, n := range m.nodes {
		kinds[k] = m.layerOf(k)
		p := kinds[k] == notLayer
		for s, in := range n.GetInput() {
			if in == "" {
				continue
			}
			p = p && preOf(in)
			if need[k] {
				consumers[in] = append(consumers[in], use{k, s})
			}
		}
		for _, in := range m.outer[k] { // read by a subgraph: as a non-layer input
			p = p && preOf(in)
			if need[k] {
				consumers[in] = append(consumers[in], use{k, -1})
			}
		}
		for _, out := range n.GetOutput() {
			pre[out] = p
		}
	}
	frozen := map[string]bool{}
	for _, pa := range m.params {
		trainable := false
		seen := map[string]bool{}
		stack := []string{pa.name}
		for len(stack) > 0 && !trainable {
			t := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[t] {
				continue
			}
			seen[t] = true
			if isOut[t] {
				trainable = true
				break
			}
			for _, u := range consumers[t] {
				switch kinds[u.node] {
				case weightedLayer:
					if u.slot != 0 {
						trainable = true
					}
				case dataLayer:
				default:
					for _, out := range m.nodes[u.node].GetOutput() {
						if out == "" {
							continue
						}
						if !pre[out] {
							trainable = true
						}
						stack = append(stack, out)
					}
				}
			}
		}
		if !trainable {
			frozen[pa.name] = true
		}
	}
	return frozen
}

// Frozen returns the names of p's frozen parameters, in Names order.
func (p *Params) Frozen() []string {
	var out []string
	for _, name := range p.names {
		if p.frozen[name] {
			out = append(out, name)
		}
	}
	return out
}

// Trainable reports whether the named parameter trains (is not frozen).
func (p *Params) Trainable(name string) bool {
	_, ok := p.vals[name]
	return ok && !p.frozen[name]
}

// TrainableNames returns the names of the trainable parameters, in Names order: the layout
// of [Params.Flat] and of [Graph.Learnables].
func (p *Params) TrainableNames() []string {
	var out []string
	for _, name := range p.names {
		if !p.frozen[name] {
			out = append(out, name)
		}
	}
	return out
}

// TrainableSize is the number of scalar values of the trainable parameters: the length of
// [Params.Flat].
func (p *Params) TrainableSize() int {
	n := 0
	for _, name := range p.TrainableNames() {
		n += p.vals[name].Shape().TotalSize()
	}
	return n
}

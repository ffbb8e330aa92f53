package models

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// CriticOutput is the graph output AddCritic adds, and CriticPrefix the prefix of its nodes'
// and initializers' names.
const (
	CriticOutput = "towerrl_critic_value"
	CriticPrefix = "towerrl_critic"
	// CriticBias is the output layer's bias (one value) of a critic AddCritic made with two
	// hidden layers.
	CriticBias = CriticPrefix + ".2.bias"
	// CriticInput is the critic's own copy of what it reads (as float32; its inputs side by
	// side when several): where a trainer stops the value loss's gradient when the critic
	// reads a policy's features.
	CriticInput = CriticPrefix + ".obs"
)

// AddCritic appends to m a fresh value head for a policy exported without one (RLlib's
// export, actor-only policies): an MLP over the tensors named inputs — graph inputs (the
// observations) or node outputs (a recurrent policy's features) — each read as float32 rows
// (cast, and flattened from axis 1) and set side by side, dim values a row in all, with tanh
// hidden layers of the given widths and one output, initialised as CleanRL initialises its
// critic (orthogonal weights, gain √2 for the hidden layers and 1 for the output; zero
// biases). Its value is the new graph output CriticOutput ([batch, 1]); its initializers are
// "towerrl_critic.K.weight" ([in, out], used by Gemm without transposition) and ".bias". The
// rest of m is unchanged, so the policy's own outputs compute as before.
func AddCritic(m *onnxpb.ModelProto, inputs []string, dim int, hidden []int, rng *rand.Rand) error {
	g := m.GetGraph()
	if g == nil {
		return fmt.Errorf("models: AddCritic: the model has no graph")
	}
	if dim < 1 {
		return fmt.Errorf("models: AddCritic: input rows of %d values", dim)
	}
	if len(inputs) == 0 {
		return fmt.Errorf("models: AddCritic: no input tensor named")
	}
	for _, input := range inputs {
		found := false
		for _, in := range g.GetInput() {
			found = found || in.GetName() == input
		}
		for _, n := range g.GetNode() {
			for _, out := range n.GetOutput() {
				found = found || out == input
			}
		}
		if !found {
			return fmt.Errorf("models: AddCritic: the graph has no input or node output %q", input)
		}
	}
	for _, out := range g.GetOutput() {
		if out.GetName() == CriticOutput {
			return fmt.Errorf("models: AddCritic: the graph already has an output %q", CriticOutput)
		}
	}
	e := &exporter{}
	// The observations may come as another element type (uint8 pixels, float64) or shape:
	// the critic reads them as float32 rows.
	x := CriticPrefix + ".flat"
	if len(inputs) == 1 {
		e.node("Cast", inputs, CriticInput, CriticPrefix+".cast", intAttr("to", int64(onnxpb.TensorProto_FLOAT)))
		e.node("Flatten", []string{CriticInput}, x, CriticPrefix+".flatten", intAttr("axis", 1))
	} else {
		rows := make([]string, len(inputs))
		for k, input := range inputs {
			name := fmt.Sprintf("%s.in%d", CriticPrefix, k)
			e.node("Cast", []string{input}, name+".cast", name+".cast", intAttr("to", int64(onnxpb.TensorProto_FLOAT)))
			e.node("Flatten", []string{name + ".cast"}, name+".flat", name+".flatten", intAttr("axis", 1))
			rows[k] = name + ".flat"
		}
		e.node("Concat", rows, CriticInput, CriticPrefix+".concat", intAttr("axis", 1))
		x = CriticInput
	}
	widths := append(append([]int{dim}, hidden...), 1)
	for k := range len(widths) - 1 {
		in, out := widths[k], widths[k+1]
		name := fmt.Sprintf("%s.%d", CriticPrefix, k)
		gain := math.Sqrt2
		if k == len(widths)-2 {
			gain = 1
		}
		w := make([]float32, in*out)
		orthogonal(w, out, in, gain, rng, true)
		e.g.Initializer = append(e.g.Initializer, floatTensor(name+".weight", []int{in, out}, w), floatTensor(name+".bias", []int{out}, make([]float32, out)))
		y := name + ".out"
		if k == len(widths)-2 {
			y = CriticOutput
		}
		e.node("Gemm", []string{x, name + ".weight", name + ".bias"}, y, name+".gemm")
		x = y
		if k < len(widths)-2 {
			e.node("Tanh", []string{y}, name+".tanh", name+".tanh")
			x = name + ".tanh"
		}
	}
	e.output(CriticOutput, 1)
	g.Node = append(g.Node, e.g.Node...)
	g.Initializer = append(g.Initializer, e.g.Initializer...)
	g.Output = append(g.Output, e.g.Output...)
	return nil
}

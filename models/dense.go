package models

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// DenseGraph builds the ONNX policy of a network that is not a models.Params — the
// off-policy algorithms' actors and Q-networks (engine/sac, engine/dqn), which train with
// their own dense networks — with the same contract as Export: input "obs" [batch, obs...]
// float32 with a dynamic batch, opset Opset, the towerrl.* metadata of a head.Spec, and
// linear layers as Gemm over [in, out] weights, so that the batchers, eval and a later
// fine-tune bind it as they bind Export's.
type DenseGraph struct {
	e      exporter
	widths map[string]int // the width of each value the graph holds, by name
}

// NewDenseGraph starts a graph whose input "obs" holds rows of in float32 values.
func NewDenseGraph(in int) *DenseGraph {
	d := &DenseGraph{widths: map[string]int{InputObs: in}}
	d.e.g.Input = []*onnxpb.ValueInfoProto{valueInfo(InputObs, batchDims(int64(in)))}
	return d
}

// Dense appends y = act(x·W + b) for x a value of the graph holding rows of len(w)/len(b)
// values, w the [in, out] row-major weights and b the out biases, named name+".weight" and
// name+".bias"; act is "" for none, Tanh or ReLU. It returns y's name. The weights are
// copied.
func (d *DenseGraph) Dense(x, name string, w, b []float32, act Activation) (string, error) {
	in, ok := d.widths[x]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: dense layer %s reads %q, which the graph does not hold", ErrConfig, name, x)
	case len(b) == 0 || len(w) != in*len(b):
		return "", fmt.Errorf("%w: dense layer %s: %d weights and %d biases for %d inputs", ErrConfig, name, len(w), len(b), in)
	case act != "" && act != Tanh && act != ReLU:
		return "", fmt.Errorf("%w: dense layer %s: activation %q", ErrConfig, name, act)
	}
	if _, dup := d.widths[name]; dup {
		return "", fmt.Errorf("%w: two values named %q", ErrConfig, name)
	}
	out := len(b)
	d.e.g.Initializer = append(d.e.g.Initializer, floatTensor(name+".weight", []int{in, out}, w), floatTensor(name+".bias", []int{out}, b))
	y := name
	if act != "" {
		y = name + ".linear"
	}
	d.e.node("Gemm", []string{x, name + ".weight", name + ".bias"}, y, name,
		floatAttr("alpha", 1), floatAttr("beta", 1), intAttr("transA", 0), intAttr("transB", 0))
	if act != "" {
		op := "Tanh"
		if act == ReLU {
			op = "Relu"
		}
		d.e.node(op, []string{y}, name, name+"."+string(act))
	}
	d.widths[name] = out
	return name, nil
}

// Columns makes out hold columns [from, to) of x's rows.
func (d *DenseGraph) Columns(x, out string, from, to int) error {
	w, ok := d.widths[x]
	if !ok || from < 0 || to > w || from >= to {
		return fmt.Errorf("%w: columns [%d, %d) of %q (width %d)", ErrConfig, from, to, x, w)
	}
	consts := func(suffix string, v int64) string {
		name := out + "." + suffix
		d.e.g.Initializer = append(d.e.g.Initializer, &onnxpb.TensorProto{Name: proto.String(name), Dims: []int64{1},
			DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{v}})
		return name
	}
	d.e.node("Slice", []string{x, consts("starts", int64(from)), consts("ends", int64(to)), consts("axes", 1)}, out, out+".slice")
	d.widths[out] = to - from
	return nil
}

// Rename makes the value x, which no node reads, go by the name out instead (for an output's
// name).
func (d *DenseGraph) Rename(x, out string) error {
	w, ok := d.widths[x]
	if _, taken := d.widths[out]; !ok || taken || x == InputObs {
		return fmt.Errorf("%w: renaming %q to %q", ErrConfig, x, out)
	}
	for _, n := range d.e.g.Node {
		if slices.Contains(n.Input, x) {
			return fmt.Errorf("%w: renaming %q, which node %s reads", ErrConfig, x, n.GetName())
		}
	}
	d.e.rename(x, out)
	delete(d.widths, x)
	d.widths[out] = w
	return nil
}

// Clip makes out hold x clipped to [lo, hi].
func (d *DenseGraph) Clip(x, out string, lo, hi float32) error {
	w, ok := d.widths[x]
	if !ok || !(lo <= hi) {
		return fmt.Errorf("%w: clip %q to [%g, %g]", ErrConfig, x, lo, hi)
	}
	d.e.g.Initializer = append(d.e.g.Initializer, floatTensor(out+".min", nil, []float32{lo}), floatTensor(out+".max", nil, []float32{hi}))
	d.e.node("Clip", []string{x, out + ".min", out + ".max"}, out, out+".clip")
	d.widths[out] = w
	return nil
}

// TanhRange makes out hold lo + ½(hi − lo)(tanh(x) + 1), x squashed into (lo, hi).
func (d *DenseGraph) TanhRange(x, out string, lo, hi float32) error {
	w, ok := d.widths[x]
	if !ok || !(lo < hi) {
		return fmt.Errorf("%w: squash %q into (%g, %g)", ErrConfig, x, lo, hi)
	}
	d.e.g.Initializer = append(d.e.g.Initializer, floatTensor(out+".one", nil, []float32{1}),
		floatTensor(out+".half_range", nil, []float32{(hi - lo) / 2}), floatTensor(out+".low", nil, []float32{lo}))
	d.e.node("Tanh", []string{x}, out+".tanh", out+".tanh")
	d.e.node("Add", []string{out + ".tanh", out + ".one"}, out+".shifted", out+".shift")
	d.e.node("Mul", []string{out + ".shifted", out + ".half_range"}, out+".scaled", out+".scale")
	d.e.node("Add", []string{out + ".scaled", out + ".low"}, out, out+".offset")
	d.widths[out] = w
	return nil
}

// Add makes out hold x + y, two values of the same width, element by element.
func (d *DenseGraph) Add(x, y, out string) error {
	wx, okx := d.widths[x]
	wy, oky := d.widths[y]
	if _, taken := d.widths[out]; !okx || !oky || wx != wy || taken {
		return fmt.Errorf("%w: adding %q (width %d) and %q (width %d) into %q", ErrConfig, x, wx, y, wy, out)
	}
	d.e.node("Add", []string{x, y}, out, out+".add")
	d.widths[out] = wx
	return nil
}

// Square makes out hold x², element by element.
func (d *DenseGraph) Square(x, out string) error {
	w, ok := d.widths[x]
	if _, taken := d.widths[out]; !ok || taken {
		return fmt.Errorf("%w: squaring %q into %q", ErrConfig, x, out)
	}
	d.e.node("Mul", []string{x, x}, out, out+".square")
	d.widths[out] = w
	return nil
}

// HalfLog makes out hold ½·log(x), element by element: the log standard deviation of a
// variance.
func (d *DenseGraph) HalfLog(x, out string) error {
	w, ok := d.widths[x]
	if _, taken := d.widths[out]; !ok || taken {
		return fmt.Errorf("%w: ½·log of %q into %q", ErrConfig, x, out)
	}
	d.e.g.Initializer = append(d.e.g.Initializer, floatTensor(out+".half", nil, []float32{0.5}))
	d.e.node("Log", []string{x}, out+".log", out+".log")
	d.e.node("Mul", []string{out + ".log", out + ".half"}, out, out+".halve")
	d.widths[out] = w
	return nil
}

// Marshal names the graph's outputs (values it holds, in order) and writes the model with the
// towerrl.* metadata of spec (the head and spaces the batchers bind it by) and towerrl.version
// version; producer says what made it (ProducerVersion, e.g. "sac/actor").
func (d *DenseGraph) Marshal(spec head.Spec, version int64, producer string, outputs ...string) ([]byte, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	d.e.g.Output = nil
	for _, o := range outputs {
		w, ok := d.widths[o]
		if !ok {
			return nil, fmt.Errorf("%w: output %q is not a value of the graph", ErrConfig, o)
		}
		d.e.g.Output = append(d.e.g.Output, valueInfo(o, batchDims(int64(w))))
	}
	d.e.g.Name = proto.String("towerrl_policy")
	spec.Version = version
	m := modelProto(&d.e.g, spec, producer,
		fmt.Sprintf("towerrl %s %s policy; linear weights are [in, out] (Gemm transB=0)", producer, spec.Head))
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("models: marshalling the ONNX model: %w", err)
	}
	return b, nil
}

// batchDims is [batch, width].
func batchDims(width int64) []*onnxpb.TensorShapeProto_Dimension {
	return []*onnxpb.TensorShapeProto_Dimension{
		{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: BatchDim}},
		{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: width}},
	}
}

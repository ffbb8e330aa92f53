package models

import (
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Names of the observation normaliser's initializers and of its output, the value the
// policy's own graph then reads in place of its input.
const (
	ObsNormMean  = "obs_norm.mean"  // [obs_shape...], subtracted
	ObsNormScale = "obs_norm.scale" // [obs_shape...], 1/√(var+ε), multiplied
	ObsNormOut   = "obs_norm.out"
	// KeyObsNorm is the metadata key PrependObsNorm sets: "clip:C", the normaliser's bound.
	KeyObsNorm = "towerrl.obs_norm"
)

// ObsNorm is an observation normaliser, y = clip((x − Mean)·Scale, −Clip, Clip) per
// component, with Mean and Scale of one observation's size (row-major).
type ObsNorm struct {
	Mean, Scale []float32
	Clip        float32
}

// PrependObsNorm puts n in front of m's graph as ONNX ops on its input named input: Sub
// (ObsNormMean), Mul (ObsNormScale) and Clip (inputs of opset 11 on, attributes before), every
// node that read input reading ObsNormOut instead. The graph input keeps its name and shape,
// so the model takes raw observations and is a whole policy for any ONNX consumer; ObsNormMean
// and ObsNormScale are float initializers of the observation's shape (published in place like
// the other weights), and KeyObsNorm records the bound. It fails when the graph has no such
// float input, when the sizes differ from the observation's, or when the names are taken.
func PrependObsNorm(m *onnxpb.ModelProto, input string, n ObsNorm) error {
	g := m.GetGraph()
	at := slices.IndexFunc(g.GetInput(), func(v *onnxpb.ValueInfoProto) bool { return v.GetName() == input })
	if at < 0 {
		return fmt.Errorf("%w: no graph input %q to normalise", ErrConfig, input)
	}
	tt := g.GetInput()[at].GetType().GetTensorType()
	if onnxpb.TensorProto_DataType(tt.GetElemType()) != onnxpb.TensorProto_FLOAT {
		return fmt.Errorf("%w: input %q is not float32; only float observations are normalised", ErrConfig, input)
	}
	shape := []int{len(n.Mean)} // one observation's shape: the input's dims after the batch
	if dims := tt.GetShape().GetDim(); len(dims) > 1 {
		shape = shape[:0]
		for _, d := range dims[1:] {
			if d.GetDimValue() < 1 {
				shape = []int{len(n.Mean)}
				if len(dims) != 2 {
					return fmt.Errorf("%w: input %q has an unknown observation dimension; its shape is needed to normalise it", ErrConfig, input)
				}
				break
			}
			shape = append(shape, int(d.GetDimValue()))
		}
	}
	if size := product(shape); size != len(n.Mean) || size != len(n.Scale) {
		return fmt.Errorf("%w: a normaliser of %d means and %d scales for observations of shape %v", ErrConfig, len(n.Mean), len(n.Scale), shape)
	}
	if !(n.Clip > 0) || math.IsInf(float64(n.Clip), 0) {
		return fmt.Errorf("%w: a normaliser's clip bound of %g", ErrConfig, n.Clip)
	}
	names := []string{ObsNormMean, ObsNormScale, ObsNormOut, "obs_norm.diff", "obs_norm.scaled", "obs_norm.clip_min", "obs_norm.clip_max"}
	for _, t := range g.GetInitializer() {
		if slices.Contains(names, t.GetName()) {
			return fmt.Errorf("%w: the graph already has an initializer %q: it normalises its observations with a towerrl normaliser already (fine-tuning keeps that one; do not ask for another)", ErrConfig, t.GetName())
		}
	}
	for _, nd := range g.GetNode() {
		for _, o := range nd.GetOutput() {
			if slices.Contains(names, o) {
				return fmt.Errorf("%w: the graph already computes a tensor %q", ErrConfig, o)
			}
		}
		for i, in := range nd.GetInput() {
			if in == input {
				nd.Input[i] = ObsNormOut
			}
		}
	}
	e := exporter{}
	e.g.Initializer = []*onnxpb.TensorProto{floatTensor(ObsNormMean, shape, n.Mean), floatTensor(ObsNormScale, shape, n.Scale)}
	e.node("Sub", []string{input, ObsNormMean}, "obs_norm.diff", "obs_norm.sub")
	e.node("Mul", []string{"obs_norm.diff", ObsNormScale}, "obs_norm.scaled", "obs_norm.mul")
	if opset(m) >= 11 {
		e.g.Initializer = append(e.g.Initializer, floatTensor("obs_norm.clip_min", nil, []float32{-n.Clip}),
			floatTensor("obs_norm.clip_max", nil, []float32{n.Clip}))
		e.node("Clip", []string{"obs_norm.scaled", "obs_norm.clip_min", "obs_norm.clip_max"}, ObsNormOut, "obs_norm.clip")
	} else {
		e.node("Clip", []string{"obs_norm.scaled"}, ObsNormOut, "obs_norm.clip", floatAttr("min", -n.Clip), floatAttr("max", n.Clip))
	}
	g.Node = append(e.g.Node, g.Node...)
	g.Initializer = append(g.Initializer, e.g.Initializer...)
	m.MetadataProps = slices.DeleteFunc(m.MetadataProps, func(p *onnxpb.StringStringEntryProto) bool { return p.GetKey() == KeyObsNorm })
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(KeyObsNorm),
		Value: proto.String(fmt.Sprintf("clip:%g", n.Clip))})
	return nil
}

// PrependObsNormBytes is PrependObsNorm on a serialised model, returning the new one.
func PrependObsNormBytes(model []byte, input string, n ObsNorm) ([]byte, error) {
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(model, &m); err != nil {
		return nil, fmt.Errorf("%w: not a readable ONNX model: %v", ErrConfig, err)
	}
	if err := PrependObsNorm(&m, input, n); err != nil {
		return nil, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&m)
	if err != nil {
		return nil, fmt.Errorf("models: marshalling the ONNX model: %w", err)
	}
	return b, nil
}

// opset is m's ai.onnx operator set version (0 when it imports none).
func opset(m *onnxpb.ModelProto) int64 {
	for _, o := range m.GetOpsetImport() {
		if d := o.GetDomain(); d == "" || d == "ai.onnx" {
			return o.GetVersion()
		}
	}
	return 0
}

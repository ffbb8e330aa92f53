package models

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Opset is the ONNX operator set version Export writes (ai.onnx domain).
const Opset = 17

// Names of the exported model's input and outputs, and of its dynamic batch dimension.
const (
	InputObs     = "obs"
	OutputLogits = "logits"  // categorical head, [batch, n]
	OutputMean   = "mean"    // Gaussian head, [batch, d]
	OutputLogStd = "log_std" // Gaussian head, [batch, d]
	OutputValue  = "value"   // [batch, 1]
	BatchDim     = "batch"
)

// Export writes params' architecture and current values as a serialised ONNX model (see
// ExportModel) that ONNX Runtime runs with the numbers of the gorgonia forward.
func Export(params *Params, version int64) ([]byte, error) {
	m, err := ExportModel(params, version)
	if err != nil {
		return nil, err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("models: marshalling the ONNX model: %w", err)
	}
	return b, nil
}

// ExportModel builds the ONNX model of params' architecture with its current values as
// initialisers named like the parameters: opset Opset, IR version 8, input "obs"
// [batch, obs_shape...] float32 with a dynamic "batch" dimension, outputs "logits" and "value"
// (categorical) or "mean", "log_std" and "value" (Gaussian), and the towerrl.* metadata of the
// config's Spec with towerrl.version set to version. Linear layers are Gemm with transB=0 over
// the [in, out] weights; the CNN's x/255 is a Div node. The values are copied: params may change
// afterwards.
func ExportModel(params *Params, version int64) (*onnxpb.ModelProto, error) {
	if params == nil {
		return nil, fmt.Errorf("%w: ExportModel of nil parameters", ErrConfig)
	}
	a := params.arch
	spec := a.cfg.Spec
	spec.Version = version
	e := &exporter{}
	for i, name := range params.names {
		e.g.Initializer = append(e.g.Initializer, floatTensor(name, params.shapes[i], params.data[params.offs[i]:params.offs[i+1]]))
	}
	x := e.path(a.trunk, InputObs, "trunk")
	first := OutputLogits
	if a.logStd {
		first = OutputMean
	}
	e.rename(e.path(a.policy, x, "policy"), first)
	e.rename(e.path(a.value, x, "value"), OutputValue)
	d := int64(spec.ActionDim())
	e.output(first, d)
	if a.logStd {
		e.node("Shape", []string{OutputMean}, "mean_shape", "log_std.shape")
		e.node("Expand", []string{"actor_logstd", "mean_shape"}, OutputLogStd, "log_std.expand")
		e.output(OutputLogStd, d)
	}
	e.output(OutputValue, 1)
	dims := []*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: BatchDim}}}
	for _, s := range spec.ObsShape {
		dims = append(dims, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(s)}})
	}
	e.g.Input = []*onnxpb.ValueInfoProto{valueInfo(InputObs, dims)}
	e.g.Name = proto.String("towerrl_policy")

	return modelProto(&e.g, spec, "models/"+string(a.cfg.Arch),
		fmt.Sprintf("towerrl %s %s policy; linear weights are [in, out] (Gemm transB=0)", a.cfg.Arch, spec.Head)), nil
}

// exporter accumulates a GraphProto.
type exporter struct {
	g onnxpb.GraphProto
	n int // intermediate value counter
}

func (e *exporter) node(opType string, inputs []string, output, name string, attrs ...*onnxpb.AttributeProto) {
	e.g.Node = append(e.g.Node, &onnxpb.NodeProto{
		OpType:    proto.String(opType),
		Name:      proto.String(name),
		Input:     inputs,
		Output:    []string{output},
		Attribute: attrs,
	})
}

// rename makes the node that produced value old produce value name instead.
func (e *exporter) rename(old, name string) {
	for _, n := range e.g.Node {
		for i, o := range n.Output {
			if o == old {
				n.Output[i] = name
			}
		}
	}
}

// path appends ops applied to value x and returns the value holding the result.
func (e *exporter) path(ops []op, x, scope string) string {
	for _, o := range ops {
		e.n++
		out := fmt.Sprintf("%s.%d", scope, e.n)
		switch o.kind {
		case opScale:
			e.g.Initializer = append(e.g.Initializer, floatTensor("const.255", nil, []float32{255}))
			e.node("Div", []string{x, "const.255"}, out, out+".div")
		case opFlatten:
			e.node("Flatten", []string{x}, out, out+".flatten", intAttr("axis", 1))
		case opLinear:
			e.node("Gemm", []string{x, o.name + ".weight", o.name + ".bias"}, out, o.name,
				floatAttr("alpha", 1), floatAttr("beta", 1), intAttr("transA", 0), intAttr("transB", 0))
		case opConv:
			k, s := int64(o.k), int64(o.s)
			e.node("Conv", []string{x, o.name + ".weight", o.name + ".bias"}, out, o.name,
				intsAttr("kernel_shape", k, k), intsAttr("strides", s, s), intsAttr("pads", 0, 0, 0, 0),
				intsAttr("dilations", 1, 1), intAttr("group", 1))
		case opAct:
			t := "Tanh"
			if o.act == ReLU {
				t = "Relu"
			}
			e.node(t, []string{x}, out, out+"."+string(o.act))
		}
		x = out
	}
	return x
}

func (e *exporter) output(name string, row int64) {
	e.g.Output = append(e.g.Output, valueInfo(name, batchDims(row)))
}

// modelProto wraps graph as a towerrl policy model: opset Opset, the IR version onnxpb knows,
// the towerrl.* metadata of spec (its Version is the model's), made by producer.
func modelProto(graph *onnxpb.GraphProto, spec head.Spec, producer, doc string) *onnxpb.ModelProto {
	meta := spec.Metadata()
	var props []*onnxpb.StringStringEntryProto
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		props = append(props, &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(meta[k])})
	}
	return &onnxpb.ModelProto{
		IrVersion:       proto.Int64(int64(onnxpb.Version_IR_VERSION)),
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}},
		ProducerName:    proto.String("towerrl"),
		ProducerVersion: proto.String(producer),
		ModelVersion:    proto.Int64(spec.Version),
		DocString:       proto.String(doc),
		Graph:           graph,
		MetadataProps:   props,
	}
}

func valueInfo(name string, dims []*onnxpb.TensorShapeProto_Dimension) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{
		Name: proto.String(name),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)),
			Shape:    &onnxpb.TensorShapeProto{Dim: dims},
		}}},
	}
}

// floatTensor is a float32 TensorProto with little-endian raw data.
func floatTensor(name string, shape []int, data []float32) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	dims := make([]int64, len(shape))
	for i, d := range shape {
		dims[i] = int64(d)
	}
	return &onnxpb.TensorProto{
		Name:     proto.String(name),
		Dims:     dims,
		DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)),
		RawData:  raw,
	}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func floatAttr(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

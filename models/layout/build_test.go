package layout

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// builder makes synthetic ONNX graphs named as torch 1.13's exporter names them: nodes
// "/module/path/Op", their outputs "/module/path/Op_output_0", parameters "module.path.weight".
type builder struct {
	g     *onnxpb.GraphProto
	rng   *rand.Rand
	count map[string]int
	meta  map[string]string
}

func newBuilder() *builder {
	return &builder{g: &onnxpb.GraphProto{Name: proto.String("main_graph")}, rng: rand.New(rand.NewPCG(1, 2)), count: map[string]int{}}
}

func valueInfoOf(name string, elem onnxpb.TensorProto_DataType, dims ...any) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch v := d.(type) {
		case int:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(v)}
		case string:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: v}
		}
		sh.Dim = append(sh.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(elem)), Shape: sh}}}}
}

// input declares a graph input; dims are ints or dim_param strings ("batch_size").
func (b *builder) input(name string, elem onnxpb.TensorProto_DataType, dims ...any) string {
	b.g.Input = append(b.g.Input, valueInfoOf(name, elem, dims...))
	return name
}

func (b *builder) output(name string, elem onnxpb.TensorProto_DataType, dims ...any) {
	b.g.Output = append(b.g.Output, valueInfoOf(name, elem, dims...))
}

func floatTensor(name string, vals []float32, dims ...int64) *onnxpb.TensorProto {
	raw := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: dims, RawData: raw}
}

func intTensor(name string, vals []int64, dims ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: dims, Int64Data: vals}
}

// param adds a float initializer: vals, or random ones in [-0.5, 0.5) when vals is nil.
func (b *builder) param(name string, vals []float32, dims ...int64) string {
	if vals == nil {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		vals = make([]float32, n)
		for i := range vals {
			vals[i] = float32(b.rng.Float64() - 0.5)
		}
	}
	b.g.Initializer = append(b.g.Initializer, floatTensor(name, vals, dims...))
	return name
}

// constant adds a Constant node in scope and returns its output.
func (b *builder) constant(scope string, t *onnxpb.TensorProto) string {
	t.Name = nil
	return b.node(scope, "Constant", nil, attrT("value", t))
}

// node adds an op in scope ("/policy" or "" for none) and returns its first output, named as
// torch names it. outputs > 1 get _output_1, ...
func (b *builder) node(scope, op string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	return b.nodeN(scope, op, 1, inputs, attrs...)[0]
}

func (b *builder) nodeN(scope, op string, nOut int, inputs []string, attrs ...*onnxpb.AttributeProto) []string {
	key := scope + "/" + op
	name := key
	if k := b.count[key]; k > 0 {
		name = fmt.Sprintf("%s_%d", key, k)
	}
	b.count[key]++
	outs := make([]string, nOut)
	for i := range outs {
		outs[i] = fmt.Sprintf("%s_output_%d", name, i)
	}
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(op), Input: inputs, Output: outs, Attribute: attrs})
	return outs
}

// rename makes the node writing old write name instead (a named or auto-numbered output).
func (b *builder) rename(old, name string) string {
	for _, n := range b.g.Node {
		for i, o := range n.Output {
			if o == old {
				n.Output[i] = name
			}
		}
		for i, in := range n.Input {
			if in == old {
				n.Input[i] = name
			}
		}
	}
	return name
}

// linear adds a torch Linear as Gemm: scope "/policy/action_net", params "policy.action_net".
func (b *builder) linear(scope, params, x string, in, out int) string {
	w := b.param(params+".weight", nil, int64(out), int64(in))
	bias := b.param(params+".bias", nil, int64(out))
	return b.node(scope, "Gemm", []string{x, w, bias}, attrF("alpha", 1), attrF("beta", 1), attrI("transB", 1))
}

func (b *builder) model() *onnxpb.ModelProto {
	m := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("pytorch"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:        b.g,
	}
	for k, v := range b.meta {
		m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(k), Value: proto.String(v)})
	}
	return m
}

func attrI(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func attrIs(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func attrF(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func attrS(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

func attrT(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

func scalar(v float32) *onnxpb.TensorProto { return floatTensor("", []float32{v}) }

const (
	f32 = onnxpb.TensorProto_FLOAT
	i64 = onnxpb.TensorProto_INT64
)

// sb3Trunk is SB3's features_extractor (obs.float() and Flatten) and mlp_extractor with
// separate policy and value nets of two tanh layers; it returns the latent policy and value.
func (b *builder) sb3Trunk(obs string, obsDim, hidden int) (pi, vf string) {
	x := b.node("/policy/features_extractor", "Cast", []string{obs}, attrI("to", 1))
	x = b.node("/policy/features_extractor", "Flatten", []string{x}, attrI("axis", 1))
	pi, vf = x, x
	for _, net := range []string{"policy_net", "value_net"} {
		h := x
		for k, in := range []int{obsDim, hidden} {
			scope := fmt.Sprintf("/policy/mlp_extractor/%s/%s.%d", net, net, 2*k)
			h = b.linear(scope, fmt.Sprintf("policy.mlp_extractor.%s.%d", net, 2*k), h, in, hidden)
			h = b.node(fmt.Sprintf("/policy/mlp_extractor/%s/%s.%d", net, net, 2*k+1), "Tanh", []string{h})
		}
		if net == "policy_net" {
			pi = h
		} else {
			vf = h
		}
	}
	return pi, vf
}

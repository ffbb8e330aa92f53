// Package bindtest builds small ONNX policies and reads the fixtures that the tests of bind,
// batcher and dataset share: a linear CartPole policy that balances (with a dynamic batch, or
// its batch fixed and folded so that no rewrite frees it), a constant policy whose every sample
// says which version made it, and helpers to write graphs, edit weights and read a log. It is
// for tests only; every function that can fail takes the test and fails it.
package bindtest

import (
	"errors"
	"math"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// ForeignDir holds, relative to a package folder one level below the repository root, the
// policies exported the way the popular RL libraries do it (scripts/gen_fixtures_foreign.py;
// see its README.md), each with the return it earns in PyTorch.
const ForeignDir = "../testdata/foreign"

// ValueInfo declares a float32 tensor; each dimension is an int size or a string symbol.
func ValueInfo(name string, dims ...any) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case string:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		case int:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: sh}}}}
}

// FloatTensor is a float32 initializer.
func FloatTensor(name string, dims []int64, vals []float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: vals}
}

// Node is a node of the default domain named after its first output.
func Node(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Input: ins, Output: outs, Name: proto.String(outs[0]), Attribute: attrs}
}

// IntAttr is an integer attribute.
func IntAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// Marshal writes g as a model of IR version 8 importing opset 13.
func Marshal(t testing.TB, g *onnxpb.GraphProto) []byte {
	t.Helper()
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(13)}}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The weights of a linear CartPole policy that balances: push the way the pole falls.
var (
	CartPoleW  = []float32{0, 0, 0, 0, -10, 10, -1, 1} // [4, 2]: logits from the angle and its velocity
	CartPoleB  = []float32{0, 0}
	CartPoleWv = []float32{1, 2, 3, 4}
	CartPoleBv = []float32{0.5}
)

// LinearInits are the linear CartPole policy's initializers w, b (logits) and wv, bv (value).
func LinearInits() []*onnxpb.TensorProto {
	return []*onnxpb.TensorProto{
		FloatTensor("w", []int64{4, 2}, CartPoleW), FloatTensor("b", []int64{2}, CartPoleB),
		FloatTensor("wv", []int64{4, 1}, CartPoleWv), FloatTensor("bv", []int64{1}, CartPoleBv),
	}
}

// LinearPolicy is the linear CartPole policy with a dynamic batch.
func LinearPolicy(t testing.TB) []byte {
	return Marshal(t, &onnxpb.GraphProto{
		Name:        proto.String("linear"),
		Input:       []*onnxpb.ValueInfoProto{ValueInfo("obs", "batch", 4)},
		Output:      []*onnxpb.ValueInfoProto{ValueInfo("logits", "batch", 2), ValueInfo("value", "batch", 1)},
		Node:        []*onnxpb.NodeProto{Node("Gemm", []string{"obs", "w", "b"}, []string{"logits"}), Node("Gemm", []string{"obs", "wv", "bv"}, []string{"value"})},
		Initializer: LinearInits(),
	})
}

// FoldedPolicy is the same policy with its batch fixed at 1 and folded into the features by
// Flatten(axis=0), which no rewrite can free: it runs one row per call.
func FoldedPolicy(t testing.TB) []byte {
	return Marshal(t, &onnxpb.GraphProto{
		Name:   proto.String("folded"),
		Input:  []*onnxpb.ValueInfoProto{ValueInfo("obs", 1, 4)},
		Output: []*onnxpb.ValueInfoProto{ValueInfo("logits", 1, 2), ValueInfo("value", 1, 1)},
		Node: []*onnxpb.NodeProto{
			Node("Flatten", []string{"obs"}, []string{"flat"}, IntAttr("axis", 0)),
			Node("Gemm", []string{"flat", "w", "b"}, []string{"logits"}), Node("Gemm", []string{"flat", "wv", "bv"}, []string{"value"}),
		},
		Initializer: LinearInits(),
	})
}

// ConstPolicy builds a CartPole-shaped ONNX policy that ignores its input: its value output is
// the version, and its logits favour action version%2 by 20 nats. So every sample says which
// policy produced it.
func ConstPolicy(t testing.TB, version int64) []byte {
	t.Helper()
	bias := []float32{10, -10}
	if version%2 == 1 {
		bias = []float32{-10, 10}
	}
	return Marshal(t, &onnxpb.GraphProto{
		Name:   proto.String("const"),
		Input:  []*onnxpb.ValueInfoProto{ValueInfo("obs", "batch", 4)},
		Output: []*onnxpb.ValueInfoProto{ValueInfo("logits", "batch", 2), ValueInfo("value", "batch", 1)},
		Node:   []*onnxpb.NodeProto{Node("Gemm", []string{"obs", "w", "b"}, []string{"logits"}), Node("Gemm", []string{"obs", "wv", "bv"}, []string{"value"})},
		Initializer: []*onnxpb.TensorProto{
			FloatTensor("w", []int64{4, 2}, make([]float32, 8)), FloatTensor("b", []int64{2}, bias),
			FloatTensor("wv", []int64{4, 1}, make([]float32, 4)), FloatTensor("bv", []int64{1}, []float32{float32(version)}),
		},
	})
}

// Observed returns a logger that records, from info level, into the returned logs.
func Observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	return zap.New(core), logs
}

// Logged reports whether a message or a string field of logs contains text.
func Logged(logs *observer.ObservedLogs, text string) bool {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, text) {
			return true
		}
		for _, f := range e.Context {
			if strings.Contains(f.String, text) {
				return true
			}
		}
	}
	return false
}

// ReadNpy reads a .npy file.
func ReadNpy(t testing.TB, path string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Parse reads model bytes into a message.
func Parse(t testing.TB, model []byte) *onnxpb.ModelProto {
	t.Helper()
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(model, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// NegateInitializers returns model with the named initializers' values negated.
func NegateInitializers(t testing.TB, model []byte, names ...string) []byte {
	t.Helper()
	m := Parse(t, model)
	done := 0
	for _, init := range m.GetGraph().GetInitializer() {
		for _, name := range names {
			if init.GetName() != name {
				continue
			}
			vals, err := FloatValues(init)
			if err != nil {
				t.Fatal(err)
			}
			for i := range vals {
				vals[i] = -vals[i]
			}
			init.RawData, init.FloatData = nil, vals
			done++
		}
	}
	if done != len(names) {
		t.Fatalf("negated %d of the initializers %v", done, names)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FloatValues decodes a float32 initializer.
func FloatValues(init *onnxpb.TensorProto) ([]float32, error) {
	if raw := init.GetRawData(); len(raw) > 0 {
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
		}
		return out, nil
	}
	if init.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
		return nil, errors.New("not float32")
	}
	return append([]float32(nil), init.GetFloatData()...), nil
}

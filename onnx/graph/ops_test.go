package graph

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Small ONNX graphs written here, one per operator pattern, checked against ONNX Runtime
// (forward) and finite differences (gradients with respect to every initializer).

func mkNode(op string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(out[0] + "_" + op), Input: in, Output: out, Attribute: attrs}
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func aFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func aString(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

func floatInit(rng *rand.Rand, name string, dims ...int64) *onnxpb.TensorProto {
	n := 1
	for _, d := range dims {
		n *= int(d)
	}
	vals := make([]float32, n)
	for k := range vals {
		vals[k] = float32(rng.NormFloat64() * 0.5)
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: vals}
}

func intInit(name string, vals ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: []int64{int64(len(vals))}, DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: vals}
}

func valueInfo(name string, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for k, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if k == 0 {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}}
}

type testModel struct {
	opset   int64
	input   []int64 // row shape (without the batch)
	outputs map[string][]int64
	order   []string
	inits   []*onnxpb.TensorProto
	nodes   []*onnxpb.NodeProto
}

func (tm testModel) bytes(t testing.TB) []byte {
	t.Helper()
	g := &onnxpb.GraphProto{Name: proto.String("test"), Node: tm.nodes, Initializer: tm.inits,
		Input: []*onnxpb.ValueInfoProto{valueInfo("x", append([]int64{-1}, tm.input...)...)}}
	for _, o := range tm.order {
		g.Output = append(g.Output, valueInfo(o, append([]int64{-1}, tm.outputs[o]...)...))
	}
	mp := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g, ProducerName: proto.String("towerrl-test"),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(tm.opset)}}}
	data, err := proto.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func opModels() map[string]testModel {
	rng := rand.New(rand.NewPCG(9, 9))
	out := func(kv ...any) (map[string][]int64, []string) {
		m := map[string][]int64{}
		var order []string
		for k := 0; k < len(kv); k += 2 {
			m[kv[k].(string)] = kv[k+1].([]int64)
			order = append(order, kv[k].(string))
		}
		return m, order
	}
	models := map[string]testModel{}
	add := func(name string, tm testModel, kv ...any) {
		tm.outputs, tm.order = out(kv...)
		models[name] = tm
	}
	add("conv_pad_stride", testModel{opset: 13, input: []int64{2, 9, 9},
		inits: []*onnxpb.TensorProto{floatInit(rng, "W", 4, 2, 3, 3), floatInit(rng, "B", 4)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Conv", []string{"x", "W", "B"}, []string{"c"}, aInts("pads", 1, 1, 1, 1), aInts("strides", 2, 2), aInts("kernel_shape", 3, 3)),
			mkNode("Tanh", []string{"c"}, []string{"y"}),
		}}, "y", []int64{4, 5, 5})
	add("conv_dilated", testModel{opset: 13, input: []int64{2, 9, 8},
		inits: []*onnxpb.TensorProto{floatInit(rng, "W", 3, 2, 3, 3)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Conv", []string{"x", "W"}, []string{"y"}, aInts("dilations", 2, 2), aInts("pads", 2, 2, 2, 2)),
		}}, "y", []int64{3, 9, 8})
	add("conv_same_upper", testModel{opset: 13, input: []int64{2, 7, 6},
		inits: []*onnxpb.TensorProto{floatInit(rng, "W", 3, 2, 3, 5), floatInit(rng, "B", 3)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Conv", []string{"x", "W", "B"}, []string{"y"}, aString("auto_pad", "SAME_UPPER")),
		}}, "y", []int64{3, 7, 6})
	add("gemm_alpha_beta", testModel{opset: 13, input: []int64{5},
		inits: []*onnxpb.TensorProto{floatInit(rng, "W", 5, 6), floatInit(rng, "C", 1, 6), floatInit(rng, "W2", 3, 6)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Gemm", []string{"x", "W", "C"}, []string{"h"}, aFloat("alpha", 0.5), aFloat("beta", 2)),
			mkNode("Sigmoid", []string{"h"}, []string{"s"}),
			mkNode("Gemm", []string{"s", "W2"}, []string{"y"}, aInt("transB", 1)),
		}}, "y", []int64{3})
	add("softmax_opset11", testModel{opset: 11, input: []int64{3, 4},
		nodes: []*onnxpb.NodeProto{
			mkNode("Softmax", []string{"x"}, []string{"p"}, aInt("axis", 1)),
			mkNode("LogSoftmax", []string{"x"}, []string{"lp"}),
			mkNode("Softmax", []string{"x"}, []string{"q"}, aInt("axis", 2)),
		}}, "p", []int64{3, 4}, "lp", []int64{3, 4}, "q", []int64{3, 4})
	add("softmax_opset13", testModel{opset: 13, input: []int64{3, 4},
		inits: []*onnxpb.TensorProto{floatInit(rng, "S", 3, 4)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Mul", []string{"x", "S"}, []string{"z"}),
			mkNode("Softmax", []string{"z"}, []string{"p"}, aInt("axis", 1)),
			mkNode("LogSoftmax", []string{"z"}, []string{"lp"}),
		}}, "p", []int64{3, 4}, "lp", []int64{3, 4})
	add("matmul_3d_broadcast", testModel{opset: 13, input: []int64{3, 4},
		inits: []*onnxpb.TensorProto{floatInit(rng, "W", 4, 5), floatInit(rng, "b", 5), floatInit(rng, "m", 3, 1), floatInit(rng, "d", 1, 5)},
		nodes: []*onnxpb.NodeProto{
			mkNode("MatMul", []string{"x", "W"}, []string{"h"}),
			mkNode("Add", []string{"h", "b"}, []string{"h1"}),
			mkNode("Mul", []string{"h1", "m"}, []string{"h2"}),
			mkNode("Exp", []string{"d"}, []string{"ed"}),
			mkNode("Div", []string{"h2", "ed"}, []string{"h3"}),
			mkNode("Neg", []string{"h3"}, []string{"h4"}),
			mkNode("Sub", []string{"m", "h4"}, []string{"y"}),
		}}, "y", []int64{3, 5})
	add("batched_matmul", testModel{opset: 13, input: []int64{2, 3},
		inits: []*onnxpb.TensorProto{floatInit(rng, "W", 3, 4)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Unsqueeze", []string{"x"}, []string{"xu"}, aInts("axes", 1)),
			mkNode("Reshape", []string{"xu", "s1"}, []string{"xr"}),
		}}, "y", []int64{4, 3})
	add("shapes_opset11", testModel{opset: 11, input: []int64{2, 3},
		inits: []*onnxpb.TensorProto{floatInit(rng, "E", 1, 1, 4), intInit("s", 0, -1, 2), intInit("es", 1, 3, 4)},
		nodes: []*onnxpb.NodeProto{
			mkNode("Flatten", []string{"x"}, []string{"f"}),
			mkNode("Unsqueeze", []string{"f"}, []string{"u"}, aInts("axes", 1, -1)),
			mkNode("Squeeze", []string{"u"}, []string{"q"}, aInts("axes", 1, 3)),
			mkNode("Reshape", []string{"q", "s"}, []string{"r"}),
			mkNode("Concat", []string{"r", "r"}, []string{"c"}, aInt("axis", -1)),
			mkNode("Expand", []string{"E", "es"}, []string{"e"}),
			mkNode("Add", []string{"c", "e"}, []string{"y"}),
			mkNode("Identity", []string{"E"}, []string{"Eu"}),
			mkNode("Shape", []string{"c"}, []string{"sc"}),
			mkNode("Expand", []string{"Eu", "sc"}, []string{"ee"}),
			mkNode("Relu", []string{"ee"}, []string{"z"}),
		}}, "y", []int64{3, 4}, "z", []int64{3, 4})
	// batched_matmul: x [B,2,3] -> [B,2,3] times its own projection, batched.
	bm := models["batched_matmul"]
	bm.inits = append(bm.inits, intInit("s1", 0, 2, 3), intInit("s2", 0, 4, 2))
	bm.nodes = []*onnxpb.NodeProto{
		mkNode("Unsqueeze", []string{"x"}, []string{"xu"}, aInts("axes", 1)),
		mkNode("Reshape", []string{"xu", "s1"}, []string{"xr"}),
		mkNode("MatMul", []string{"xr", "W"}, []string{"p"}),
		mkNode("Tanh", []string{"p"}, []string{"pt"}),
		mkNode("Reshape", []string{"pt", "s2"}, []string{"pr"}),
		mkNode("MatMul", []string{"pr", "xr"}, []string{"y"}),
	}
	bm.opset = 11
	models["batched_matmul"] = bm
	return models
}

// TestOpsAgainstORT checks each small model's forward pass against ONNX Runtime and its
// gradients against finite differences.
func TestOpsAgainstORT(t *testing.T) {
	const batch = 3
	for name, tm := range opModels() {
		t.Run(name, func(t *testing.T) {
			data := tm.bytes(t)
			m, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			row := 1
			for _, d := range tm.input {
				row *= int(d)
			}
			in := &npy.Array{Shape: append([]int{batch}, make([]int, len(tm.input))...)}
			for k, d := range tm.input {
				in.Shape[k+1] = int(d)
			}
			for range batch * row {
				in.F32 = append(in.F32, float32(rng.NormFloat64()))
			}
			want := ortRun(t, data, in)
			p := m.NewParams()
			gr, err := m.Build(G.NewGraph(), p, batch)
			if err != nil {
				t.Fatal(err)
			}
			got := forward(t, gr, firstRows(in, batch, tensor.Float32))
			for k, o := range tm.order {
				if len(got[k]) != len(want[k]) {
					t.Fatalf("output %q: %d values (shape %v), ORT %d", o, len(got[k]), gr.Outputs()[k].Shape(), len(want[k]))
				}
				if d := maxAbsDiff(got[k], want[k]); d > 1e-5 {
					t.Errorf("output %q: max abs error vs ORT %.3g", o, d)
				} else if testing.Verbose() {
					fmt.Printf("op %s %s: max abs error vs ORT %.3g\n", name, o, d)
				}
			}
			if p.Len() == 0 {
				return
			}
			p64, _ := p.As(tensor.Float64)
			gr64, loss, grads := lossGraph(t, m, p64, batch)
			if err := G.Let(gr64.Inputs()[0], firstRows(in, batch, tensor.Float64)); err != nil {
				t.Fatal(err)
			}
			vm := G.NewTapeMachine(gr64.ExprGraph())
			defer vm.Close()
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			for k, pname := range p64.Names() {
				an := valueFloats(t, grads[k].Value())
				v, _ := p64.Value(pname)
				vals := v.Data().([]float64)
				for _, i := range []int{0, len(vals) / 2, len(vals) - 1} {
					orig := vals[i]
					var f [2]float64
					for s, eps := range []float64{1e-6, -1e-6} {
						vals[i] = orig + eps
						vm.Reset()
						if err := vm.RunAll(); err != nil {
							t.Fatal(err)
						}
						f[s] = scalarOf(t, loss)
					}
					vals[i] = orig
					fd := (f[0] - f[1]) / 2e-6
					if e := math.Abs(fd-an[i]) / math.Max(1, math.Abs(fd)); e > 1e-5 {
						t.Errorf("d loss / d %s[%d]: analytic %g, finite differences %g", pname, i, an[i], fd)
					}
				}
			}
		})
	}
}

package models

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// criticHost is a small graph for AddCritic: observations "obs" [batch, 2] and a node output
// "feat" = Relu(x) of an input "x" [batch, 1, 3] (a recurrent core's features keep a
// sequence axis), and the graph's own output "feat".
func criticHost() *onnxpb.ModelProto {
	dim := func(v int64) *onnxpb.TensorShapeProto_Dimension {
		if v < 0 {
			return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: BatchDim}}
		}
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
	}
	e := &exporter{g: onnxpb.GraphProto{Name: proto.String("host")}}
	e.g.Input = append(e.g.Input, valueInfo("obs", []*onnxpb.TensorShapeProto_Dimension{dim(-1), dim(2)}),
		valueInfo("x", []*onnxpb.TensorShapeProto_Dimension{dim(-1), dim(1), dim(3)}))
	e.node("Relu", []string{"x"}, "feat", "relu")
	e.g.Output = append(e.g.Output, valueInfo("feat", []*onnxpb.TensorShapeProto_Dimension{dim(-1), dim(1), dim(3)}))
	return &onnxpb.ModelProto{IrVersion: proto.Int64(int64(onnxpb.Version_IR_VERSION)), Graph: &e.g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(Opset)}}}
}

// initializer returns the float32 initializer name of m.
func initializer(t *testing.T, m *onnxpb.ModelProto, name string) []float32 {
	t.Helper()
	for _, in := range m.GetGraph().GetInitializer() {
		if in.GetName() == name {
			raw := in.GetRawData()
			out := make([]float32, len(raw)/4)
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
			return out
		}
	}
	t.Fatalf("no initializer %q", name)
	return nil
}

// TestAddCritic: the critic AddCritic appends computes, in ONNX Runtime, the tanh MLP of its
// initializers over each row's inputs set side by side (a node output of rank 3 flattened,
// then the observations), worked out here in float64 from the same initializers; one input
// alone gives the same network over that input.
func TestAddCritic(t *testing.T) {
	const batch = 5
	rng := rand.New(rand.NewPCG(3, 4))
	obs, x := make([]float32, batch*2), make([]float32, batch*3)
	for i := range obs {
		obs[i] = float32(rng.NormFloat64())
	}
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, tc := range []struct {
		name   string
		inputs []string
		row    func(i int) []float64 // the critic's input row i
	}{
		{"features and observations", []string{"feat", "obs"}, func(i int) []float64 {
			var r []float64
			for _, v := range x[3*i : 3*i+3] {
				r = append(r, math.Max(float64(v), 0))
			}
			for _, v := range obs[2*i : 2*i+2] {
				r = append(r, float64(v))
			}
			return r
		}},
		{"observations", []string{"obs"}, func(i int) []float64 {
			return []float64{float64(obs[2*i]), float64(obs[2*i+1])}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := criticHost()
			dim := len(tc.row(0))
			hidden := []int{4, 3}
			if err := AddCritic(m, tc.inputs, dim, hidden, rand.New(rand.NewPCG(1, 2))); err != nil {
				t.Fatal(err)
			}
			// The biases start at 0; other values test more.
			for _, in := range m.GetGraph().GetInitializer() {
				if strings.HasSuffix(in.GetName(), ".bias") {
					raw := in.GetRawData()
					for i := 0; i < len(raw); i += 4 {
						binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(float32(rng.NormFloat64())))
					}
				}
			}
			data, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			s, err := onnx.New(context.Background(), data, onnx.Config{MaxBatch: batch})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for k, in := range s.Inputs() {
				src, shape := obs, []int64{batch, 2}
				if in.Name == "x" {
					src, shape = x, []int64{batch, 1, 3}
				}
				if _, err := onnx.Feed(s, k, shape, src); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Run(batch); err != nil {
				t.Fatal(err)
			}
			k, err := s.OutputIndex(CriticOutput)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := onnx.Output[float32](s, k)
			widths := append(append([]int{dim}, hidden...), 1)
			for i := range batch {
				h := tc.row(i)
				for l := range len(widths) - 1 {
					layer := fmt.Sprintf("%s.%d", CriticPrefix, l)
					w, b := initializer(t, m, layer+".weight"), initializer(t, m, layer+".bias")
					next := make([]float64, widths[l+1])
					for o := range next {
						next[o] = float64(b[o])
						for j, v := range h {
							next[o] += v * float64(w[j*widths[l+1]+o]) // [in, out]
						}
						if l < len(widths)-2 {
							next[o] = math.Tanh(next[o])
						}
					}
					h = next
				}
				if d := math.Abs(float64(got[i]) - h[0]); d > 1e-5 {
					t.Errorf("row %d: ONNX Runtime's value %.6g, the MLP's %.6g", i, got[i], h[0])
				}
			}
		})
	}
	for _, bad := range []struct {
		inputs []string
		want   string
	}{{nil, "no input tensor"}, {[]string{"feat", "nope"}, `no input or node output "nope"`}} {
		if err := AddCritic(criticHost(), bad.inputs, 5, []int{4}, rand.New(rand.NewPCG(1, 2))); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("AddCritic(%q): error %v, want one saying %q", bad.inputs, err, bad.want)
		}
	}
}

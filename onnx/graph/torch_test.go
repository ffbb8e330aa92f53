package graph

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Models exported by torch.onnx.export (scripts/gen_fixtures_graph.py, testdata/graph_*): the
// forms torch 1.13 emits for LayerNorm (decomposed below opset 17), SiLU, GELU, ELU,
// LeakyReLU, SELU, Softplus, clamp, a baked-in VecNormalize, uint8 pixels, nn.LSTM and
// nn.GRU with their state inputs. Each matches PyTorch's outputs and its gradients match
// finite differences.
var torchFixtures = []string{"layernorm_opset13", "layernorm_opset17", "activations", "vecnormalize", "uint8_cnn", "lstm", "gru"}

func TestTorchFixtures(t *testing.T) {
	for _, name := range torchFixtures {
		t.Run(name, func(t *testing.T) {
			data := readFile(t, "graph_"+name+".onnx")
			m, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			c := opCase{}
			var feeds [][]float64
			for _, in := range m.Inputs() {
				a, err := npy.ReadFile(filepath.Join(fixtures, "graph_"+name+"."+in.Name+".npy"))
				if err != nil {
					t.Fatal(err)
				}
				p := port{name: in.Name, elem: in.ElemType}
				for _, d := range a.Shape {
					p.shape = append(p.shape, int64(d))
				}
				c.inputs = append(c.inputs, p)
				feeds = append(feeds, npyFloats(a))
			}
			c.gen = func(_ *rand.Rand, k, _ int) []float64 { return feeds[k] }
			gr := buildCase(t, m, c, m.NewParams(), 1, nil)
			var ins []*tensor.Dense
			for k, in := range c.inputs {
				ins = append(ins, denseOf(tensor.Float32, in.concrete(1), feeds[k]))
			}
			got := forward(t, gr, ins...)
			var outs []string
			for k, o := range m.Outputs() {
				want := npyFloats(readNPY(t, "graph_"+name+"."+o+".npy"))
				if len(want) != len(got[k]) {
					t.Fatalf("%s: %d values, PyTorch %d", o, len(got[k]), len(want))
				}
				worst := 0.0
				for i := range want {
					worst = math.Max(worst, relErr(got[k][i], want[i]))
				}
				if worst > 1e-5 {
					t.Errorf("%s: worst error vs PyTorch %.3g > 1e-5", o, worst)
				}
				if testing.Verbose() {
					fmt.Printf("torch %s %s: worst error vs PyTorch %.3g\n", name, o, worst)
				}
				outs = append(outs, o)
			}
			checkGradients(t, m, c, 1, feeds, outs)
		})
	}
	// The normaliser's statistics (mean, and the folded sqrt(var + eps)) are frozen by
	// default, the layers train.
	m, err := Parse(readFile(t, "graph_vecnormalize.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"obs_rms_mean", "onnx::Div_28"}, m.NewParams().Frozen()); diff != "" {
		t.Errorf("vecnormalize frozen (-want +got):\n%s", diff)
	}
	if in := m.Inputs()[0]; in.ElemType != onnxpb.TensorProto_FLOAT {
		t.Errorf("input type %v", in.ElemType)
	}
	if in := parseFixture(t, "graph_uint8_cnn.onnx").Inputs()[0]; in.ElemType != onnxpb.TensorProto_UINT8 {
		t.Errorf("uint8 input reported as %v", in.ElemType)
	}
}

func parseFixture(t *testing.T, file string) *Model {
	t.Helper()
	m, err := Parse(readFile(t, file))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

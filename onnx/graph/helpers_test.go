package graph

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/npy"
)

const fixtures = "../../testdata"

// fixture is a PyTorch-exported model in testdata with its input batch and PyTorch's outputs.
type fixture struct {
	name    string
	input   string
	outputs []string
	opset   int64
}

var allFixtures = []fixture{
	{"mlp_tanh", "obs", []string{"logits", "value"}, 13},
	{"gaussian_relu", "observation", []string{"mu", "log_std"}, 13},
	{"nature_cnn", "pixels", []string{"action_logits", "state_value"}, 13},
	{"matmul_opset17", "state", []string{"logp", "probs", "value"}, 17},
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func readNPY(t testing.TB, name string) *npy.Array {
	t.Helper()
	f, err := os.Open(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := npy.Read(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return a
}

func parse(t testing.TB, name string) *Model {
	t.Helper()
	m, err := Parse(readFile(t, name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// firstRows returns the first batch rows of a float32 array as a tensor of dtype dt.
func firstRows(a *npy.Array, batch int, dt tensor.Dtype) *tensor.Dense {
	row := a.Len() / a.Shape[0]
	shape := append([]int{batch}, a.Shape[1:]...)
	vals := make([]float64, batch*row)
	for k := range vals {
		vals[k] = float64(a.F32[k])
	}
	return newDense(dt, tensor.Shape(shape), vals)
}

// forward runs gr's outputs once on the given input tensors (one per model input) and
// returns them as float64 slices.
func forward(t testing.TB, gr *Graph, inputs ...*tensor.Dense) [][]float64 {
	t.Helper()
	vm := G.NewTapeMachine(gr.ExprGraph())
	defer vm.Close()
	return runOnce(t, vm, gr, inputs...)
}

func runOnce(t testing.TB, vm G.VM, gr *Graph, inputs ...*tensor.Dense) [][]float64 {
	t.Helper()
	for k, n := range gr.Inputs() {
		if err := G.Let(n, inputs[k]); err != nil {
			t.Fatal(err)
		}
	}
	vm.Reset()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	var outs [][]float64
	for _, o := range gr.Outputs() {
		outs = append(outs, valueFloats(t, o.Value()))
	}
	return outs
}

func valueFloats(t testing.TB, v G.Value) []float64 {
	t.Helper()
	switch x := v.(type) {
	case *tensor.Dense:
		if x.IsView() {
			x = x.Materialize().(*tensor.Dense)
		}
		return floatsOf(x)
	case *G.F32:
		return []float64{float64(*x)}
	case *G.F64:
		return []float64{float64(*x)}
	}
	t.Fatalf("unexpected value %T", v)
	return nil
}

func maxAbsDiff(a []float64, b []float32) float64 {
	worst := 0.0
	for k := range a {
		worst = math.Max(worst, math.Abs(a[k]-float64(b[k])))
	}
	return worst
}

func newGraph() *G.ExprGraph { return G.NewGraph() }

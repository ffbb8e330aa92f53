package graph

import (
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

func caseModel(t *testing.T, name string) (*Model, opCase) {
	t.Helper()
	c, ok := coverageCases()[name]
	if !ok {
		t.Fatalf("no case %q", name)
	}
	m, err := Parse(c.bytes(t))
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// TestDefaultFreezing: initializers that only feed the input preprocessing are frozen; layer
// weights, biases, a log_std and a LayerNorm's scale and shift train.
func TestDefaultFreezing(t *testing.T) {
	for _, tc := range []struct {
		model   string
		outputs []string
		frozen  []string
	}{
		// VecNormalize: mean and var only reach the Gemm's data input.
		{"clip_normaliser", []string{"y"}, []string{"mean", "var"}},
		// z is the normalised input itself, with no layer on its path: mean and var train
		// for it, and W and b, which it does not need, are frozen.
		{"clip_normaliser", []string{"z"}, []string{"W", "b"}},
		{"clip_normaliser", nil, nil},
		{"layernorm_decomposed", nil, nil},
		{"layernorm_opset17", nil, nil},
		{"uint8_cnn", nil, nil},
		{"lstm", nil, nil},
		// An elementwise scale straight on the input, before a Gemm-free output: trains.
		{"activations", nil, nil},
	} {
		m, _ := caseModel(t, tc.model)
		p, err := m.NewParamsFor(TrainOptions{Outputs: tc.outputs})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.frozen, p.Frozen()); diff != "" {
			t.Errorf("%s %v: frozen (-want +got):\n%s", tc.model, tc.outputs, diff)
		}
	}
	// A decomposed LayerNorm applied to the observations keeps its scale and shift trainable
	// (it is recognised as a layer), while a normaliser before it stays frozen.
	rng := rand.New(rand.NewPCG(3, 3))
	c := opCase{opset: 13, inputs: []port{f32("x", -1, 4)}, outputs: []port{f32("y", -1, 2)},
		inits: []*onnxpb.TensorProto{floatInit(rng, "obs_mean", 4), floatInit(rng, "ln.weight", 4), floatInit(rng, "ln.bias", 4), floatInit(rng, "fc.weight", 2, 4)},
		nodes: []*onnxpb.NodeProto{
			node("Sub", ins("x", "obs_mean"), ins("x0")),
			node("ReduceMean", ins("x0"), ins("mu"), aInts("axes", -1)),
			node("Sub", ins("x0", "mu"), ins("d")),
			node("Mul", ins("d", "d"), ins("d2")),
			node("ReduceMean", ins("d2"), ins("var"), aInts("axes", -1)),
			node("Sqrt", ins("var"), ins("sd")),
			node("Div", ins("d", "sd"), ins("n")),
			node("Mul", ins("n", "ln.weight"), ins("ng")),
			node("Add", ins("ng", "ln.bias"), ins("h")),
			node("Gemm", ins("h", "fc.weight"), ins("y"), aInt("transB", 1)),
		}}
	m, err := Parse(c.bytes(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"obs_mean"}, m.NewParams().Frozen()); diff != "" {
		t.Errorf("LayerNorm on the observations: frozen (-want +got):\n%s", diff)
	}
	// Every real exporter's policy trains the weights its bound tensors use (SB3's log_std
	// included). The only frozen parameters the bound tensors use are an observation
	// normaliser's (VecNormalize, Sample Factory): read only by nodes before the graph's first
	// layer. The others frozen are those no bound tensor needs (SAC's log_std head and action
	// rescaling when only the mean is bound).
	for _, fx := range foreignFixtures(t) {
		normalisers := 0
		if len(fx.bound()) == 0 {
			continue
		}
		_, m := fx.parse(t)
		p, err := m.NewParamsFor(TrainOptions{Outputs: fx.bound()})
		if err != nil {
			t.Fatal(err)
		}
		nodes := m.proto.GetGraph().GetNode()
		firstLayer := slices.IndexFunc(nodes, func(n *onnxpb.NodeProto) bool { return layerOps[n.GetOpType()] })
		need := m.needed(fx.bound())
		used := m.usedParams(fx.bound())
		for _, name := range p.Frozen() {
			if !used[name] {
				continue
			}
			for k, n := range m.nodes {
				if need[k] && slices.Contains(n.GetInput(), name) && slices.Index(nodes, n) > firstLayer {
					t.Errorf("%s: %q is frozen by default, and node %q after the first layer reads it", fx.name, name, n.GetName())
				}
			}
			normalisers++
		}
		var learn int
		for _, name := range p.TrainableNames() {
			if used[name] {
				learn++
			}
		}
		if learn == 0 {
			t.Errorf("%s: nothing to train behind %v", fx.name, fx.bound())
		}
		hasNormaliser := strings.Contains(fx.Family, "vecnormalize") || fx.Family == "sample-factory"
		if hasNormaliser != (normalisers > 0) {
			t.Errorf("%s (%s): %d frozen normaliser parameters", fx.name, fx.Family, normalisers)
		}
	}
}

// TestTrainFreezeOptions: the regexps override the default, Freeze after Train, and nothing
// trains that the outputs do not depend on.
func TestTrainFreezeOptions(t *testing.T) {
	m, _ := caseModel(t, "clip_normaliser")
	for _, tc := range []struct {
		opts   TrainOptions
		frozen []string
	}{
		{TrainOptions{Outputs: []string{"y"}, Train: regexp.MustCompile("^mean$")}, []string{"var"}},
		{TrainOptions{Outputs: []string{"y"}, Freeze: regexp.MustCompile("^b$")}, []string{"mean", "var", "b"}},
		{TrainOptions{Outputs: []string{"y"}, Train: regexp.MustCompile("."), Freeze: regexp.MustCompile("^W$")}, []string{"W"}},
		{TrainOptions{Outputs: []string{"z"}, Train: regexp.MustCompile(".")}, []string{"W", "b"}},
	} {
		p, err := m.NewParamsFor(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.frozen, p.Frozen()); diff != "" {
			t.Errorf("%+v: frozen (-want +got):\n%s", tc.opts, diff)
		}
		var train []string
		for _, n := range p.Names() {
			if !slices.Contains(tc.frozen, n) {
				train = append(train, n)
			}
			if p.Trainable(n) == slices.Contains(tc.frozen, n) {
				t.Errorf("Trainable(%q) = %t", n, p.Trainable(n))
			}
		}
		if diff := cmp.Diff(train, p.TrainableNames()); diff != "" {
			t.Errorf("%+v: trainable names (-want +got):\n%s", tc.opts, diff)
		}
	}
}

// TestFrozenParams: frozen parameters stay out of Learnables and the flat vector, keep their
// values through an update of the flat vector, are written back unchanged, and still take part
// in the forward pass; Graph.Gradients lays gradients out like Flat.
func TestFrozenParams(t *testing.T) {
	m, c := caseModel(t, "clip_normaliser")
	p := mustParams(t, m, TrainOptions{Outputs: []string{"y"}}) // mean and var frozen
	before := p.Clone()
	flat, err := p.Flat()
	if err != nil {
		t.Fatal(err)
	}
	if len(flat) != p.TrainableSize() || p.TrainableSize() != 3*4+3 || p.Size() != p.TrainableSize()+8 {
		t.Fatalf("flat vector of %d values, trainable %d, total %d", len(flat), p.TrainableSize(), p.Size())
	}
	gr, err := m.Build(G.NewGraph(), p, 3, "y")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range gr.Learnables() {
		names = append(names, n.Name())
	}
	if diff := cmp.Diff([]string{"W", "b"}, names); diff != "" {
		t.Fatalf("learnables (-want +got):\n%s", diff)
	}
	if _, err := gr.Param("mean"); err != nil {
		t.Errorf("Param(mean): %v", err)
	}
	cost := G.Must(G.Sum(gr.Outputs()[0]))
	if _, err := G.Grad(cost, gr.Learnables()...); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(gr.ExprGraph(), G.BindDualValues(gr.Learnables()...))
	defer vm.Close()
	feeds := c.feeds(3)
	if err := G.Let(gr.Inputs()[0], denseOf(tensor.Float32, []int{3, 4}, feeds[0])); err != nil {
		t.Fatal(err)
	}
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	grads := make([]float32, len(flat))
	if err := gr.Gradients(grads); err != nil {
		t.Fatal(err)
	}
	// d Σy / d b = 3 rows of ones; d Σy / d W[j, i] = Σ_rows c[row, i].
	for j := range 3 {
		if g := grads[12+j]; math.Abs(float64(g)-3) > 1e-6 {
			t.Errorf("d cost / d b[%d] = %g, want 3", j, g)
		}
	}
	// An optimiser step on the flat vector moves only the trainable parameters.
	for k := range flat {
		flat[k] -= 0.1 * grads[k]
	}
	for _, name := range []string{"mean", "var"} {
		a, _ := p.Value(name)
		b, _ := before.Value(name)
		if !slices.Equal(a.Data().([]float32), b.Data().([]float32)) {
			t.Errorf("frozen %q moved", name)
		}
	}
	data, err := m.WriteBack(p, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	m2, err := New(&mp)
	if err != nil {
		t.Fatal(err)
	}
	p2 := m2.NewParams()
	for _, name := range p.Names() {
		a, _ := p.Value(name)
		b, _ := p2.Value(name)
		if !slices.Equal(a.Data().([]float32), b.Data().([]float32)) {
			t.Errorf("%q written back differs", name)
		}
	}
	// A graph of another tensor: zero gradients for the trainable parameters it does not use.
	gz, err := m.Build(G.NewGraph(), mustParams(t, m, TrainOptions{Outputs: []string{"y"}, Train: regexp.MustCompile("mean")}), 3, "z")
	if err != nil {
		t.Fatal(err)
	}
	if len(gz.Learnables()) != 1 || gz.Learnables()[0].Name() != "mean" {
		t.Fatalf("learnables of z: %v", gz.Learnables())
	}
	cz := G.Must(G.Sum(gz.Outputs()[0]))
	if _, err := G.Grad(cz, gz.Learnables()...); err != nil {
		t.Fatal(err)
	}
	vz := G.NewTapeMachine(gz.ExprGraph(), G.BindDualValues(gz.Learnables()...))
	defer vz.Close()
	if err := G.Let(gz.Inputs()[0], denseOf(tensor.Float32, []int{3, 4}, feeds[0])); err != nil {
		t.Fatal(err)
	}
	if err := vz.RunAll(); err != nil {
		t.Fatal(err)
	}
	gp := gz.Params()
	all := make([]float32, gp.TrainableSize())
	for k := range all {
		all[k] = 7
	}
	if err := gz.Gradients(all); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(all[:4], func(v float32) bool { return v != 0 }) || slices.ContainsFunc(all[4:], func(v float32) bool { return v != 0 }) {
		t.Errorf("gradients %v: want mean's first, zeros for W and b", all)
	}
	if err := gz.Gradients(all[:3]); err == nil {
		t.Errorf("Gradients into a short slice: no error")
	}
}

func mustParams(t *testing.T, m *Model, o TrainOptions) *Params {
	t.Helper()
	p, err := m.NewParamsFor(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

package graph

import (
	"errors"
	"math"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// weightedSum adds Σ w∘x to loss (nil to start), with fixed weights w = ±(k+1)/size.
func weightedSum(t *testing.T, g *G.ExprGraph, loss, x *G.Node) *G.Node {
	t.Helper()
	n := x.Shape().TotalSize()
	w := make([]float64, n)
	for k := range w {
		w[k] = float64(k+1) / float64(n)
		if k%2 == 1 {
			w[k] = -w[k]
		}
	}
	wn := G.NewConstant(newDense(x.Dtype(), x.Shape(), w), G.WithName("w/"+x.Name()), G.In(g))
	s := G.Must(G.Sum(G.Must(G.HadamardProd(x, wn))))
	if loss == nil {
		return s
	}
	return G.Must(G.Add(loss, s))
}

// gradsOf builds the model on g for each input tensor in turn — one build, its parameter
// nodes shared (BuildOptions.Share) and its input given as a node (BuildOptions.Inputs) —
// sums a weighted sum of the logits of every build, runs forward and backward and returns
// the gradient of each parameter but those skip names.
func gradsOf(t *testing.T, m *Model, p *Params, stop, skip []string, inputs ...*tensor.Dense) map[string][]float64 {
	t.Helper()
	g := G.NewGraph()
	var first *Graph
	var loss *G.Node
	for k, in := range inputs {
		x := G.NewTensor(g, p.Dtype(), 2, G.WithShape(in.Shape().Clone()...), G.WithName("x"+string(rune('0'+k))), G.WithValue(in))
		gr, err := m.BuildWith(g, p, BuildOptions{Batch: in.Shape()[0], Outputs: []string{"logits"},
			Inputs: map[string]*G.Node{"obs": x}, Share: first, StopGradient: stop})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = gr
		} else {
			for j, n := range gr.Learnables() {
				if n != first.Learnables()[j] {
					t.Fatalf("build %d has its own node for parameter %d", k, j)
				}
			}
		}
		if gr.Inputs()[0] != x {
			t.Fatal("the build made its own input node instead of the one given")
		}
		loss = weightedSum(t, g, loss, gr.Outputs()[0])
	}
	var wrt G.Nodes
	var names []string
	for _, n := range first.Learnables() {
		if name := n.Name(); !slices.Contains(skip, name) {
			wrt, names = append(wrt, n), append(names, name)
		}
	}
	if _, err := G.Grad(loss, wrt...); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g, G.BindDualValues(wrt...))
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	grads := map[string][]float64{}
	for k, n := range wrt {
		d, err := n.Grad()
		if err != nil {
			t.Fatal(err)
		}
		grads[names[k]] = valueFloats(t, d)
	}
	return grads
}

// TestBuildSharedUnrolled: builds that share their parameter nodes (how a recurrent policy is
// unrolled through time) give the sum of the gradients of separate builds; a StopGradient
// tensor leaves the forward pass as it was and gives what computes it no gradient.
func TestBuildSharedUnrolled(t *testing.T) {
	m := parse(t, "mlp_tanh")
	p := m.NewParams()
	in := readNPY(t, "mlp_tanh.input.npy")
	a := firstRows(in, 3, tensor.Float32)
	b := firstRows(in, 3, tensor.Float32)
	for k, v := range b.Data().([]float32) {
		b.Data().([]float32)[k] = -v + 0.1*float32(k%3) // another batch of the same shape
	}
	ga, gb := gradsOf(t, m, p, nil, nil, a), gradsOf(t, m, p, nil, nil, b)
	both := gradsOf(t, m, p, nil, nil, a, b)
	for name, g := range both {
		for k := range g {
			if want := ga[name][k] + gb[name][k]; math.Abs(g[k]-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("%s[%d]: gradient of the shared builds %g, sum of the separate builds %g", name, k, g[k], want)
			}
		}
	}

	// The actor's first hidden layer stops the gradient: its parameters have no gradient
	// (gorgonia refuses to differentiate with respect to them), the layers after it the same
	// as without the stop.
	first := []string{"actor.0.weight", "actor.0.bias"}
	stopAt := []string{"/actor/actor.1/Tanh_output_0"}
	stopped := gradsOf(t, m, p, stopAt, first, a, b)
	for name, g := range stopped {
		for k := range g {
			if want := both[name][k]; math.Abs(g[k]-want) > 1e-6 {
				t.Fatalf("%s[%d]: gradient %g with the stop, %g without", name, k, g[k], want)
			}
		}
	}
	if len(stopped) != len(both)-len(first) {
		t.Fatalf("%d gradients with the stop, want %d", len(stopped), len(both)-len(first))
	}
	g := G.NewGraph()
	gr, err := m.BuildWith(g, p, BuildOptions{Batch: 3, Outputs: []string{"logits"}, StopGradient: stopAt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(weightedSum(t, g, nil, gr.Outputs()[0]), gr.Learnables()[:2]...); err == nil {
		t.Fatal("differentiating through the stop with respect to the layer before it did not fail")
	}
	plain, err := m.Build(G.NewGraph(), p, 3, "logits")
	if err != nil {
		t.Fatal(err)
	}
	withStop, err := m.BuildWith(G.NewGraph(), p, BuildOptions{Batch: 3, Outputs: []string{"logits"}, StopGradient: []string{"/actor/actor.1/Tanh_output_0"}})
	if err != nil {
		t.Fatal(err)
	}
	x, y := forward(t, plain, a)[0], forward(t, withStop, a)[0]
	for k := range x {
		if x[k] != y[k] {
			t.Fatalf("logit %d: %g with the stop, %g without", k, y[k], x[k])
		}
	}
}

// TestBuildOptionsRefused: inputs, shares and stops that do not fit are errors.
func TestBuildOptionsRefused(t *testing.T) {
	m := parse(t, "mlp_tanh")
	p := m.NewParams()
	g := G.NewGraph()
	first, err := m.Build(g, p, 3)
	if err != nil {
		t.Fatal(err)
	}
	wrong := G.NewTensor(g, tensor.Float32, 2, G.WithShape(3, 5), G.WithName("wrong"))
	other := G.NewTensor(G.NewGraph(), tensor.Float32, 2, G.WithShape(3, 4), G.WithName("elsewhere"))
	for _, tc := range []struct {
		name string
		g    *G.ExprGraph
		opts BuildOptions
		want error
	}{
		{"input shape", g, BuildOptions{Batch: 3, Inputs: map[string]*G.Node{"obs": wrong}}, ErrShape},
		{"input of another graph", g, BuildOptions{Batch: 3, Inputs: map[string]*G.Node{"obs": other}}, ErrModel},
		{"not an input", g, BuildOptions{Batch: 3, Inputs: map[string]*G.Node{"logits": wrong}}, ErrModel},
		{"share across graphs", G.NewGraph(), BuildOptions{Batch: 3, Share: first}, ErrModel},
		{"unknown stop", g, BuildOptions{Batch: 3, StopGradient: []string{"nope"}}, ErrNoTensor},
	} {
		if _, err := m.BuildWith(tc.g, p, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.want)
		}
	}
}

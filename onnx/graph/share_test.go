package graph

import (
	"math"
	"slices"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestGraphsShareParams builds two graphs over one Params: an in-place update of a parameter
// is seen by both, and running (forward and backward) leaves the parameters untouched.
func TestGraphsShareParams(t *testing.T) {
	m := parse(t, "mlp_tanh")
	p := m.NewParams()
	in := readNPY(t, "mlp_tanh.input.npy")
	g1, err := m.Build(G.NewGraph(), p, 4)
	if err != nil {
		t.Fatal(err)
	}
	g2, _, _ := lossGraph(t, m, p, 8)
	for _, gr := range []*Graph{g1, g2} {
		for k, n := range gr.Learnables() {
			v, _ := p.Value(p.Names()[k])
			if n.Value() != G.Value(v) {
				t.Fatalf("parameter %q of a graph is not bound to the shared tensor", p.Names()[k])
			}
		}
	}
	before := p.Clone()
	vm1 := G.NewTapeMachine(g1.ExprGraph())
	defer vm1.Close()
	vm2 := G.NewTapeMachine(g2.ExprGraph())
	defer vm2.Close()
	a1 := runOnce(t, vm1, g1, firstRows(in, 4, tensor.Float32))
	a2 := runOnce(t, vm2, g2, firstRows(in, 8, tensor.Float32))
	for _, name := range p.Names() {
		x, _ := p.Value(name)
		y, _ := before.Value(name)
		if !slices.Equal(x.Data().([]float32), y.Data().([]float32)) {
			t.Fatalf("running the graphs changed parameter %q", name)
		}
	}
	w, _ := p.Value("actor.4.bias")
	w.Data().([]float32)[1] += 1 // in place: both graphs must see it
	b1 := runOnce(t, vm1, g1, firstRows(in, 4, tensor.Float32))
	b2 := runOnce(t, vm2, g2, firstRows(in, 8, tensor.Float32))
	for r := range 4 {
		for _, got := range [][2]float64{{a1[0][2*r+1], b1[0][2*r+1]}, {a2[0][2*r+1], b2[0][2*r+1]}} {
			if math.Abs(got[1]-got[0]-1) > 1e-6 {
				t.Fatalf("row %d: logit moved from %g to %g after adding 1 to its bias", r, got[0], got[1])
			}
		}
	}
	if err := p.CopyFrom(before); err != nil {
		t.Fatal(err)
	}
	c1 := runOnce(t, vm1, g1, firstRows(in, 4, tensor.Float32))
	if !slices.Equal(c1[0], a1[0]) {
		t.Errorf("CopyFrom did not restore the outputs")
	}
}

// TestTowersConcurrently runs several towers (a graph and tape machine each, forward and
// backward) at once over one shared Params; under -race this proves that nothing writes the
// shared tensors, and each tower's gradients match a serial run.
func TestTowersConcurrently(t *testing.T) {
	const towers, rounds = 3, 3
	m := parse(t, "gaussian_relu")
	p := m.NewParams()
	in := readNPY(t, "gaussian_relu.input.npy")
	serial := func(gr *Graph, grads G.Nodes, vm G.VM) [][]float64 {
		if err := G.Let(gr.Inputs()[0], firstRows(in, 4, tensor.Float32)); err != nil {
			t.Error(err)
			return nil
		}
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Error(err)
			return nil
		}
		var out [][]float64
		for _, gn := range grads {
			out = append(out, valueFloats(t, gn.Value()))
		}
		return out
	}
	ref := func() [][]float64 {
		gr, _, grads := lossGraph(t, m, p, 4)
		vm := G.NewTapeMachine(gr.ExprGraph())
		defer vm.Close()
		return serial(gr, grads, vm)
	}()
	type tower struct {
		gr    *Graph
		grads G.Nodes
		vm    G.VM
	}
	ts := make([]tower, towers)
	for k := range ts {
		gr, _, grads := lossGraph(t, m, p, 4)
		ts[k] = tower{gr, grads, G.NewTapeMachine(gr.ExprGraph(), G.BindDualValues(gr.Learnables()...))}
		defer ts[k].vm.Close()
	}
	var wg sync.WaitGroup
	results := make([][][]float64, towers)
	for k := range ts {
		wg.Go(func() {
			for range rounds {
				results[k] = serial(ts[k].gr, ts[k].grads, ts[k].vm)
			}
		})
	}
	wg.Wait()
	for k := range results {
		for j := range ref {
			if !slices.Equal(results[k][j], ref[j]) {
				t.Errorf("tower %d gradient of %q differs from the serial run", k, p.Names()[j])
			}
		}
	}
}

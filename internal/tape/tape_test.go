package tape

import (
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// net builds a small two-layer tanh network with a scalar loss and its gradients: what the
// model graphs do, with gorgonia's own ops.
func net(t *testing.T, seed uint64) (g *G.ExprGraph, x *G.Node, params G.Nodes, loss *G.Node) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	randT := func(r, c int) *tensor.Dense {
		d := make([]float32, r*c)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
		return tensor.New(tensor.WithShape(r, c), tensor.WithBacking(d))
	}
	g = G.NewGraph()
	x = G.NewMatrix(g, G.Float32, G.WithShape(8, 3), G.WithName("x"), G.WithValue(randT(8, 3)))
	w1 := G.NewMatrix(g, G.Float32, G.WithShape(3, 5), G.WithName("w1"), G.WithValue(randT(3, 5)))
	w2 := G.NewMatrix(g, G.Float32, G.WithShape(5, 2), G.WithName("w2"), G.WithValue(randT(5, 2)))
	h := G.Must(G.Tanh(G.Must(G.Mul(x, w1))))
	y := G.Must(G.Mul(h, w2))
	loss = G.Must(G.Mean(G.Must(G.Square(y))))
	params = G.Nodes{w1, w2}
	if _, err := G.Grad(loss, params...); err != nil {
		t.Fatal(err)
	}
	return g, x, params, loss
}

// snapshot copies the loss and the parameter gradients after a run.
func snapshot(t *testing.T, loss *G.Node, params G.Nodes) []float32 {
	t.Helper()
	out := []float32{loss.Value().Data().(float32)}
	for _, p := range params {
		g, err := p.Grad()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, g.Data().([]float32)...)
	}
	return out
}

func TestRunMatchesRunAll(t *testing.T) {
	var got [2][][]float32
	for k, fast := range []bool{true, false} {
		g, x, params, loss := net(t, 7)
		var run func() error
		var vm G.VM
		if fast {
			m := New(g, G.BindDualValues(params...))
			if !m.Fast() {
				t.Fatal("the fast path is off")
			}
			run, vm = m.Run, m
		} else {
			tm := G.NewTapeMachine(g, G.BindDualValues(params...))
			run, vm = tm.RunAll, tm
		}
		for step := range 3 {
			// New inputs each step, so a stale value would show.
			xs := x.Value().Data().([]float32)
			for i := range xs {
				xs[i] += float32(step) * 0.25
			}
			for _, p := range params {
				if d, err := p.Grad(); err == nil && d != nil {
					d.(tensor.Tensor).Zero()
				}
			}
			if err := run(); err != nil {
				t.Fatal(err)
			}
			got[k] = append(got[k], snapshot(t, loss, params))
			vm.Reset()
		}
		if err := vm.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for step := range got[0] {
		for i, v := range got[0][step] {
			if w := got[1][step][i]; v != w {
				t.Fatalf("step %d value %d: Run gives %v, RunAll %v", step, i, v, w)
			}
		}
	}
}

// failOp is an op whose execution fails: Run must return the error, as RunAll does.
type failOp struct{}

func (failOp) Arity() int                                        { return 1 }
func (failOp) Type() hm.Type                                     { return hm.NewFnType(hm.TypeVariable('a'), hm.TypeVariable('a')) }
func (failOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) { return in[0].(tensor.Shape), nil }
func (failOp) Do(...G.Value) (G.Value, error)                    { return nil, errors.New("failOp fails") }
func (failOp) ReturnsPtr() bool                                  { return false }
func (failOp) CallsExtern() bool                                 { return false }
func (failOp) OverwritesInput() int                              { return -1 }
func (failOp) WriteHash(h hash.Hash)                             { fmt.Fprint(h, "failOp") }
func (failOp) Hashcode() uint32                                  { return 1 }
func (failOp) String() string                                    { return "failOp" }

func TestRunReturnsOpErrors(t *testing.T) {
	g := G.NewGraph()
	x := G.NewVector(g, G.Float32, G.WithShape(4), G.WithName("x"), G.WithInit(G.Zeroes()))
	G.Must(G.ApplyOp(failOp{}, x))
	m := New(g)
	if !m.Fast() {
		t.Fatal("the fast path is off")
	}
	for range 2 { // the error channel must be drained: a second failing run still reports
		err := m.Run()
		if err == nil || !strings.Contains(err.Error(), "failOp fails") {
			t.Fatalf("Run = %v, want the op's error", err)
		}
		m.Reset()
	}
}

func TestIopGraphTakesRunAll(t *testing.T) {
	g := G.NewGraph()
	x := G.NewVector(g, G.Float32, G.WithShape(4), G.WithName("x"), G.WithInit(G.Zeroes()))
	G.Must(G.ApplyOp(G.Iop{}, x))
	m := New(g)
	if m.Fast() {
		t.Fatal("a graph with an identity op must run through RunAll")
	}
	if err := m.Run(); err != nil {
		t.Fatal(err)
	}
}

// TestGoModPinsGorgonia guards the fast path in test binaries, which carry no dependency
// versions: the module must require, unreplaced, the gorgonia release runall was checked against.
func TestGoModPinsGorgonia(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		switch {
		case len(f) == 0:
		case f[0] == "replace" && len(f) > 1 && f[1] == "gorgonia.org/gorgonia":
			t.Fatalf("go.mod replaces gorgonia (%s): the fast path assumes the released %s", line, gorgoniaVersion)
		case f[0] == "gorgonia.org/gorgonia" && len(f) > 1:
			version = f[1]
		}
	}
	if version != gorgoniaVersion {
		t.Fatalf("go.mod requires gorgonia %q; package tape's runall is checked against %s: re-check "+
			"vm_tape.go's runall and RunAll, then update gorgoniaVersion", version, gorgoniaVersion)
	}
}

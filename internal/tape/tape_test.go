package tape

import (
	"errors"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime/debug"
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

// steps runs vm three times with new inputs each time and returns the loss and gradients of
// each run.
func steps(t *testing.T, run func() error, vm G.VM, x *G.Node, params G.Nodes, loss *G.Node) [][]float32 {
	t.Helper()
	var out [][]float32
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
		out = append(out, snapshot(t, loss, params))
		vm.Reset()
	}
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runAllSteps is steps on gorgonia's own tape machine and RunAll: the reference.
func runAllSteps(t *testing.T) [][]float32 {
	g, x, params, loss := net(t, 7)
	tm := G.NewTapeMachine(g, G.BindDualValues(params...))
	return steps(t, tm.RunAll, tm, x, params, loss)
}

// sameBits fails unless got and want hold the same float32 bits.
func sameBits(t *testing.T, got, want [][]float32) {
	t.Helper()
	for step := range want {
		for i, w := range want[step] {
			if v := got[step][i]; math.Float32bits(v) != math.Float32bits(w) {
				t.Fatalf("step %d value %d: Run gives %v, RunAll %v", step, i, v, w)
			}
		}
	}
}

// TestRunMatchesRunAll: a Machine (on the fast path, except in a build that forces RunAll)
// gives RunAll's losses and gradients bit for bit.
func TestRunMatchesRunAll(t *testing.T) {
	g, x, params, loss := net(t, 7)
	m := New(g, G.BindDualValues(params...))
	if m.Fast() != fastBuild {
		t.Fatalf("Fast() = %v in a build with fastBuild %v (%v)", m.Fast(), fastBuild, fastErr())
	}
	sameBits(t, steps(t, m.Run, m, x, params, loss), runAllSteps(t))
}

// TestLayout: gorgonia's tape machine is the one runall was written against. When this fails
// after a gorgonia upgrade, re-check vm_tape.go's runall and RunAll against Run, then replace
// v0918 with the description printed.
func TestLayout(t *testing.T) {
	got := describe(machineType)
	if err := compare(got, v0918()); err != nil {
		t.Fatalf("%v\nthe tape machine is now:\n%#v", err, got)
	}
	if err := checkVersion(debug.ReadBuildInfo()); err != nil {
		t.Fatal(err)
	}
	if err := Check(); (err == nil) != fastBuild {
		t.Fatalf("Check() = %v in a build with fastBuild %v", err, fastBuild)
	}
}

// TestLayoutMismatchTakesRunAll: every kind of difference between gorgonia's tape machine and
// the expected one is found and named, and a machine built under it takes RunAll and still
// gives RunAll's results.
func TestLayoutMismatchTakesRunAll(t *testing.T) {
	want := runAllSteps(t)
	cases := []struct {
		name   string
		change func(l []layout) []layout
		msg    string
	}{
		{"offset", func(l []layout) []layout { l[0].Fields[5].Offset += 8; return l }, "pc int at offset 112, runall expects pc int at 120"},
		{"name", func(l []layout) []layout { l[2].Fields[0].Name = "instrs"; return l }, "field 0 is instructions"},
		{"type", func(l []layout) []layout { l[0].Fields[15].Type = "[]func()"; return l }, "runall expects closureQueue []func() at 264"},
		{"size", func(l []layout) []layout { l[1].Size = 56; return l }, "ExternMetadata of 48 bytes, runall expects gorgonia.ExternMetadata of 56"},
		{"extra field", func(l []layout) []layout { l[1].Fields = l[1].Fields[:3]; return l }, "has a field syncChan runall does not expect"},
		{"missing field", func(l []layout) []layout {
			l[2].Fields = append(l[2].Fields, field{"cache", "int", 136})
			return l
		}, "has no field cache"},
		{"extra struct", func(l []layout) []layout { return l[:2] }, "struct gorgonia.program runall does not expect"},
		{"missing struct", func(l []layout) []layout { return append(l, layout{Type: "gorgonia.fragment"}) }, "no struct gorgonia.fragment"},
		{"renamed struct", func(l []layout) []layout { l[0].Type = "gorgonia.tape"; return l }, "struct 0 is gorgonia.tapeMachine"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := compare(describe(machineType), c.change(v0918()))
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("compare = %v, want an error containing %q", err, c.msg)
			}
			g, x, params, loss := net(t, 7)
			m := newMachine(g, err, G.BindDualValues(params...))
			if m.Fast() {
				t.Fatal("a machine whose structure differs takes the fast path")
			}
			sameBits(t, steps(t, m.Run, m, x, params, loss), want)
		})
	}
	if err := compare(describe(reflect.TypeOf(0)), v0918()); err == nil {
		t.Error("an int passes for a tape machine")
	}
}

// TestCheckVersion: where the build information lists gorgonia, only v0.9.18 unreplaced passes.
func TestCheckVersion(t *testing.T) {
	dep := func(v string, r *debug.Module) *debug.BuildInfo {
		return &debug.BuildInfo{Deps: []*debug.Module{
			{Path: "gonum.org/v1/gonum", Version: "v0.16.0"},
			{Path: "gorgonia.org/gorgonia", Version: v, Replace: r},
		}}
	}
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		pass bool
	}{
		{"no build info", nil, false, true},
		{"test binary", &debug.BuildInfo{}, true, true},
		{"v0.9.18", dep("v0.9.18", nil), true, true},
		{"other version", dep("v0.9.17", nil), true, false},
		{"replaced", dep("v0.9.18", &debug.Module{Path: "../gorgonia", Version: ""}), true, false},
	} {
		if err := checkVersion(c.info, c.ok); (err == nil) != c.pass {
			t.Errorf("%s: checkVersion = %v, want pass %v", c.name, err, c.pass)
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
	if m.Fast() != fastBuild {
		t.Fatalf("Fast() = %v in a build with fastBuild %v (%v)", m.Fast(), fastBuild, fastErr())
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

// TestGoModPinsGorgonia: the module requires, unreplaced, the gorgonia release runall was
// checked against (test binaries carry no dependency versions for checkVersion to read).
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

package fused

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

type named string

func (n named) String() string { return string(n) }

// TestGradOp: the gradient op scales the forward op's derivatives by the incoming gradient,
// keeps its input's shape, and refuses an input of another size.
func TestGradOp(t *testing.T) {
	d := []float32{1, -2, 0.5, 4}
	op := NewGradOp(named("Loss"), "value", 2, d)
	x := tensor.New(tensor.WithShape(4, 1), tensor.WithBacking(make([]float32, 4)))
	dy := G.NewF32(0.5)
	out, err := op.Do(x, dy)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*tensor.Dense).Float32s()
	for i, want := range []float32{0.5, -1, 0.25, 2} {
		if got[i] != want {
			t.Fatalf("gradient %v, want d·0.5", got)
		}
	}
	if s, err := op.InferShape(tensor.Shape{4, 1}, tensor.ScalarShape()); err != nil || !s.Eq(tensor.Shape{4, 1}) {
		t.Errorf("InferShape: %v, %v", s, err)
	}
	if _, err := op.InferShape(tensor.Shape{5, 1}, tensor.ScalarShape()); err == nil {
		t.Error("a [5, 1] input taken for 4 derivatives")
	}
	if _, err := op.Do(x, tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))); err == nil {
		t.Error("a float64 vector taken as the incoming gradient")
	}
}

// TestHeadsRefuseBadActions: a head's forward pass names the row of an action it cannot
// score, and scores the rest (the categorical against log-softmax by hand).
func TestHeadsRefuseBadActions(t *testing.T) {
	cat := NewCategorical(3, 2)
	logits := []float32{0, 0, 0, 1, 2, 3}
	logp, ent := make([]float32, 2), make([]float32, 2)
	cat.Acts[0], cat.Acts[1] = 1, 2
	if err := cat.Forward([][]float32{logits}, logp, ent); err != nil {
		t.Fatal(err)
	}
	lse := math.Log(math.Exp(1) + math.Exp(2) + math.Exp(3))
	if math.Abs(float64(logp[0])+math.Log(3)) > 1e-6 || math.Abs(float64(logp[1])-(3-lse)) > 1e-6 || math.Abs(float64(ent[0])-math.Log(3)) > 1e-6 {
		t.Errorf("log-probabilities %v, entropies %v", logp, ent)
	}
	cat.Acts[1] = 3
	if err := cat.Forward([][]float32{logits}, logp, ent); err == nil || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("action 3 of a 3-way head: %v", err)
	}
	g := NewGaussian(2, 2)
	copy(g.Acts, []float32{0, 1, float32(math.NaN()), 0})
	if err := g.Forward([][]float32{make([]float32, 4), make([]float32, 4)}, logp, ent); err == nil || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("a NaN action: %v", err)
	}
}

// sumSq is Σ_i w_i·Σ_j x_ij² over x [rows, 2] and w [rows]: a fused op on the Op base,
// differentiable in x only.
type sumSq struct {
	Op
	rows int
	dx   []float32
}

func newSumSq(rows int) *sumSq {
	op := &sumSq{rows: rows, dx: make([]float32, rows*2)}
	op.Op = NewOp(op, "fused_test", rows, Input{Name: "x", Dims: 2, Width: 2, D: op.dx}, Input{Name: "w", Dims: 1})
	return op
}

func (op *sumSq) String() string { return "SumSq" }
func (op *sumSq) Do(in ...G.Value) (G.Value, error) {
	v, err := op.Values(in)
	if err != nil {
		return nil, err
	}
	x, w := v[0], v[1]
	var s float32
	for i := range op.rows {
		for j := range 2 {
			s += w[i] * x[i*2+j] * x[i*2+j]
			op.dx[i*2+j] = 2 * w[i] * x[i*2+j]
		}
	}
	return G.NewF32(s), nil
}

// TestOpBase: an op on the Op base takes its inputs' types and shapes, refuses others naming
// the input, differentiates the inputs with derivatives only (through GradOp, to 2·w·x by
// hand), and hashes apart from another op of the same name.
func TestOpBase(t *testing.T) {
	const rows = 3
	g := G.NewGraph()
	xv := []float32{1, -2, 0.5, 3, -1, 0.25}
	wv := []float32{2, -1, 4}
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(rows, 2), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(rows, 2), tensor.WithBacking(xv))))
	w := G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName("w"), G.WithValue(tensor.New(tensor.WithShape(rows), tensor.WithBacking(wv))))
	op := newSumSq(rows)
	loss, err := G.ApplyOp(op, x, w)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(loss, x)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	var want float32
	for i, xi := range xv {
		want += wv[i/2] * xi * xi
	}
	if got := float32(*loss.Value().(*G.F32)); got != want {
		t.Errorf("loss %v, want %v", got, want)
	}
	dx := grads[0].Value().Data().([]float32)
	for i, xi := range xv {
		if dx[i] != 2*wv[i/2]*xi {
			t.Fatalf("∂loss/∂x %v, want 2·w·x", dx)
		}
	}
	if d := op.DiffWRT(2); !d[0] || d[1] {
		t.Errorf("DiffWRT %v, want [true false]", d)
	}
	if want := hm.NewFnType(VecType(2), VecType(1), hm.TypeVariable('a')); op.Arity() != 2 || op.Type().String() != want.String() {
		t.Errorf("arity %d, type %v", op.Arity(), op.Type())
	}
	for _, tc := range []struct {
		name  string
		shape []G.DimSizer
		msg   string
	}{
		{"wrong width", []G.DimSizer{tensor.Shape{2, 3}, tensor.Shape{3}}, "input x has shape (2, 3)"},
		{"vector for the matrix", []G.DimSizer{tensor.Shape{6}, tensor.Shape{3}}, "input x"},
		{"too few w", []G.DimSizer{tensor.Shape{3, 2}, tensor.Shape{2}}, "input w"},
		{"one input", []G.DimSizer{tensor.Shape{3, 2}}, "takes 2 inputs, got 1"},
	} {
		if _, err := op.InferShape(tc.shape...); err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "fused_test: SumSq") {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.msg)
		}
	}
	if _, err := op.Do(tensor.New(tensor.WithShape(rows, 2), tensor.WithBacking(make([]float64, 6))), w.Value()); err == nil || !strings.Contains(err.Error(), "input x") {
		t.Errorf("float64 x: %v", err)
	}
	if other := newSumSq(rows); other.Hashcode() == op.Hashcode() {
		t.Error("two ops of one name hash alike: gorgonia would merge them across towers")
	}
}

// TestBind: a categorical head reads Params and takes each row's action as an index; a
// Gaussian one reads Params and LogStd and copies each row's action vector; Fill maps loss
// rows to batch rows through rowOf (or one to one) and hands each pair on; a Gaussian head
// without its log std, an unknown head and a batch of another action width are errors.
func TestBind(t *testing.T) {
	g := G.NewGraph()
	mat := func(name string, rows, w int) *G.Node {
		return G.NewMatrix(g, tensor.Float32, G.WithShape(rows, w), G.WithName(name))
	}
	type pair struct{ k, r int }
	var pairs []pair
	row := func(k, r int) { pairs = append(pairs, pair{k, r}) }
	reverse := func(k int) int { return 2 - k }

	cat, err := Bind(algo.Heads{Spec: head.Spec{Head: head.CategoricalKind, N: 3}, Rows: 3, Params: mat("logits", 3, 3)})
	if err != nil {
		t.Fatal(err)
	}
	mb := learner.NewSampleBatch(3, 1, 1, 0)
	copy(mb.Actions, []float32{2, 0, 1})
	if err := cat.Fill(mb, 3, reverse, row); err != nil {
		t.Fatal(err)
	}
	if got := cat.Head.(*Categorical).Acts; len(cat.Nodes) != 1 || !slices.Equal(got, []int32{1, 0, 2}) ||
		!slices.Equal(pairs, []pair{{0, 2}, {1, 1}, {2, 0}}) {
		t.Errorf("categorical: %d nodes, actions %v, rows %v; want 1 node, [1 0 2], rows reversed", len(cat.Nodes), got, pairs)
	}

	gs := head.Spec{Head: head.TanhGaussianKind, Low: make([]float32, 2), High: make([]float32, 2)}
	gauss, err := Bind(algo.Heads{Spec: gs, Rows: 2, Params: mat("mean", 2, 2), LogStd: mat("log_std", 2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := gauss.Fill(mb, 2, nil, row); err == nil || !strings.Contains(err.Error(), "1 action values per row") {
		t.Errorf("a batch of 1 action value for a 2-dimensional head: %v", err)
	}
	mb2 := learner.NewSampleBatch(3, 1, 2, 0)
	copy(mb2.Actions, []float32{1, 2, 3, 4, 5, 6})
	pairs = nil
	if err := gauss.Fill(mb2, 2, nil, row); err != nil {
		t.Fatal(err)
	}
	if got := gauss.Head.(*Gaussian).Acts; len(gauss.Nodes) != 2 || !slices.Equal(got, []float32{1, 2, 3, 4}) ||
		!slices.Equal(pairs, []pair{{0, 0}, {1, 1}}) {
		t.Errorf("Gaussian: %d nodes, actions %v, rows %v; want 2 nodes, [1 2 3 4], rows one to one", len(gauss.Nodes), got, pairs)
	}

	if _, err := Bind(algo.Heads{Spec: gs, Rows: 2, Params: mat("m", 2, 2)}); err == nil || !strings.Contains(err.Error(), "log_std") {
		t.Errorf("a Gaussian head without log std: %v", err)
	}
	if _, err := Bind(algo.Heads{Spec: head.Spec{Head: "beta"}, Rows: 2, Params: mat("p", 2, 2)}); err == nil || !strings.Contains(err.Error(), `"beta"`) {
		t.Errorf("an unknown head: %v", err)
	}
}

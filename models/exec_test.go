package models

import (
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// sqLossOp is a scalar loss built of test ops only (no gorgonia op, as the engine's fused
// losses): ½·Σ_k w_k·x_k² over the values of its inputs, with fixed weights w, so that a
// policy over it runs on a plan. Its Do writes each input's derivative w·x into d, which the
// input's sqGradOp scales by the incoming gradient.
type sqLossOp struct {
	dims []int
	w, d [][]float32
	out  G.F32
}

func newSQLoss(rng *rand.Rand, in ...*G.Node) *sqLossOp {
	op := &sqLossOp{}
	for _, n := range in {
		op.dims = append(op.dims, n.Dims())
		w := make([]float32, n.Shape().TotalSize())
		for i := range w {
			w[i] = float32(rng.Float64() + 0.5)
		}
		op.w, op.d = append(op.w, w), append(op.d, make([]float32, len(w)))
	}
	return op
}

func (op *sqLossOp) Arity() int { return len(op.dims) }
func (op *sqLossOp) Type() hm.Type {
	var ts []hm.Type
	for _, d := range op.dims {
		ts = append(ts, G.TensorType{Dims: d, Of: hm.TypeVariable('a')})
	}
	return hm.NewFnType(append(ts, hm.TypeVariable('a'))...)
}
func (op *sqLossOp) InferShape(...G.DimSizer) (tensor.Shape, error) { return tensor.ScalarShape(), nil }
func (op *sqLossOp) ReturnsPtr() bool                               { return false }
func (op *sqLossOp) CallsExtern() bool                              { return false }
func (op *sqLossOp) OverwritesInput() int                           { return -1 }
func (op *sqLossOp) String() string                                 { return "SQLoss" }
func (op *sqLossOp) WriteHash(h hash.Hash)                          { fmt.Fprintf(h, "test.SQLoss.%p", op) }
func (op *sqLossOp) Hashcode() uint32                               { return hashOf(op) }
func (op *sqLossOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

func (op *sqLossOp) Do(in ...G.Value) (G.Value, error) {
	var s float64
	for k, v := range in {
		x, ok := floats(v)
		if !ok || len(x) != len(op.w[k]) {
			return nil, fmt.Errorf("SQLoss input %d is %v", k, v)
		}
		for i, xi := range x {
			op.d[k][i] = op.w[k][i] * xi
			s += 0.5 * float64(op.w[k][i]*xi*xi)
		}
	}
	op.out = G.F32(s)
	return &op.out, nil
}

func (op *sqLossOp) SymDiff(in G.Nodes, _, dy *G.Node) (G.Nodes, error) {
	out := make(G.Nodes, len(in))
	for k, x := range in {
		var err error
		if out[k], err = G.ApplyOp(&sqGradOp{fwd: op, k: k}, x, dy); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sqGradOp is (x, dy) → d·dy for input k of an sqLossOp.
type sqGradOp struct {
	fwd *sqLossOp
	k   int
	out *tensor.Dense
}

func (op *sqGradOp) Arity() int { return 2 }
func (op *sqGradOp) Type() hm.Type {
	t := G.TensorType{Dims: op.fwd.dims[op.k], Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, hm.TypeVariable('a'), t)
}
func (op *sqGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	return in[0].(tensor.Shape).Clone(), nil
}
func (op *sqGradOp) ReturnsPtr() bool      { return true }
func (op *sqGradOp) CallsExtern() bool     { return false }
func (op *sqGradOp) OverwritesInput() int  { return -1 }
func (op *sqGradOp) String() string        { return fmt.Sprintf("SQGrad%d", op.k) }
func (op *sqGradOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "test.SQGrad.%d.%p", op.k, op.fwd) }
func (op *sqGradOp) Hashcode() uint32      { return hashOf(op) }
func (op *sqGradOp) DiffWRT(n int) []bool  { return make([]bool, n) }
func (op *sqGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("SQGrad has no gradient")
}

func (op *sqGradOp) Do(in ...G.Value) (G.Value, error) {
	dy := float32(*in[1].(*G.F32))
	if op.out == nil {
		op.out = tensor.New(tensor.WithShape(in[0].Shape().Clone()...), tensor.Of(tensor.Float32))
	}
	for i, d := range op.fwd.d[op.k] {
		op.out.Float32s()[i] = d * dy
	}
	return op.out, nil
}

// sqPolicy builds a policy over params with the sqLoss of its logits and value, watching the
// loss (and, with watchGrad, the gradient node of parameter 0, which then is read out of the
// graph rather than written in place). With asBefore it is built as before plans and fused
// activation gradients: separate ActGrad ops, compiled on the tape machine.
func sqPolicy(t *testing.T, params *Params, batch int, asBefore, watchGrad bool) (*Policy, *G.Node) {
	t.Helper()
	pol, err := Build(G.NewGraph(), params, batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	pol.unfused = asBefore
	loss := G.Must(G.ApplyOp(newSQLoss(rand.New(rand.NewPCG(4, 4)), pol.Logits, pol.Value), pol.Logits, pol.Value))
	if err := pol.Watch(loss); err != nil {
		t.Fatal(err)
	}
	if err := pol.Backward(loss); err != nil {
		t.Fatal(err)
	}
	if watchGrad {
		if err := pol.Watch(pol.gradNodes[0]); err != nil {
			t.Fatal(err)
		}
	}
	pol.tapeOnly = asBefore
	if err := pol.Compile(); err != nil {
		t.Fatal(err)
	}
	return pol, loss
}

// TestPlanMatchesTape: a graph of this package's ops and a loss of non-gorgonia ops runs on a
// plan, with the hidden layers' activation derivatives fused into the next layer's input
// gradient; its forward outputs, loss and gradients have every bit of the same graph built as
// before (separate ActGrad ops, on the tape machine), run after run; a watched gradient (read
// out of the graph, not written in place) too; and a plan's run allocates nothing.
func TestPlanMatchesTape(t *testing.T) {
	relu3 := cartPole
	relu3.Hidden, relu3.Activation = []int{32, 48, 16}, ReLU
	for ci, cfg := range []Config{cartPole, relu3} {
		for _, batch := range []int{1, 7, 64} {
			for _, watchGrad := range []bool{false, true} {
				name := fmt.Sprintf("config %d batch %d watchGrad %t", ci, batch, watchGrad)
				params := newParams(t, cfg, uint64(ci))
				perturb(params, rand.New(rand.NewPCG(uint64(ci), 5)))
				pl, lossP := sqPolicy(t, params, batch, false, watchGrad)
				tp, lossT := sqPolicy(t, params, batch, true, watchGrad)
				if pl.plan == nil || pl.vm != nil || tp.plan != nil || tp.vm == nil {
					t.Fatalf("%s: plan %v/tape %v, and tape-only %v/%v", name, pl.plan != nil, pl.vm != nil, tp.plan != nil, tp.vm != nil)
				}
				if watchGrad == pl.direct[0] || len(pl.bound) != len(tp.bound) {
					t.Fatalf("%s: parameter 0 written in place: %t; bound %d and %d", name, pl.direct[0], len(pl.bound), len(tp.bound))
				}
				if got := countOps[*actGradOp](pl.Graph); got != 0 {
					t.Fatalf("%s: %d ActGrad ops with fusion, want none", name, got)
				}
				if got, want := countOps[*actGradOp](tp.Graph), 2*len(params.Config().Hidden); got != want {
					t.Fatalf("%s: %d ActGrad ops unfused, want %d", name, got, want)
				}
				for run := range 3 {
					for _, p := range []*Policy{pl, tp} {
						randomObs(rand.New(rand.NewPCG(uint64(run), 9)), p.ObsData(), false)
						if err := p.Run(); err != nil {
							t.Fatal(err)
						}
					}
					pairs := [][2]*G.Node{{pl.Logits, tp.Logits}, {pl.Value, tp.Value}, {lossP, lossT}}
					if watchGrad {
						pairs = append(pairs, [2]*G.Node{pl.gradNodes[0], tp.gradNodes[0]})
					}
					for _, pair := range pairs {
						a, err := pl.Read(pair[0])
						if err != nil {
							t.Fatal(err)
						}
						b, err := tp.Read(pair[1])
						if err != nil {
							t.Fatal(err)
						}
						sameBits(t, fmt.Sprintf("%s run %d: %s", name, run, pair[1].Name()), a, b)
					}
					ga, gb := make([]float32, params.Size()), make([]float32, params.Size())
					if err := pl.Grads(ga); err != nil {
						t.Fatal(err)
					}
					if err := tp.Grads(gb); err != nil {
						t.Fatal(err)
					}
					sameBits(t, fmt.Sprintf("%s run %d: gradients", name, run), ga, gb)
					if nz := countNonzero(ga); nz < len(ga)/10 {
						t.Fatalf("%s: only %d of %d gradients are nonzero", name, nz, len(ga))
					}
				}
				if n := testing.AllocsPerRun(10, func() {
					if err := pl.Run(); err != nil {
						t.Fatal(err)
					}
				}); n != 0 {
					t.Errorf("%s: a plan's run allocates %v times", name, n)
				}
			}
		}
	}
}

// TestPlanFallsBack: graphs with gorgonia's own ops (the PPO-like loss of gorgonia ops, the
// reference layers, a Gaussian head's broadcast log std) run on the tape machine.
func TestPlanFallsBack(t *testing.T) {
	for ai, a := range arches[:4] {
		for _, reference := range []bool{false, true} {
			tr := newTrainerWith(t, newParams(t, a.cfg, uint64(ai)), 5, reference)
			if tr.pol.plan != nil || tr.pol.vm == nil {
				t.Errorf("%s reference %t: runs on a plan", a.name, reference)
			}
		}
	}
}

func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d values", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: value %d is %v on the plan, %v on the tape machine", what, i, a[i], b[i])
		}
	}
}

func countNonzero(x []float32) int {
	n := 0
	for _, v := range x {
		if v != 0 {
			n++
		}
	}
	return n
}

// countOps is the number of g's nodes whose op is a T.
func countOps[T G.Op](g *G.ExprGraph) int {
	n := 0
	for _, x := range g.AllNodes() {
		if _, ok := x.Op().(T); ok {
			n++
		}
	}
	return n
}

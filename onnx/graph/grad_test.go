package graph

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// lossGraph builds m over p for batch rows with a scalar loss Σ_k Σ w_k ⊙ output_k (fixed
// random w_k) and its gradients with respect to every parameter.
func lossGraph(t testing.TB, m *Model, p *Params, batch int) (*Graph, *G.Node, G.Nodes) {
	t.Helper()
	g := G.NewGraph()
	gr, err := m.Build(g, p, batch)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var loss *G.Node
	for _, o := range gr.Outputs() {
		w := make([]float64, o.Shape().TotalSize())
		for k := range w {
			w[k] = rng.Float64()*2 - 1
		}
		wn := G.NewConstant(newDense(p.Dtype(), o.Shape(), w), G.WithName("w/"+o.Name()), G.In(g))
		prod, err := G.HadamardProd(o, wn)
		if err != nil {
			t.Fatal(err)
		}
		s, err := G.Sum(prod)
		if err != nil {
			t.Fatal(err)
		}
		if loss == nil {
			loss = s
		} else if loss, err = G.Add(loss, s); err != nil {
			t.Fatal(err)
		}
	}
	grads, err := G.Grad(loss, gr.Learnables()...)
	if err != nil {
		t.Fatal(err)
	}
	return gr, loss, grads
}

func scalarOf(t testing.TB, n *G.Node) float64 {
	t.Helper()
	return valueFloats(t, n.Value())[0]
}

// TestGradientsFiniteDifferences checks the gradient of a scalar loss with respect to every
// initializer (and every untied parameter) of every fixture against central differences,
// computed in float64 on a few sampled entries per tensor.
func TestGradientsFiniteDifferences(t *testing.T) {
	const eps, tol = 1e-6, 1e-5
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			m := parse(t, fx.name)
			p, err := m.NewParams().As(tensor.Float64)
			if err != nil {
				t.Fatal(err)
			}
			in := readNPY(t, fx.name+".input.npy")
			batch, samples := min(in.Shape[0], 4), 4
			if fx.name == "nature_cnn" {
				batch, samples = 2, 3
				if raceEnabled {
					t.Skip("a single-goroutine numerical check, slow under -race; runs without it")
				}
				if testing.Short() {
					samples = 1
				}
			}
			gr, loss, grads := lossGraph(t, m, p, batch)
			for k, n := range gr.Inputs() {
				_ = k
				if err := G.Let(n, firstRows(in, batch, tensor.Float64)); err != nil {
					t.Fatal(err)
				}
			}
			full := G.NewTapeMachine(gr.ExprGraph())
			defer full.Close()
			if err := full.RunAll(); err != nil {
				t.Fatal(err)
			}
			analytic := make([][]float64, len(grads))
			for k, gn := range grads {
				analytic[k] = valueFloats(t, gn.Value())
			}
			fwd := G.NewTapeMachine(gr.ExprGraph().SubgraphRoots(loss))
			defer fwd.Close()
			eval := func() float64 {
				fwd.Reset()
				if err := fwd.RunAll(); err != nil {
					t.Fatal(err)
				}
				return scalarOf(t, loss)
			}
			rng := rand.New(rand.NewPCG(3, 5))
			worst := 0.0
			for k, name := range p.Names() {
				v, _ := p.Value(name)
				data := v.Data().([]float64)
				for s := range samples {
					i := 0
					if s > 0 {
						i = rng.IntN(len(data))
					}
					orig := data[i]
					data[i] = orig + eps
					up := eval()
					data[i] = orig - eps
					down := eval()
					data[i] = orig
					fd := (up - down) / (2 * eps)
					err := math.Abs(fd-analytic[k][i]) / math.Max(1, math.Abs(fd))
					worst = math.Max(worst, err)
					if err > tol {
						t.Errorf("%s[%d]: analytic %.8g, finite differences %.8g", name, i, analytic[k][i], fd)
					}
				}
			}
			if testing.Verbose() {
				fmt.Printf("gradcheck %s: %d parameters × %d entries, worst relative error %.3g\n", fx.name, p.Len(), samples, worst)
			}
		})
	}
}

// TestGradientsFloat32 checks that the float32 graph's gradients (what training uses) agree
// with the float64 ones.
func TestGradientsFloat32(t *testing.T) {
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			m := parse(t, fx.name)
			in := readNPY(t, fx.name+".input.npy")
			batch := min(in.Shape[0], 4)
			if fx.name == "nature_cnn" {
				if raceEnabled {
					t.Skip("a single-goroutine numerical check, slow under -race; runs without it")
				}
				batch = 2
			}
			var got [2][][]float64
			for d, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
				p, err := m.NewParams().As(dt)
				if err != nil {
					t.Fatal(err)
				}
				gr, _, grads := lossGraph(t, m, p, batch)
				if err := G.Let(gr.Inputs()[0], firstRows(in, batch, dt)); err != nil {
					t.Fatal(err)
				}
				vm := G.NewTapeMachine(gr.ExprGraph())
				if err := vm.RunAll(); err != nil {
					t.Fatal(err)
				}
				for _, gn := range grads {
					got[d] = append(got[d], valueFloats(t, gn.Value()))
				}
				vm.Close()
			}
			names := m.ParamNames()
			for k := range got[0] {
				for i := range got[0][k] {
					if e := math.Abs(got[0][k][i]-got[1][k][i]) / math.Max(1, math.Abs(got[1][k][i])); e > 1e-4 {
						t.Fatalf("%s[%d]: float32 %g, float64 %g", names[k], i, got[0][k][i], got[1][k][i])
					}
				}
			}
		})
	}
}

package graph

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestDenseFusion: dense layers are fused (one op per Gemm or MatMul+Add, with its Tanh or
// Relu), and the fused graph computes the same outputs and gradients as the node-by-node one,
// in float32 (the kernels) and float64 (the reference loops).
func TestDenseFusion(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		fused   int
	}{
		{"mlp_tanh", 6},       // Gemm+Tanh ×4, Gemm ×2
		{"gaussian_relu", 3},  // Gemm+Relu ×2, Gemm
		{"matmul_opset17", 4}, // MatMul+Add+Tanh, MatMul+Add (before a Sigmoid), the two heads
		{"nature_cnn", 3},     // the Gemm+Relu after the convolutions and the two heads
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			m := parse(t, tc.fixture)
			in := readNPY(t, tc.fixture+".input.npy")
			batch := min(in.Shape[0], 4)
			for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
				p, err := m.NewParams().As(dt)
				if err != nil {
					t.Fatal(err)
				}
				var outs, grads [2][][]float64
				for k, noFusion := range []bool{false, true} {
					g := G.NewGraph()
					gr, err := m.BuildWith(g, p, BuildOptions{Batch: batch, NoFusion: noFusion})
					if err != nil {
						t.Fatal(err)
					}
					n := 0
					for _, node := range g.AllNodes() {
						if _, ok := node.Op().(*denseOp); ok {
							n++
						}
					}
					if want := map[bool]int{false: tc.fused, true: 0}[noFusion]; n != want {
						t.Errorf("%v NoFusion=%t: %d fused layers, want %d", dt, noFusion, n, want)
					}
					var loss *G.Node
					for _, o := range gr.Outputs() {
						s := G.Must(G.Sum(G.Must(G.Square(o))))
						if loss == nil {
							loss = s
						} else {
							loss = G.Must(G.Add(loss, s))
						}
					}
					gs, err := G.Grad(loss, gr.Learnables()...)
					if err != nil {
						t.Fatal(err)
					}
					if err := G.Let(gr.Inputs()[0], firstRows(in, batch, dt)); err != nil {
						t.Fatal(err)
					}
					vm := G.NewTapeMachine(g)
					if err := vm.RunAll(); err != nil {
						t.Fatal(err)
					}
					for _, o := range gr.Outputs() {
						outs[k] = append(outs[k], valueFloats(t, o.Value()))
					}
					for _, gn := range gs {
						grads[k] = append(grads[k], valueFloats(t, gn.Value()))
					}
					vm.Close()
				}
				tol := 1e-12
				if dt == tensor.Float32 {
					tol = 1e-5
				}
				for _, pair := range [][2][][]float64{outs, grads} {
					for j := range pair[0] {
						for i := range pair[0][j] {
							if e := relErr(pair[0][j][i], pair[1][j][i]); e > tol || math.IsNaN(e) {
								t.Fatalf("%v: fused %g, node by node %g", dt, pair[0][j][i], pair[1][j][i])
							}
						}
					}
				}
			}
		})
	}
}

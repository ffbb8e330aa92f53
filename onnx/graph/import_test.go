package graph

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestParityWithPyTorch imports every fixture and compares the gorgonia forward pass with the
// outputs PyTorch computed, for a batch of 1 and the whole fixture batch.
func TestParityWithPyTorch(t *testing.T) {
	const tol = 1e-5
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			m := parse(t, fx.name)
			if m.Opset() != fx.opset {
				t.Errorf("opset %d, want %d", m.Opset(), fx.opset)
			}
			in := readNPY(t, fx.name+".input.npy")
			p := m.NewParams()
			for _, batch := range []int{1, in.Shape[0]} {
				gr, err := m.Build(G.NewGraph(), p, batch)
				if err != nil {
					t.Fatal(err)
				}
				outs := forward(t, gr, firstRows(in, batch, tensor.Float32))
				for k, name := range fx.outputs {
					want := readNPY(t, fx.name+"."+name+".npy")
					row := want.Len() / want.Shape[0]
					if len(outs[k]) != batch*row {
						t.Fatalf("batch %d output %q: %d values, want %d (shape %v)", batch, name, len(outs[k]), batch*row, gr.Outputs()[k].Shape())
					}
					d := maxAbsDiff(outs[k], want.F32[:batch*row])
					if testing.Verbose() {
						fmt.Printf("parity %s batch %d %s: max abs error %.3g\n", fx.name, batch, name, d)
					}
					if d > tol {
						t.Errorf("batch %d output %q: max abs error %.3g > %g", batch, name, d, tol)
					}
				}
			}
		})
	}
}

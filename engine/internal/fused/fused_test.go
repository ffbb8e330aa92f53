package fused

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
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

package fused

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

// Binding is a tower's policy head for a fused loss: the [Head] over h's outputs, the nodes
// it reads, and the rows' actions the loss's Fill writes into it.
type Binding struct {
	Head Head
	// Nodes are the head's inputs, in Head.Inputs order: Heads.Params, and Heads.LogStd for
	// a Gaussian head.
	Nodes []*G.Node
	spec  head.Spec
	acts  []int32   // categorical actions, read by Head
	act   []float32 // Gaussian actions, read by Head
}

// Bind makes the Head of h's policy head over h.Rows rows: the categorical over Params, or the
// Gaussian over Params (the mean) and LogStd (a tanh-gaussian head is trained as the Gaussian
// over its pre-tanh action).
func Bind(h algo.Heads) (*Binding, error) {
	b := &Binding{spec: h.Spec, Nodes: []*G.Node{h.Params}}
	switch h.Spec.Head {
	case head.CategoricalKind:
		cat := NewCategorical(h.Spec.N, h.Rows)
		b.Head, b.acts = cat, cat.Acts
	case head.GaussianKind, head.TanhGaussianKind:
		if h.LogStd == nil {
			return nil, errors.New("a Gaussian head needs its log_std")
		}
		g := NewGaussian(h.Spec.ActionDim(), h.Rows)
		b.Head, b.act = g, g.Acts
		b.Nodes = append(b.Nodes, h.LogStd)
	default:
		return nil, fmt.Errorf("no loss for a %q head", h.Spec.Head)
	}
	return b, nil
}

// Fill writes each loss row k's action (of rows) from row rowOf(k) of mb (k when rowOf is
// nil) and calls row(k, rowOf(k)) for the loss's own per-row data, or returns an error when
// mb's actions have another width than the head's. The head's Forward refuses a categorical
// action outside the head and a non-finite Gaussian one, naming the row.
func (b *Binding) Fill(mb *learner.SampleBatch, rows int, rowOf func(k int) int, row func(k, r int)) error {
	if b.act != nil && mb.ActDim != b.spec.ActionDim() {
		return fmt.Errorf("the batch has %d action values per row, the %s head %d", mb.ActDim, b.spec.Head, b.spec.ActionDim())
	}
	d := mb.ActDim
	for k := range rows {
		r := k
		if rowOf != nil {
			r = rowOf(k)
		}
		if b.acts != nil {
			b.acts[k] = int32(mb.Actions[r])
		} else {
			copy(b.act[k*d:(k+1)*d], mb.Actions[r*d:(r+1)*d])
		}
		row(k, r)
	}
	return nil
}

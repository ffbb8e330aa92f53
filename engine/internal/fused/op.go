package fused

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Input is one input of a fused loss op over rows: a [rows, Width] matrix (a head's output)
// when Width > 0, otherwise rows values of rank Dims ([rows], or [rows, 1] with Dims 2).
type Input struct {
	Name  string
	Dims  int       // the input's rank
	Width int       // > 0: values per row of a [rows, Width] matrix
	D     []float32 // ∂loss/∂input, one per value, written by the op's Do; nil: not differentiated
}

// size is the number of values the input holds over rows rows.
func (in Input) size(rows int) int {
	if in.Width > 0 {
		return rows * in.Width
	}
	return rows
}

// Op is the gorgonia boilerplate of a fused scalar loss op over rows, to embed: its arity,
// type, shapes, hash, the reading of its inputs' values ([Op.Values]) and its gradient (a
// [GradOp] for each input with derivatives). The op that embeds it adds String and Do; its
// Do reads its inputs with Values and writes each differentiated input's Input.D.
type Op struct {
	self   fmt.Stringer // the op that embeds this one: its String names it, its address identifies it
	prefix string       // the package's prefix for errors, "ppo"
	rows   int
	in     []Input
	x      [][]float32 // the last Values
}

// NewOp is the base of the op self (a pointer, one per tower's graph) over rows rows of
// inputs in, whose errors start with prefix.
func NewOp(self fmt.Stringer, prefix string, rows int, in ...Input) Op {
	return Op{self: self, prefix: prefix, rows: rows, in: in, x: make([][]float32, len(in))}
}

func (b *Op) Arity() int { return len(b.in) }
func (b *Op) Type() hm.Type {
	ts := make([]hm.Type, 0, len(b.in)+1)
	for _, in := range b.in {
		ts = append(ts, VecType(in.Dims))
	}
	return hm.NewFnType(append(ts, hm.TypeVariable('a'))...)
}
func (b *Op) ReturnsPtr() bool     { return false }
func (b *Op) CallsExtern() bool    { return false }
func (b *Op) OverwritesInput() int { return -1 }
func (b *Op) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", b.self, b.self) // one op per tower: never merged across graphs
}
func (b *Op) Hashcode() uint32 { return HashOf(b) }

func (b *Op) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if err := b.arity(len(in)); err != nil {
		return nil, err
	}
	for i, d := range in {
		want := b.in[i]
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != want.size(b.rows) || (want.Width > 0 && (s.Dims() != 2 || s[1] != want.Width)) {
			return nil, fmt.Errorf("%s: %s input %s has shape %v, want %d values", b.prefix, b.self, want.Name, d, want.size(b.rows))
		}
	}
	return tensor.ScalarShape(), nil
}

func (b *Op) arity(n int) error {
	if n != len(b.in) {
		return fmt.Errorf("%s: %s takes %d inputs, got %d", b.prefix, b.self, len(b.in), n)
	}
	return nil
}

// Values are the float32 values of a run's inputs, in order (valid until the next call), or
// an error naming the input that is not what the op takes.
func (b *Op) Values(in []G.Value) ([][]float32, error) {
	if err := b.arity(len(in)); err != nil {
		return nil, err
	}
	for i, v := range in {
		var err error
		if b.x[i], err = Floats(v, b.in[i].size(b.rows), b.in[i].Name); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", b.prefix, b.self, err)
		}
	}
	return b.x, nil
}

func (b *Op) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	for i := range min(inputs, len(b.in)) {
		d[i] = b.in[i].D != nil
	}
	return d
}

// SymDiff is each differentiated input's GradOp over the incoming gradient dy (nil for the
// others).
func (b *Op) SymDiff(in G.Nodes, _ *G.Node, dy *G.Node) (G.Nodes, error) {
	if err := b.arity(len(in)); err != nil {
		return nil, err
	}
	out := make(G.Nodes, len(in))
	for i, x := range b.in {
		if x.D == nil {
			continue
		}
		var err error
		if out[i], err = G.ApplyOp(NewGradOp(b.self, x.Name, x.Dims, x.D), in[i], dy); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// HeadInputs are the inputs of h's outputs over rows rows ([rows, Width] each, in Inputs
// order) and their derivatives, which the op's Do has h.Backward write.
func HeadInputs(h Head, rows int) (in []Input, dIn [][]float32) {
	for _, name := range h.Inputs() {
		d := make([]float32, rows*h.Width())
		in, dIn = append(in, Input{Name: name, Dims: 2, Width: h.Width(), D: d}), append(dIn, d)
	}
	return in, dIn
}

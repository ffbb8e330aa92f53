package fused

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// VecType is the gorgonia type of a float tensor of dims dimensions.
func VecType(dims int) hm.Type { return G.TensorType{Dims: dims, Of: hm.TypeVariable('a')} }

// HashOf is an op's Hashcode from its WriteHash.
func HashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

// Floats returns a float32 tensor value's n elements, or an error naming the input what.
func Floats(v G.Value, n int, what string) ([]float32, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 || d.Shape().TotalSize() != n {
		return nil, fmt.Errorf("input %s is %v, want %d float32 values", what, v, n)
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d.Float32s()[:n], nil
}

// GradOp is (x, dy) → ∂loss/∂x · dy for one input x of a fused scalar loss op, from the
// derivatives the forward op's last Do left in D: the gradient a fused op's SymDiff returns
// for each input.
type GradOp struct {
	fwd  fmt.Stringer // the forward op: one per tower, and so is the gradient's hash
	name string       // the input's name
	dims int          // the input's rank
	d    []float32    // ∂loss/∂x, one value per element of x, written by the forward op
	out  *tensor.Dense
}

// NewGradOp is the gradient op of input name (of rank dims) of the forward op fwd, whose
// every Do writes the input's derivatives into d.
func NewGradOp(fwd fmt.Stringer, name string, dims int, d []float32) *GradOp {
	return &GradOp{fwd: fwd, name: name, dims: dims, d: d}
}

func (op *GradOp) Arity() int { return 2 }
func (op *GradOp) Type() hm.Type {
	t := VecType(op.dims)
	return hm.NewFnType(t, hm.TypeVariable('a'), t)
}
func (op *GradOp) ReturnsPtr() bool     { return true }
func (op *GradOp) CallsExtern() bool    { return false }
func (op *GradOp) OverwritesInput() int { return -1 }
func (op *GradOp) String() string       { return fmt.Sprintf("Grad(%s of %s)", op.name, op.fwd) }
func (op *GradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op.name, op.fwd)
}
func (op *GradOp) Hashcode() uint32 { return HashOf(op) }

func (op *GradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("%s takes 2 inputs, got %d", op, len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok || s.TotalSize() != len(op.d) {
		return nil, fmt.Errorf("%s of %v, want %d values", op, in[0], len(op.d))
	}
	return s.Clone(), nil
}

func (op *GradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("%s takes 2 inputs, got %d", op, len(in))
	}
	dy, err := scalarGrad(op, in[1])
	if err != nil {
		return nil, err
	}
	if op.out == nil {
		op.out = tensor.New(tensor.WithShape(in[0].Shape().Clone()...), tensor.Of(tensor.Float32))
	}
	dst := op.out.Float32s()
	for i, d := range op.d {
		dst[i] = d * dy
	}
	return op.out, nil
}

// scalarGrad is the incoming gradient of a scalar loss: a float32 scalar value.
func scalarGrad(op fmt.Stringer, v G.Value) (float32, error) {
	switch g := v.(type) {
	case *G.F32:
		return float32(*g), nil
	case *tensor.Dense:
		if f, ok := g.Data().(float32); ok {
			return f, nil
		}
		return 0, fmt.Errorf("%s: incoming gradient %v", op, g)
	default:
		return 0, fmt.Errorf("%s: incoming gradient %T", op, v)
	}
}

func (op *GradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *GradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%s has no gradient", op)
}

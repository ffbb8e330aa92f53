package models

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/models/head"
)

// logSoftmaxOp is log softmax over the last axis of a matrix, row by row, with head.LogSoftmax
// (its gradient op with head.LogSoftmaxBackward), so the ops and the sampling maths share one
// implementation. (gorgonia's own LogSoftMax and its gradient start a goroutine per row, which
// costs more than the arithmetic at the batch sizes of a PPO minibatch.)
type logSoftmaxOp struct{ out output }

func (op *logSoftmaxOp) Arity() int            { return 1 }
func (op *logSoftmaxOp) Type() hm.Type         { return matrixType(1) }
func (op *logSoftmaxOp) ReturnsPtr() bool      { return true }
func (op *logSoftmaxOp) CallsExtern() bool     { return false }
func (op *logSoftmaxOp) OverwritesInput() int  { return -1 }
func (op *logSoftmaxOp) String() string        { return "LogSoftmax" }
func (op *logSoftmaxOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.", op.String()) }
func (op *logSoftmaxOp) Hashcode() uint32      { return hashOf(op) }

func (op *logSoftmaxOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%w: LogSoftmax takes 1 input, got %d", ErrShape, len(in))
	}
	m, n, err := shape2(in[0], "LogSoftmax input")
	return tensor.Shape{m, n}, err
}

func (op *logSoftmaxOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%w: LogSoftmax takes 1 input, got %d", ErrShape, len(in))
	}
	s := in[0].Shape()
	if len(s) != 2 {
		return nil, fmt.Errorf("%w: LogSoftmax of %v", ErrShape, s)
	}
	m, n := s[0], s[1]
	x, err := matrix(in[0], m, n, "LogSoftmax input")
	if err != nil {
		return nil, err
	}
	t, y := op.out.get(m, n)
	for i := range m {
		head.LogSoftmax(y[i*n:(i+1)*n], x[i*n:(i+1)*n])
	}
	return t, nil
}

func (op *logSoftmaxOp) DiffWRT(inputs int) []bool { return []bool{true} }

// SymDiff: dx = dy - softmax(x)·Σ_row dy, from the output y = log softmax(x).
func (op *logSoftmaxOp) SymDiff(in G.Nodes, y, dy *G.Node) (G.Nodes, error) {
	dx, err := G.ApplyOp(&logSoftmaxGradOp{}, y, dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// logSoftmaxGradOp is (y, dy) → dx for y = log softmax(x) over rows.
type logSoftmaxGradOp struct{ out output }

func (op *logSoftmaxGradOp) Arity() int            { return 2 }
func (op *logSoftmaxGradOp) Type() hm.Type         { return matrixType(2) }
func (op *logSoftmaxGradOp) ReturnsPtr() bool      { return true }
func (op *logSoftmaxGradOp) CallsExtern() bool     { return false }
func (op *logSoftmaxGradOp) OverwritesInput() int  { return -1 }
func (op *logSoftmaxGradOp) String() string        { return "LogSoftmaxGrad" }
func (op *logSoftmaxGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, "towerrl.", op.String()) }
func (op *logSoftmaxGradOp) Hashcode() uint32      { return hashOf(op) }

func (op *logSoftmaxGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("%w: LogSoftmaxGrad takes 2 inputs, got %d", ErrShape, len(in))
	}
	m, n, err := shape2(in[0], "LogSoftmaxGrad output")
	if err != nil {
		return nil, err
	}
	if m2, n2, err := shape2(in[1], "LogSoftmaxGrad gradient"); err != nil || m2 != m || n2 != n {
		return nil, fmt.Errorf("%w: LogSoftmaxGrad of %v and %v", ErrShape, in[0], in[1])
	}
	return tensor.Shape{m, n}, nil
}

func (op *logSoftmaxGradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("%w: LogSoftmaxGrad takes 2 inputs, got %d", ErrShape, len(in))
	}
	s := in[0].Shape()
	if len(s) != 2 {
		return nil, fmt.Errorf("%w: LogSoftmaxGrad of %v", ErrShape, s)
	}
	m, n := s[0], s[1]
	y, err := matrix(in[0], m, n, "LogSoftmaxGrad output")
	if err != nil {
		return nil, err
	}
	dy, err := matrix(in[1], m, n, "LogSoftmaxGrad gradient")
	if err != nil {
		return nil, err
	}
	t, dx := op.out.get(m, n)
	for i := range m {
		head.LogSoftmaxBackward(dx[i*n:(i+1)*n], y[i*n:(i+1)*n], dy[i*n:(i+1)*n])
	}
	return t, nil
}

func (op *logSoftmaxGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *logSoftmaxGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("%w: %s has no gradient", ErrGraph, op)
}

package engine

import (
	"fmt"
	"slices"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// placeRow writes row (the values of one batch index, in row-major order of shape without
// its batch axis) at index i of axis of dst, a row-major tensor of shape.
func placeRow(dst []float32, shape []int, axis, i int, row []float32) {
	outer, inner := 1, 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	for _, d := range shape[axis+1:] {
		inner *= d
	}
	n := shape[axis]
	for o := range outer {
		copy(dst[(o*n+i)*inner:(o*n+i+1)*inner], row[o*inner:(o+1)*inner])
	}
}

// fillSequences writes rollout r into the trainer's batch as sequences of f.steps steps
// (fillEnvMajor), each with the state the batcher fed at its first step.
func (t *trainer) fillSequences(r *batcher.Rollout) error {
	f := t.pm.(*foreign)
	b := t.batch
	T, n, L := r.T, r.N, f.steps
	if err := t.fillEnvMajor(r, L); err != nil {
		return err
	}
	off := 0
	for _, s := range f.bind.State {
		k := slices.Index(r.StateNames, s.Input)
		if k < 0 {
			return fmt.Errorf("engine: the rollout carries no recurrent state %q (it has %v)", s.Input, r.StateNames)
		}
		size := len(r.States[k]) / (T * n)
		if off+size > b.StateDim {
			return fmt.Errorf("engine: the rollout's recurrent states hold more than the %d values per env the policy declares", b.StateDim)
		}
		seq := 0
		for i := range n {
			for c := range T / L {
				src := c*L*n + i
				copy(b.State[seq*b.StateDim+off:seq*b.StateDim+off+size], r.States[k][src*size:(src+1)*size])
				seq++
			}
		}
		off += size
	}
	if off != b.StateDim {
		return fmt.Errorf("engine: the rollout's recurrent states hold %d values per env, the policy declares %d", off, b.StateDim)
	}
	return nil
}

// criticFeatures finds the features a policy's action layer reads: the data input of the
// Gemm or MatMul (with an Add of a bias) that computes params (its logits or mean), and how
// many values a row of it holds (from the layer's weight initializer). ok is false when
// params is not computed so.
func criticFeatures(m *onnxpb.ModelProto, params string) (features string, width int, ok bool) {
	g := m.GetGraph()
	producer := map[string]*onnxpb.NodeProto{}
	for _, n := range g.GetNode() {
		for _, out := range n.GetOutput() {
			producer[out] = n
		}
	}
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = t
	}
	n := producer[params]
	if n != nil && n.GetOpType() == "Add" && len(n.GetInput()) == 2 {
		for _, in := range n.GetInput() {
			if p := producer[in]; p != nil && p.GetOpType() == "MatMul" {
				n = p
			}
		}
	}
	if n == nil || (n.GetOpType() != "Gemm" && n.GetOpType() != "MatMul") || len(n.GetInput()) < 2 {
		return "", 0, false
	}
	w := inits[n.GetInput()[1]]
	if w == nil || len(w.GetDims()) != 2 {
		return "", 0, false
	}
	in := w.GetDims()[0]
	if n.GetOpType() == "Gemm" && n.AttrInt("transB", 0) != 0 {
		in = w.GetDims()[1]
	}
	if n.GetOpType() == "Gemm" && n.AttrInt("transA", 0) != 0 {
		return "", 0, false
	}
	return n.GetInput()[0], int(in), in > 0
}

package policy

import (
	"sync/atomic"

	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// warmupLRFactor multiplies the learning rate of the value warm-up, when only a new critic
// moves (the actor's gradients are zero, so Adam leaves it where it is): a critic that starts
// from scratch next to a pretrained actor must catch up with returns that are large at once.
const warmupLRFactor = 10

// warmupBoost is Schedule with the rate multiplied by factor for the first iters iterations.
// Once after is set the optimiser counts its steps from 0 again, and the schedule continues
// from the warm-up's perIter·iters steps.
type warmupBoost struct {
	learner.Schedule
	perIter, iters int
	factor         float64
	after          *atomic.Bool
}

func (w *warmupBoost) LR(step int) float64 {
	if w.after.Load() {
		return w.Schedule.LR(step + w.perIter*w.iters)
	}
	return w.factor * w.Schedule.LR(step)
}

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

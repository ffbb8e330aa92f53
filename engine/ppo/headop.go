package ppo

import (
	"fmt"
	"hash"
	"math"
	"strings"

	"github.com/chewxy/hm"
	"github.com/towerrl/towerrl/models/head"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ppoHeadLossOp is ppoLossOp over a policy head's distribution outputs (the categorical
// logits; the Gaussian mean and log standard deviation) instead of per-row log-probabilities
// and entropies: it works those out itself, with their gradients, in the same pass. It replaces
// the dozen small gorgonia ops (and their per-run allocations) of Policy.LogProb and
// Policy.Entropy, which made a tower's fixed cost and kept the garbage collector busy. Its
// inputs are the head's k outputs ([rows, width] each), then value, advantages, returns, old
// logp and old values; the actions are the tower's, written into the head before each run.
type ppoHeadLossOp struct {
	ppoLossOp
	head      headTerms
	k         int         // the head's inputs
	logp, ent []float32   // [rows] from the last Do
	dIn       [][]float32 // [k][rows·width] ∂loss/∂input of the last Do
}

// headTerms is one head's share of ppoHeadLossOp.
type headTerms interface {
	// inputs names the head's inputs; each is [rows, width()].
	inputs() []string
	width() int
	// forward writes each row's log-probability of the tower's action and its entropy,
	// or returns an error naming a bad action.
	forward(in [][]float32, logp, ent []float32) error
	// backward writes ∂loss/∂input from each row's ∂loss/∂logp and the (shared) ∂loss/∂H.
	backward(dLogp []float32, dEnt float64, dIn [][]float32)
}

func newPPOHeadLossOp(c Coefs, rows, valueDims int, head headTerms) *ppoHeadLossOp {
	op := &ppoHeadLossOp{
		ppoLossOp: ppoLossOp{c: c, rows: rows, valueDims: valueDims},
		head:      head, k: len(head.inputs()),
		logp: make([]float32, rows), ent: make([]float32, rows),
	}
	for range op.k {
		op.dIn = append(op.dIn, make([]float32, rows*head.width()))
	}
	return op
}

// inputName names input i of the op.
func (op *ppoHeadLossOp) inputName(i int) string {
	if i < op.k {
		return op.head.inputs()[i]
	}
	return ppoInputs[i-op.k+2]
}

func (op *ppoHeadLossOp) Arity() int { return op.k + 5 }
func (op *ppoHeadLossOp) Type() hm.Type {
	ts := make([]hm.Type, 0, op.k+6)
	for range op.k {
		ts = append(ts, vecType(2))
	}
	v := vecType(1)
	ts = append(ts, vecType(op.valueDims), v, v, v, v, hm.TypeVariable('a'))
	return hm.NewFnType(ts...)
}
func (op *ppoHeadLossOp) String() string {
	return fmt.Sprintf("PPOLoss(%s)%+v", strings.Join(op.head.inputs(), ","), op.c)
}
func (op *ppoHeadLossOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op) // one op per tower: never merged across graphs
}
func (op *ppoHeadLossOp) Hashcode() uint32 { return hashOf(op) }

// size is the number of values input i holds.
func (op *ppoHeadLossOp) size(i int) int {
	if i < op.k {
		return op.rows * op.head.width()
	}
	return op.rows
}

func (op *ppoHeadLossOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("ppo: %s takes %d inputs, got %d", op, op.Arity(), len(in))
	}
	for i, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != op.size(i) || (i < op.k && (s.Dims() != 2 || s[1] != op.head.width())) {
			return nil, fmt.Errorf("ppo: %s input %s has shape %v, want %d values", op, op.inputName(i), d, op.size(i))
		}
	}
	return tensor.ScalarShape(), nil
}

func (op *ppoHeadLossOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("ppo: %s takes %d inputs, got %d", op, op.Arity(), len(in))
	}
	x := make([][]float32, len(in))
	for i := range in {
		var err error
		if x[i], err = floats(in[i], op.size(i), op.inputName(i)); err != nil {
			return nil, err
		}
	}
	if err := op.head.forward(x[:op.k], op.logp, op.ent); err != nil {
		return nil, err
	}
	r := x[op.k:]
	loss := op.terms(op.logp, op.ent, r[0], r[1], r[2], r[3], r[4])
	op.head.backward(op.dLogp, -op.c.EntCoef/float64(op.rows), op.dIn)
	return G.NewF32(float32(loss)), nil
}

func (op *ppoHeadLossOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	for i := range min(op.k+1, inputs) {
		d[i] = true // the head's inputs and the value
	}
	return d
}

func (op *ppoHeadLossOp) SymDiff(in G.Nodes, _ *G.Node, dy *G.Node) (G.Nodes, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("ppo: %s takes %d inputs, got %d", op, op.Arity(), len(in))
	}
	out := make(G.Nodes, len(in))
	for i := range op.k {
		g, err := G.ApplyOp(&lossGradOp{fwd: &op.ppoLossOp, name: op.inputName(i), dims: 2, d: &op.dIn[i]}, in[i], dy)
		if err != nil {
			return nil, err
		}
		out[i] = g
	}
	g, err := G.ApplyOp(&lossGradOp{fwd: &op.ppoLossOp, name: ppoInputs[2], dims: op.valueDims, d: &op.dValue}, in[op.k], dy)
	if err != nil {
		return nil, err
	}
	out[op.k] = g
	return out, nil
}

// categoricalTerms is the categorical head over logits [rows, n] (head.CategoricalForward
// and CategoricalBackward per row).
type categoricalTerms struct {
	n     int
	acts  []int32   // [rows] the tower's actions, 0 ≤ a < n
	p, ls []float64 // [rows, n] softmax and log-softmax of the last forward
	h     []float64 // [rows] entropy of the last forward
}

func (h *categoricalTerms) inputs() []string { return []string{"logits"} }
func (h *categoricalTerms) width() int       { return h.n }

func (h *categoricalTerms) forward(in [][]float32, logp, ent []float32) error {
	logits, n := in[0], h.n
	if h.p == nil {
		h.p, h.ls, h.h = make([]float64, len(logits)), make([]float64, len(logits)), make([]float64, len(logp))
	}
	for i := range logp {
		a := int(h.acts[i])
		if a < 0 || a >= n {
			return fmt.Errorf("ppo: action %d of row %d is outside [0, %d)", a, i, n)
		}
		lp, e := head.CategoricalForward(logits[i*n:(i+1)*n], a, h.ls[i*n:(i+1)*n], h.p[i*n:(i+1)*n])
		h.h[i] = e
		logp[i], ent[i] = float32(lp), float32(e)
	}
	return nil
}

func (h *categoricalTerms) backward(dLogp []float32, dEnt float64, dIn [][]float32) {
	dz, n := dIn[0], h.n
	for i := range dLogp {
		head.CategoricalBackward(h.ls[i*n:(i+1)*n], h.p[i*n:(i+1)*n], int(h.acts[i]), h.h[i], float64(dLogp[i]), dEnt, dz[i*n:(i+1)*n])
	}
}

// gaussianTerms is the diagonal Gaussian head over mean and log std [rows, d]: the raw
// (unclipped) action's log-density and the entropy (head.GaussianForward and
// GaussianBackward per row).
type gaussianTerms struct {
	d      int
	acts   []float32 // [rows, d] the tower's actions
	z, inv []float64 // [rows, d] (a − μ)/σ and 1/σ of the last forward
}

func (h *gaussianTerms) inputs() []string { return []string{"mean", "log_std"} }
func (h *gaussianTerms) width() int       { return h.d }

func (h *gaussianTerms) forward(in [][]float32, logp, ent []float32) error {
	mean, logStd, d := in[0], in[1], h.d
	if h.z == nil {
		h.z, h.inv = make([]float64, len(mean)), make([]float64, len(mean))
	}
	for i := range logp {
		row := h.acts[i*d : (i+1)*d]
		for j, a := range row {
			if math.IsNaN(float64(a)) || math.IsInf(float64(a), 0) {
				return fmt.Errorf("ppo: action %d of row %d is %v", j, i, a)
			}
		}
		lp, e := head.GaussianForward(row, mean[i*d:(i+1)*d], logStd[i*d:(i+1)*d], h.z[i*d:(i+1)*d], h.inv[i*d:(i+1)*d])
		logp[i], ent[i] = float32(lp), float32(e)
	}
	return nil
}

func (h *gaussianTerms) backward(dLogp []float32, dEnt float64, dIn [][]float32) {
	dMean, dLogStd, d := dIn[0], dIn[1], h.d
	for i := range dLogp {
		head.GaussianBackward(h.z[i*d:(i+1)*d], h.inv[i*d:(i+1)*d], float64(dLogp[i]), dEnt, dMean[i*d:(i+1)*d], dLogStd[i*d:(i+1)*d])
	}
}

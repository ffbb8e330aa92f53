package engine

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"strings"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ppoLossOp is CleanRL's PPO loss as one gorgonia op over rows of
// (logp, entropy, value, advantages, returns, old logp, old values) → the scalar loss:
//
//	loss = mean(max(−A·r, −A·clip(r, 1−ε, 1+ε))) − EntCoef·mean(H) + VfCoef·½·mean(V),
//	r = exp(logp − old logp), V = max((v − R)², (v_clip − R)²) (or (v − R)² without ClipVLoss),
//	v_clip = old v + clip(v − old v, −ε, ε).
//
// One op instead of some sixty small ones (forward and backward) is what keeps a tower's fixed
// cost per minibatch low, and so lets several towers run in parallel. Do also works out each
// row's derivative with respect to logp and v (at ties of the max, the unclipped term's), and
// the three gradient ops only scale those by the incoming gradient. The op belongs to one
// tower's graph: its statistics are those of the graph's last run.
type ppoLossOp struct {
	c         Loss
	rows      int
	valueDims int // 1 for a [rows] value, 2 for [rows, 1]

	dLogp, dValue []float32  // ∂loss/∂logp_i, ∂loss/∂v_i from the last Do
	dEnt          []float32  // ∂loss/∂H_i = −EntCoef/rows, the same for every row and run
	stats         [6]float64 // ppoStats of the last Do
}

func vecType(dims int) hm.Type { return G.TensorType{Dims: dims, Of: hm.TypeVariable('a')} }

func (op *ppoLossOp) inputTypes() []hm.Type {
	v := vecType(1)
	return []hm.Type{v, v, vecType(op.valueDims), v, v, v, v}
}

func (op *ppoLossOp) Arity() int { return 7 }
func (op *ppoLossOp) Type() hm.Type {
	return hm.NewFnType(append(op.inputTypes(), hm.TypeVariable('a'))...)
}
func (op *ppoLossOp) ReturnsPtr() bool     { return false }
func (op *ppoLossOp) CallsExtern() bool    { return false }
func (op *ppoLossOp) OverwritesInput() int { return -1 }
func (op *ppoLossOp) String() string       { return fmt.Sprintf("PPOLoss%+v", op.c) }
func (op *ppoLossOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op) // one op per tower: never merged across graphs
}
func (op *ppoLossOp) Hashcode() uint32 { return hashOf(op) }

func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *ppoLossOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("engine: PPOLoss takes 7 inputs, got %d", len(in))
	}
	for k, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != op.rows {
			return nil, fmt.Errorf("engine: PPOLoss input %d has shape %v, want %d values", k, d, op.rows)
		}
	}
	return tensor.ScalarShape(), nil
}

// floats returns a float32 tensor value's elements.
func floats(v G.Value, n int, what string) ([]float32, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 || d.Shape().TotalSize() != n {
		return nil, fmt.Errorf("engine: PPOLoss %s is %v, want %d float32 values", what, v, n)
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d.Float32s()[:n], nil
}

var ppoInputs = [7]string{"logp", "entropy", "value", "advantages", "returns", "old logp", "old values"}

func (op *ppoLossOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("engine: PPOLoss takes 7 inputs, got %d", len(in))
	}
	var x [7][]float32
	for k := range in {
		var err error
		if x[k], err = floats(in[k], op.rows, ppoInputs[k]); err != nil {
			return nil, err
		}
	}
	return G.NewF32(float32(op.terms(x[0], x[1], x[2], x[3], x[4], x[5], x[6]))), nil
}

// terms works out the loss over the rows' log-probabilities and entropies, with the statistics
// and each row's derivatives with respect to logp and v, and returns the loss.
func (op *ppoLossOp) terms(logp, ent, v, adv, ret, oldLogp, oldV []float32) float64 {
	if op.dLogp == nil {
		op.dLogp, op.dValue, op.dEnt = make([]float32, op.rows), make([]float32, op.rows), make([]float32, op.rows)
		for i := range op.dEnt {
			op.dEnt[i] = float32(-op.c.EntCoef / float64(op.rows))
		}
	}
	c, n := op.c, float64(op.rows)
	lo, hi := 1-c.ClipCoef, 1+c.ClipCoef
	var pg, vl, h, kl, clipped float64
	for i := range op.rows {
		lr := float64(logp[i]) - float64(oldLogp[i])
		r := math.Exp(lr)
		a := float64(adv[i])
		unclipped, clippedTerm := -a*r, -a*min(max(r, lo), hi)
		if unclipped >= clippedTerm {
			pg += unclipped
			op.dLogp[i] = float32(-a * r / n)
		} else {
			pg += clippedTerm
			op.dLogp[i] = 0
		}
		kl += (r - 1) - lr
		if math.Abs(r-1) > c.ClipCoef {
			clipped++
		}
		d := float64(v[i]) - float64(ret[i])
		term, grad := d*d, 2*d
		if c.ClipVLoss {
			delta := float64(v[i]) - float64(oldV[i])
			dc := float64(oldV[i]) + min(max(delta, -c.ClipCoef), c.ClipCoef) - float64(ret[i])
			if dc*dc > term {
				term = dc * dc
				grad = 0
				if delta > -c.ClipCoef && delta < c.ClipCoef {
					grad = 2 * dc
				}
			}
		}
		vl += term
		op.dValue[i] = float32(c.VfCoef * 0.5 * grad / n)
		h += float64(ent[i])
	}
	pg, vl, h = pg/n, 0.5*vl/n, h/n
	loss := pg - c.EntCoef*h + c.VfCoef*vl
	op.stats = [6]float64{loss, pg, vl, h, kl / n, clipped / n}
	return loss
}

func (op *ppoLossOp) DiffWRT(int) []bool { return []bool{true, true, true, false, false, false, false} }

func (op *ppoLossOp) SymDiff(in G.Nodes, _ *G.Node, dy *G.Node) (G.Nodes, error) {
	if len(in) != 7 {
		return nil, fmt.Errorf("engine: PPOLoss takes 7 inputs, got %d", len(in))
	}
	out := make(G.Nodes, 7)
	for k, d := range []*[]float32{&op.dLogp, &op.dEnt, &op.dValue} {
		dims := 1
		if k == 2 {
			dims = op.valueDims
		}
		g, err := G.ApplyOp(&lossGradOp{fwd: op, name: ppoInputs[k], dims: dims, d: d}, in[k], dy)
		if err != nil {
			return nil, err
		}
		out[k] = g
	}
	return out, nil
}

// lossGradOp is (x, dy) → ∂loss/∂x · dy for one input x of a fused loss op (ppoLossOp,
// ppoHeadLossOp), from the derivatives the forward op's last Do left in *d.
type lossGradOp struct {
	fwd  *ppoLossOp // the forward op: one per tower, so the hash is too
	name string     // the input's name
	dims int        // the input's rank
	d    *[]float32 // ∂loss/∂x, one value per element of x
	out  *tensor.Dense
}

func (op *lossGradOp) Arity() int { return 2 }
func (op *lossGradOp) Type() hm.Type {
	t := vecType(op.dims)
	return hm.NewFnType(t, hm.TypeVariable('a'), t)
}
func (op *lossGradOp) ReturnsPtr() bool     { return true }
func (op *lossGradOp) CallsExtern() bool    { return false }
func (op *lossGradOp) OverwritesInput() int { return -1 }
func (op *lossGradOp) String() string       { return fmt.Sprintf("PPOLossGrad(%s)", op.name) }
func (op *lossGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "towerrl.%s.%p", op, op.fwd)
}
func (op *lossGradOp) Hashcode() uint32 { return hashOf(op) }

func (op *lossGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("engine: %s takes 2 inputs, got %d", op, len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("engine: %s of %v", op, in[0])
	}
	return s.Clone(), nil
}

func (op *lossGradOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("engine: %s takes 2 inputs, got %d", op, len(in))
	}
	dy, err := scalarGrad(op, in[1])
	if err != nil {
		return nil, err
	}
	if op.out == nil {
		op.out = tensor.New(tensor.WithShape(in[0].Shape().Clone()...), tensor.Of(tensor.Float32))
	}
	dst := op.out.Float32s()
	for i, d := range *op.d {
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
		return 0, fmt.Errorf("engine: %s: incoming gradient %v", op, g)
	default:
		return 0, fmt.Errorf("engine: %s: incoming gradient %T", op, v)
	}
}

func (op *lossGradOp) DiffWRT(inputs int) []bool { return make([]bool, inputs) }
func (op *lossGradOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("engine: %s has no gradient", op)
}

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

func newPPOHeadLossOp(c Loss, rows, valueDims int, head headTerms) *ppoHeadLossOp {
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
		return nil, fmt.Errorf("engine: %s takes %d inputs, got %d", op, op.Arity(), len(in))
	}
	for i, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok || s.TotalSize() != op.size(i) || (i < op.k && (s.Dims() != 2 || s[1] != op.head.width())) {
			return nil, fmt.Errorf("engine: %s input %s has shape %v, want %d values", op, op.inputName(i), d, op.size(i))
		}
	}
	return tensor.ScalarShape(), nil
}

func (op *ppoHeadLossOp) Do(in ...G.Value) (G.Value, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("engine: %s takes %d inputs, got %d", op, op.Arity(), len(in))
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
		return nil, fmt.Errorf("engine: %s takes %d inputs, got %d", op, op.Arity(), len(in))
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

// categoricalTerms is the categorical head over logits [rows, n]: log-softmax, the taken
// action's log-probability and the entropy, in float64 per row.
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
			return fmt.Errorf("engine: action %d of row %d is outside [0, %d)", a, i, n)
		}
		z, ls, p := logits[i*n:(i+1)*n], h.ls[i*n:(i+1)*n], h.p[i*n:(i+1)*n]
		m := float64(z[0])
		for _, v := range z[1:] {
			m = max(m, float64(v))
		}
		var sum float64
		for _, v := range z {
			sum += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(sum)
		var e float64
		for j, v := range z {
			l := float64(v) - lse
			pj := math.Exp(l)
			ls[j], p[j] = l, pj
			e -= pj * l
		}
		h.h[i] = e
		logp[i], ent[i] = float32(ls[a]), float32(e)
	}
	return nil
}

// backward: ∂logp/∂z_j = 1[j=a] − p_j, ∂H/∂z_j = −p_j(ls_j + H).
func (h *categoricalTerms) backward(dLogp []float32, dEnt float64, dIn [][]float32) {
	dz, n := dIn[0], h.n
	for i := range dLogp {
		dl, e := float64(dLogp[i]), h.h[i]
		for j := range n {
			k := i*n + j
			pj := h.p[k]
			d := -dl*pj - dEnt*pj*(h.ls[k]+e)
			if j == int(h.acts[i]) {
				d += dl
			}
			dz[k] = float32(d)
		}
	}
}

// gaussianTerms is the diagonal Gaussian head over mean and log std [rows, d]: the raw
// (unclipped) action's log-density and the entropy, in float64 per row.
type gaussianTerms struct {
	d      int
	acts   []float32 // [rows, d] the tower's actions
	z, inv []float64 // [rows, d] (a − μ)/σ and 1/σ of the last forward
}

// halfLog2Pi is ½·log(2π), the Gaussian log-density's constant per dimension.
const halfLog2Pi = 0.91893853320467274178

func (h *gaussianTerms) inputs() []string { return []string{"mean", "log_std"} }
func (h *gaussianTerms) width() int       { return h.d }

func (h *gaussianTerms) forward(in [][]float32, logp, ent []float32) error {
	mean, logStd, d := in[0], in[1], h.d
	if h.z == nil {
		h.z, h.inv = make([]float64, len(mean)), make([]float64, len(mean))
	}
	for i := range logp {
		var lp, e float64
		for j := range d {
			k := i*d + j
			a := float64(h.acts[k])
			if math.IsNaN(a) || math.IsInf(a, 0) {
				return fmt.Errorf("engine: action %d of row %d is %v", j, i, a)
			}
			s := float64(logStd[k])
			inv := math.Exp(-s)
			z := (a - float64(mean[k])) * inv
			h.z[k], h.inv[k] = z, inv
			lp += -0.5*z*z - s
			e += s
		}
		logp[i] = float32(lp - float64(d)*halfLog2Pi)
		ent[i] = float32(e + float64(d)*(0.5+halfLog2Pi))
	}
	return nil
}

// backward: ∂logp/∂μ_j = z_j/σ_j, ∂logp/∂s_j = z_j² − 1, ∂H/∂s_j = 1.
func (h *gaussianTerms) backward(dLogp []float32, dEnt float64, dIn [][]float32) {
	dMean, dLogStd, d := dIn[0], dIn[1], h.d
	for i := range dLogp {
		dl := float64(dLogp[i])
		for j := range d {
			k := i*d + j
			z := h.z[k]
			dMean[k] = float32(dl * z * h.inv[k])
			dLogStd[k] = float32(dl*(z*z-1) + dEnt)
		}
	}
}

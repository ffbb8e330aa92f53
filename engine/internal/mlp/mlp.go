// Package mlp is a dense network (x·W + b layers, a hidden activation, a linear output) with an
// explicit forward and backward pass over the float32 kernels of internal/kernels, for the
// off-policy algorithms (engine/dqn, engine/sac): their updates run several small networks
// (online and target Q-networks, an actor and twin critics) on one batch, feed one network's
// output into another and need the gradient with respect to a network's input (SAC's actor
// loss goes through the critics' action input), which a gorgonia graph per network would make
// slow and awkward.
//
// Parameters live in a flat []float32 owned by the caller, layer by layer: W [in, out]
// row-major (the transpose of PyTorch's nn.Linear weight, as package models stores them), then
// b [out]. [Net.Init] draws them as nn.Linear's default initialisation does.
//
// Threading: a Net is a value, safe to share; a [Work] holds one batch's activations and
// belongs to one goroutine. Forward and Backward read the parameters in place and allocate
// nothing.
package mlp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/models"
)

// ErrShape is wrapped by the errors of New about a network's shape.
var ErrShape = errors.New("mlp: bad network shape")

// Net is a dense network's shape: In inputs, layers of the widths in Sizes (the last is the
// output), Act after every layer but the last.
type Net struct {
	In    int
	Sizes []int
	Act   kernels.Act
}

// New checks and returns the network of in inputs, hidden widths hidden and out outputs.
func New(in int, hidden []int, out int, act kernels.Act) (Net, error) {
	if in < 1 || out < 1 {
		return Net{}, fmt.Errorf("%w: %d inputs, %d outputs", ErrShape, in, out)
	}
	for i, h := range hidden {
		if h < 1 {
			return Net{}, fmt.Errorf("%w: hidden layer %d has width %d", ErrShape, i, h)
		}
	}
	if act != kernels.ReLU && act != kernels.Tanh && act != kernels.None {
		return Net{}, fmt.Errorf("%w: activation %d", ErrShape, act)
	}
	sizes := append(append([]int(nil), hidden...), out)
	n := Net{In: in, Sizes: sizes, Act: act}
	total, k := 0, in
	for _, s := range sizes {
		if k > MaxValues/s || total > MaxValues-(k+1)*s {
			return Net{}, fmt.Errorf("%w: %d inputs and widths %v make more than %d parameters", ErrShape, in, sizes, MaxValues)
		}
		total += (k + 1) * s
		k = s
	}
	return n, nil
}

// MaxValues bounds a network's parameters and a Work's values (2³¹, 8 GiB of float32): a
// shape past it is a mistake, refused before anything is allocated.
const MaxValues = 1 << 31

// CheckRows returns an error unless a Work of rows rows holds at most MaxValues values.
func (n Net) CheckRows(rows int) error {
	per := n.In
	for _, s := range n.Sizes {
		per += 2 * s
	}
	if rows < 1 || rows > MaxValues/per {
		return fmt.Errorf("%w: %d rows of %d values each (input, outputs and gradients) are more than %d", ErrShape, rows, per, MaxValues)
	}
	return nil
}

// Out is the number of outputs.
func (n Net) Out() int { return n.Sizes[len(n.Sizes)-1] }

// inOf is layer l's input width.
func (n Net) inOf(l int) int {
	if l == 0 {
		return n.In
	}
	return n.Sizes[l-1]
}

// Layer returns the offsets of layer l's W and b in the flat parameters.
func (n Net) Layer(l int) (w, b int) {
	off := 0
	for i := range l {
		off += (n.inOf(i) + 1) * n.Sizes[i]
	}
	return off, off + n.inOf(l)*n.Sizes[l]
}

// NumParams is the number of parameters.
func (n Net) NumParams() int {
	total := 0
	for l, out := range n.Sizes {
		total += (n.inOf(l) + 1) * out
	}
	return total
}

// Init draws p (NumParams values) as torch.nn.Linear's default does: every weight and bias of
// a layer with fan-in k uniform in [−1/√k, 1/√k).
func (n Net) Init(p []float32, rng *rand.Rand) {
	for l, out := range n.Sizes {
		w, _ := n.Layer(l)
		k := n.inOf(l)
		bound := 1 / math.Sqrt(float64(k))
		for i := range (k + 1) * out {
			p[w+i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
}

// Work holds one batch's input, activations and gradients for a Net, for a fixed number of
// rows.
type Work struct {
	rows int
	x    []float32   // [rows, In]
	h    [][]float32 // layer l's output [rows, Sizes[l]]
	d    [][]float32 // ∂loss/∂(layer l's pre-activation) [rows, Sizes[l]]; the last is DOut
}

// NewWork allocates the buffers of rows rows.
func (n Net) NewWork(rows int) *Work {
	w := &Work{rows: rows, x: make([]float32, rows*n.In)}
	for _, s := range n.Sizes {
		w.h = append(w.h, make([]float32, rows*s))
		w.d = append(w.d, make([]float32, rows*s))
	}
	return w
}

// Prefix is a Work over the first rows rows of w, sharing its buffers: a Forward of w followed
// by a Backward of the prefix carries back only those rows (two batches through the same
// weights in one product, one of them differentiated).
func (w *Work) Prefix(rows int) *Work {
	if rows < 0 || rows > w.rows {
		panic(fmt.Sprintf("mlp: a prefix of %d rows of a Work of %d", rows, w.rows))
	}
	p := &Work{rows: rows, x: w.x[:rows*len(w.x)/max(w.rows, 1)]}
	for l := range w.h {
		width := len(w.h[l]) / max(w.rows, 1)
		p.h = append(p.h, w.h[l][:rows*width])
		p.d = append(p.d, w.d[l][:rows*width])
	}
	return p
}

// Rows is the number of rows.
func (w *Work) Rows() int { return w.rows }

// In is the input [rows, In], for the caller to write.
func (w *Work) In() []float32 { return w.x }

// Out is the output [rows, Out] of the last Forward.
func (w *Work) Out() []float32 { return w.h[len(w.h)-1] }

// Latent is the last hidden layer's output [rows, Sizes[len−2]] of the last Forward, after
// its activation: the features SAC's gSDE draws its noise from. It is nil for a network
// without hidden layers. The caller must not write it (Backward reads it).
func (w *Work) Latent() []float32 {
	if len(w.h) < 2 {
		return nil
	}
	return w.h[len(w.h)-2]
}

// DOut is ∂loss/∂output [rows, Out], for the caller to write before Backward.
func (w *Work) DOut() []float32 { return w.d[len(w.d)-1] }

// Forward computes the output of the input in w with parameters p.
func (n Net) Forward(p []float32, w *Work) {
	x := w.x
	last := len(n.Sizes) - 1
	for l, out := range n.Sizes {
		k := n.inOf(l)
		wo, bo := n.Layer(l)
		act := n.Act
		if l == last {
			act = kernels.None
		}
		kernels.Linear(w.rows, out, k, x, p[wo:bo], p[bo:bo+out], w.h[l], act)
		x = w.h[l]
	}
}

// Backward carries DOut back through the last Forward: it writes the parameter gradients into
// g (NumParams values, overwritten) unless g is nil, and the input gradient [rows, In] into dx
// unless dx is nil.
func (n Net) Backward(p []float32, w *Work, g, dx []float32) {
	for l := len(n.Sizes) - 1; l >= 0; l-- {
		out, k := n.Sizes[l], n.inOf(l)
		wo, bo := n.Layer(l)
		x := w.x
		if l > 0 {
			x = w.h[l-1]
		}
		dz := w.d[l]
		if g != nil {
			// dW = xᵀ·dz, db = Σ_rows dz.
			kernels.Gemm(true, false, k, out, w.rows, x, k, dz, out, g[wo:bo], out, false, nil, kernels.None)
			kernels.ColSum(w.rows, out, dz, g[bo:bo+out], false)
		}
		switch {
		case l > 0:
			// ∂/∂(previous pre-activation) = (dz·Wᵀ) ⊙ act'(previous output).
			kernels.GemmActGrad(false, true, w.rows, k, out, dz, out, p[wo:bo], out, w.d[l-1], k, w.h[l-1], k, n.Act)
		case dx != nil:
			kernels.Gemm(false, true, w.rows, k, out, dz, out, p[wo:bo], out, dx, k, false, nil, kernels.None)
		}
	}
}

// InputGradT writes the gradient with respect to inputs [lo, hi) of the last Backward over w
// (with any g and dx) into dst, transposed: dst[(j−lo)·rows + i] is ∂loss/∂x[i, j]. It is one
// product with the rows as its long side: a Backward's dx, rows × In, is a product whose
// columns are the inputs, and internal/kernels is slow on a few column counts (17 to 31, for
// one) that observations often have.
func (n Net) InputGradT(p []float32, w *Work, lo, hi int, dst []float32) {
	out := n.Sizes[0]
	kernels.Gemm(false, true, hi-lo, w.rows, out, p[lo*out:hi*out], out, w.d[0], out, dst, w.rows, false, nil, kernels.None)
}

// Polyak moves target towards p: target ← (1−τ)·target + τ·p, element by element in float32
// (τ = 1 copies p exactly).
func Polyak(target, p []float32, tau float64) {
	if tau == 1 {
		copy(target, p)
		return
	}
	a, b := float32(1-tau), float32(tau)
	for i, v := range p {
		target[i] = a*target[i] + b*v
	}
}

// Export appends the network with parameters p to g, reading g's value x (n.In values a row),
// its layers named scope.0, scope.1, … (their weights scope.L.weight [in, out] and scope.L.bias,
// as the graph's initialisers), and returns the name of the value holding its outputs.
func (n Net) Export(g *models.DenseGraph, p []float32, x, scope string) (string, error) {
	_, out, err := n.ExportLatent(g, p, x, scope)
	return out, err
}

// ExportLatent is Export that also returns the name of the value holding the last hidden
// layer's output (Work.Latent's; x itself for a network without hidden layers).
func (n Net) ExportLatent(g *models.DenseGraph, p []float32, x, scope string) (latent, out string, err error) {
	if len(p) != n.NumParams() {
		return "", "", fmt.Errorf("%w: %d parameters for a network of %d", ErrShape, len(p), n.NumParams())
	}
	var act models.Activation
	switch n.Act {
	case kernels.Tanh:
		act = models.Tanh
	case kernels.ReLU:
		act = models.ReLU
	}
	latent = x
	for l, width := range n.Sizes {
		w, b := n.Layer(l)
		a := act
		if l == len(n.Sizes)-1 {
			a, latent = "", x
		}
		if x, err = g.Dense(x, fmt.Sprintf("%s.%d", scope, l), p[w:b], p[b:b+width], a); err != nil {
			return "", "", err
		}
	}
	return latent, x, nil
}

// PublishLayout places parameters p's layers in the graph Export builds with scope scope
// (scope.l.weight, scope.l.bias), for publishing them in place (bind.Config.Publish): offsets
// into the flat vector, in layer order.
func (n Net) PublishLayout(scope string) []bind.Param {
	ps := make([]bind.Param, 0, 2*len(n.Sizes))
	for l, out := range n.Sizes {
		w, b := n.Layer(l)
		ps = append(ps, bind.Param{Name: fmt.Sprintf("%s.%d.weight", scope, l), Offset: w, Len: b - w},
			bind.Param{Name: fmt.Sprintf("%s.%d.bias", scope, l), Offset: b, Len: out})
	}
	return ps
}

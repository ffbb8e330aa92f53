package fused

import (
	"fmt"
	"math"

	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/models/head"
)

// Head is a policy head's share of a fused loss op: each row's log-probability of its action
// and entropy from the head's outputs, and the gradient back to those outputs. It keeps the
// scratch of its last Forward for Backward: one per op.
type Head interface {
	// Inputs names the head's inputs; each is [rows, Width()].
	Inputs() []string
	Width() int
	// Forward writes each row's log-probability of its action and its entropy, or returns an
	// error naming a bad action and its row (for the caller to prefix with its own context).
	Forward(in [][]float32, logp, ent []float32) error
	// Backward writes ∂loss/∂input from each row's ∂loss/∂logp and the (shared) ∂loss/∂H.
	Backward(dLogp []float32, dEnt float64, dIn [][]float32)
}

// Categorical is the categorical head over logits [rows, n] (head.CategoricalForwardRows, and
// CategoricalBackward per row).
type Categorical struct {
	// Acts are the rows' actions, 0 ≤ a < n, written by the loss before each run.
	Acts  []int32
	n     int
	p, ls []float64 // [rows, n] softmax and log-softmax of the last forward
	h     []float64 // [rows] entropy of the last forward
	lp    []float64 // [rows] log-probabilities of the last forward
}

// NewCategorical makes the categorical head of n actions over rows rows.
func NewCategorical(n, rows int) *Categorical {
	return &Categorical{n: n, Acts: make([]int32, rows), p: make([]float64, rows*n), ls: make([]float64, rows*n),
		h: make([]float64, rows), lp: make([]float64, rows)}
}

func (c *Categorical) Inputs() []string { return []string{"logits"} }
func (c *Categorical) Width() int       { return c.n }

func (c *Categorical) Forward(in [][]float32, logp, ent []float32) error {
	rows, n := len(logp), c.n
	for i, a := range c.Acts[:rows] {
		if a < 0 || int(a) >= n {
			return fmt.Errorf("action %d of row %d is outside [0, %d)", a, i, n)
		}
	}
	head.CategoricalForwardRows(n, in[0], c.Acts[:rows], c.ls, c.p, c.lp, c.h)
	for i := range rows {
		logp[i], ent[i] = float32(c.lp[i]), float32(c.h[i])
	}
	return nil
}

func (c *Categorical) Backward(dLogp []float32, dEnt float64, dIn [][]float32) {
	dz, n := dIn[0], c.n
	if n == 2 && kernels.Categorical2Backward(c.ls, c.p, c.Acts[:len(dLogp)], c.h, dLogp, dEnt, dz) {
		return
	}
	for i := range dLogp {
		head.CategoricalBackward(c.ls[i*n:(i+1)*n], c.p[i*n:(i+1)*n], int(c.Acts[i]), c.h[i], float64(dLogp[i]), dEnt, dz[i*n:(i+1)*n])
	}
}

// Gaussian is the diagonal Gaussian head over mean and log std [rows, d]: the raw action's
// log-density and the entropy (head.GaussianForward and GaussianBackward per row).
type Gaussian struct {
	// Acts are the rows' actions, [rows, d], written by the loss before each run.
	Acts   []float32
	d      int
	z, inv []float64 // [rows, d] (a − μ)/σ and 1/σ of the last forward
}

// NewGaussian makes the Gaussian head of d action dimensions over rows rows.
func NewGaussian(d, rows int) *Gaussian {
	return &Gaussian{d: d, Acts: make([]float32, rows*d), z: make([]float64, rows*d), inv: make([]float64, rows*d)}
}

func (g *Gaussian) Inputs() []string { return []string{"mean", "log_std"} }
func (g *Gaussian) Width() int       { return g.d }

func (g *Gaussian) Forward(in [][]float32, logp, ent []float32) error {
	mean, logStd, d := in[0], in[1], g.d
	for i := range logp {
		row := g.Acts[i*d : (i+1)*d]
		for j, a := range row {
			if math.IsNaN(float64(a)) || math.IsInf(float64(a), 0) {
				return fmt.Errorf("action %d of row %d is %v", j, i, a)
			}
		}
		lp, e := head.GaussianForward(row, mean[i*d:(i+1)*d], logStd[i*d:(i+1)*d], g.z[i*d:(i+1)*d], g.inv[i*d:(i+1)*d])
		logp[i], ent[i] = float32(lp), float32(e)
	}
	return nil
}

func (g *Gaussian) Backward(dLogp []float32, dEnt float64, dIn [][]float32) {
	dMean, dLogStd, d := dIn[0], dIn[1], g.d
	for i := range dLogp {
		head.GaussianBackward(g.z[i*d:(i+1)*d], g.inv[i*d:(i+1)*d], float64(dLogp[i]), dEnt, dMean[i*d:(i+1)*d], dLogStd[i*d:(i+1)*d])
	}
}

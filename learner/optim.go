package learner

import (
	"fmt"
	"math"

	"github.com/towerrl/towerrl/internal/kernels"
)

// Schedule gives the learning rate for the update numbered step (0, 1, ...).
type Schedule interface {
	LR(step int) float64
}

// Constant is a fixed learning rate.
type Constant float64

// LR returns the rate.
func (c Constant) LR(int) float64 { return float64(c) }

// Linear anneals from Start at step 0 to End at step Steps, as CleanRL's anneal_lr does
// (lr·(1 - update/num_updates)); it stays at End afterwards.
type Linear struct {
	Start, End float64
	Steps      int
}

// LR returns the rate at step.
func (l Linear) LR(step int) float64 {
	if l.Steps <= 0 || step >= l.Steps {
		return l.End
	}
	f := float64(step) / float64(l.Steps)
	return l.Start + f*(l.End-l.Start)
}

// Optimizer updates a flat parameter vector from a flat gradient of the same length.
type Optimizer interface {
	// Step applies one update and advances the step counter.
	Step(params, grads []float32) error
	// Steps is the number of updates applied.
	Steps() int
	// CurrentLR is the learning rate the next Step applies.
	CurrentLR() float64
	// State returns the optimiser's slots by name (views, not copies), for checkpoints.
	State() map[string][]float32
	// SetSteps restores the step counter, with State's slots, from a checkpoint.
	SetSteps(n int)
}

// Adam is Kingma & Ba's optimiser as PyTorch implements it (bias-corrected moments; eps added
// to the corrected root of the second moment).
type Adam struct {
	LR           Schedule
	Beta1, Beta2 float64 // default 0.9, 0.999
	Eps          float64 // default 1e-8 (CleanRL's PPO uses 1e-5)
	m, v         []float32
	t            int
}

// NewAdam makes an Adam optimiser for n parameters; zero betas and eps take PyTorch's defaults.
func NewAdam(n int, lr Schedule, beta1, beta2, eps float64) *Adam {
	if beta1 == 0 {
		beta1 = 0.9
	}
	if beta2 == 0 {
		beta2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	return &Adam{LR: lr, Beta1: beta1, Beta2: beta2, Eps: eps, m: make([]float32, n), v: make([]float32, n)}
}

// Step applies p ← p − lr_t·m̂/(√v̂ + ε) with m̂ = m/(1−β₁ᵗ), v̂ = v/(1−β₂ᵗ).
func (a *Adam) Step(params, grads []float32) error {
	if len(params) != len(a.m) || len(grads) != len(a.m) {
		return fmt.Errorf("%w: Adam over %d parameters got %d parameters and %d gradients", ErrConfig, len(a.m), len(params), len(grads))
	}
	lr := a.LR.LR(a.t)
	a.t++
	bc1 := 1 - math.Pow(a.Beta1, float64(a.t))
	bc2 := math.Sqrt(1 - math.Pow(a.Beta2, float64(a.t)))
	step := float32(lr / bc1)
	// 1−β is taken in float64 before rounding, as PyTorch does: 1 − float32(0.999) is off by 1e-5.
	b1, b2, c1, c2 := float32(a.Beta1), float32(a.Beta2), float32(1-a.Beta1), float32(1-a.Beta2)
	eps, sbc2 := float32(a.Eps), float32(bc2)
	// Element by element in float32: m = b1·m + c1·g, v = b2·v + c2·g·g,
	// p −= step·m / (√v / sbc2 + eps); vectorised, with the bits of the plain loop.
	kernels.Adam(params, grads, a.m, a.v, b1, b2, c1, c2, step, sbc2, eps)
	return nil
}

// Steps is the number of updates applied.
func (a *Adam) Steps() int { return a.t }

// CurrentLR is the learning rate the next Step applies.
func (a *Adam) CurrentLR() float64 { return a.LR.LR(a.t) }

// SetSteps restores the step counter.
func (a *Adam) SetSteps(n int) { a.t = n }

// State returns the moment vectors "adam.m" and "adam.v".
func (a *Adam) State() map[string][]float32 {
	return map[string][]float32{"adam.m": a.m, "adam.v": a.v}
}

// SGD is stochastic gradient descent with optional (PyTorch-style) momentum:
// b ← μ·b + g; p ← p − lr·b.
type SGD struct {
	LR       Schedule
	Momentum float64
	buf      []float32
	t        int
}

// NewSGD makes an SGD optimiser for n parameters.
func NewSGD(n int, lr Schedule, momentum float64) *SGD {
	return &SGD{LR: lr, Momentum: momentum, buf: make([]float32, n)}
}

// Step applies one update.
func (s *SGD) Step(params, grads []float32) error {
	if len(params) != len(s.buf) || len(grads) != len(s.buf) {
		return fmt.Errorf("%w: SGD over %d parameters got %d parameters and %d gradients", ErrConfig, len(s.buf), len(params), len(grads))
	}
	lr, mu := float32(s.LR.LR(s.t)), float32(s.Momentum)
	s.t++
	for i, g := range grads {
		if mu != 0 {
			if s.t == 1 {
				s.buf[i] = g
			} else {
				s.buf[i] = mu*s.buf[i] + g
			}
			g = s.buf[i]
		}
		params[i] -= lr * g
	}
	return nil
}

// Steps is the number of updates applied.
func (s *SGD) Steps() int { return s.t }

// CurrentLR is the learning rate the next Step applies.
func (s *SGD) CurrentLR() float64 { return s.LR.LR(s.t) }

// SetSteps restores the step counter.
func (s *SGD) SetSteps(n int) { s.t = n }

// State returns the momentum buffer "sgd.momentum".
func (s *SGD) State() map[string][]float32 { return map[string][]float32{"sgd.momentum": s.buf} }

// ClipGlobalNorm scales grads so that their L2 norm is at most maxNorm, as PyTorch's
// clip_grad_norm_ does (scale maxNorm/(norm+1e-6) when that is below 1), and returns the norm
// before clipping. maxNorm <= 0 leaves grads alone.
func ClipGlobalNorm(grads []float32, maxNorm float64) float64 {
	// Four partial sums (float64) keep four additions in flight at once.
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(grads); i += 4 {
		g := grads[i : i+4 : i+4]
		s0 += float64(g[0]) * float64(g[0])
		s1 += float64(g[1]) * float64(g[1])
		s2 += float64(g[2]) * float64(g[2])
		s3 += float64(g[3]) * float64(g[3])
	}
	for ; i < len(grads); i++ {
		s0 += float64(grads[i]) * float64(grads[i])
	}
	norm := math.Sqrt((s0 + s1) + (s2 + s3))
	if maxNorm > 0 {
		if c := maxNorm / (norm + 1e-6); c < 1 {
			cf := float32(c)
			for i := range grads {
				grads[i] *= cf
			}
		}
	}
	return norm
}

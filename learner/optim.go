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
	next         adamStep // the constants of step t+1, set by prepareStep
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
	a.prepareStep()
	a.stepRange(params, grads, 0, 1)
	a.finishStep()
	return nil
}

// adamStep holds the constants of one Adam step, in float32.
type adamStep struct{ b1, b2, c1, c2, step, sbc2, eps float32 }

func (a *Adam) size() int { return len(a.m) }

func (a *Adam) prepareStep() {
	lr := a.LR.LR(a.t)
	t := float64(a.t + 1)
	bc1 := 1 - math.Pow(a.Beta1, t)
	bc2 := math.Sqrt(1 - math.Pow(a.Beta2, t))
	// 1−β is taken in float64 before rounding, as PyTorch does: 1 − float32(0.999) is off by 1e-5.
	a.next = adamStep{b1: float32(a.Beta1), b2: float32(a.Beta2), c1: float32(1 - a.Beta1), c2: float32(1 - a.Beta2),
		step: float32(lr / bc1), sbc2: float32(bc2), eps: float32(a.Eps)}
}

func (a *Adam) stepRange(params, grads []float32, lo int, scale float32) {
	scaleGrads(grads, scale)
	m, v, s := a.m[lo:lo+len(params)], a.v[lo:lo+len(params)], a.next
	// Element by element in float32: m = b1·m + c1·g, v = b2·v + c2·g·g,
	// p −= step·m / (√v / sbc2 + eps); vectorised, with the bits of the plain loop.
	kernels.Adam(params, grads, m, v, s.b1, s.b2, s.c1, s.c2, s.step, s.sbc2, s.eps)
}

func (a *Adam) finishStep() { a.t++ }

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
	lr, mu   float32 // step t+1's rate and momentum, set by prepareStep
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
	s.prepareStep()
	s.stepRange(params, grads, 0, 1)
	s.finishStep()
	return nil
}

func (s *SGD) size() int { return len(s.buf) }

func (s *SGD) prepareStep() { s.lr, s.mu = float32(s.LR.LR(s.t)), float32(s.Momentum) }

func (s *SGD) stepRange(params, grads []float32, lo int, scale float32) {
	scaleGrads(grads, scale)
	buf := s.buf[lo : lo+len(params)]
	for i, g := range grads {
		if s.mu != 0 {
			if s.t == 0 {
				buf[i] = g
			} else {
				buf[i] = s.mu*buf[i] + g
			}
			g = buf[i]
		}
		params[i] -= s.lr * g
	}
}

func (s *SGD) finishStep() { s.t++ }

// Steps is the number of updates applied.
func (s *SGD) Steps() int { return s.t }

// CurrentLR is the learning rate the next Step applies.
func (s *SGD) CurrentLR() float64 { return s.LR.LR(s.t) }

// SetSteps restores the step counter.
func (s *SGD) SetSteps(n int) { s.t = n }

// State returns the momentum buffer "sgd.momentum".
func (s *SGD) State() map[string][]float32 { return map[string][]float32{"sgd.momentum": s.buf} }

// rangeStepper is an Optimizer whose step can be applied to disjoint ranges of the parameters
// by several goroutines at once, with the same results as Step: Towers with more than one
// tower shard the step over their goroutines through it. prepareStep computes the next step's
// constants, stepRange applies that step to params (the range starting at lo) from grads
// scaled by scale, and finishStep advances the counter; Step is the three over one range.
type rangeStepper interface {
	Optimizer
	size() int // parameters the optimiser was made for
	prepareStep()
	stepRange(params, grads []float32, lo int, scale float32)
	finishStep()
}

var (
	_ rangeStepper = (*Adam)(nil)
	_ rangeStepper = (*SGD)(nil)
)

// scaleGrads multiplies grads by scale (a clipping factor) in place; 1 leaves them alone.
func scaleGrads(grads []float32, scale float32) {
	if scale != 1 {
		for i := range grads {
			grads[i] *= scale
		}
	}
}

// normBlock is the number of gradient values summed into one partial square sum of the global
// norm. The norm is the root of the partial sums added in block order, whatever the number of
// goroutines computing them (one per shard of whole blocks), so it has the same bits for any
// number of towers.
const normBlock = 512

// span is part i of parts of a vector of length values, in whole normBlocks (the last part ends
// at length): the shard of tower i in the averaging, the norm and the optimiser step.
func span(length, parts, i int) (lo, hi int) {
	blocks := (length + normBlock - 1) / normBlock
	return min(i*blocks/parts*normBlock, length), min((i+1)*blocks/parts*normBlock, length)
}

// squareSums writes into sums[k] the square sum of block k of grads, for the blocks of
// grads[lo:hi] (lo a multiple of normBlock), in float64: value j of a block goes to partial
// sum j mod 4, and the block's sum is (s0+s1)+(s2+s3) (kernels.SquareSums, which gives these
// bits on every target).
func squareSums(grads []float32, lo, hi int, sums []float64) {
	kernels.SquareSums(grads[lo:hi], normBlock, sums[lo/normBlock:])
}

// normOf is the global norm from the block square sums, added in block order.
func normOf(sums []float64) float64 {
	var s float64
	for _, v := range sums {
		s += v
	}
	return math.Sqrt(s)
}

// clipScale is the factor that brings a gradient of the given norm within maxNorm, as PyTorch's
// clip_grad_norm_ computes it (maxNorm/(norm+1e-6) when that is below 1), or 1.
func clipScale(norm, maxNorm float64) float32 {
	if c := maxNorm / (norm + 1e-6); maxNorm > 0 && c < 1 {
		return float32(c)
	}
	return 1
}

// ClipGlobalNorm scales grads so that their L2 norm is at most maxNorm, as PyTorch's
// clip_grad_norm_ does (scale maxNorm/(norm+1e-6) when that is below 1), and returns the norm
// before clipping. maxNorm <= 0 leaves grads alone. The norm is accumulated in float64 over
// blocks of 512 values, the blocks' sums added in order (what Towers computes in parallel).
func ClipGlobalNorm(grads []float32, maxNorm float64) float64 {
	var one [1]float64
	sums := one[:]
	if n := (len(grads) + normBlock - 1) / normBlock; n > 1 {
		sums = make([]float64, n)
	}
	squareSums(grads, 0, len(grads), sums)
	norm := normOf(sums)
	scaleGrads(grads, clipScale(norm, maxNorm))
	return norm
}

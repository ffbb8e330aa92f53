package sac

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/engine/internal/mlp"
)

// Generalized State-Dependent Exploration (gSDE; Raffin, Kober and Stulp 2021, "Smooth
// Exploration for Robotic Reinforcement Learning"), as SB3's SAC with use_sde computes it
// (StateDependentNoiseDistribution with full_std, exp and not expln, learn_features off, and
// the actor's mean clipped by Hardtanh(−clip_mean, clip_mean)).
//
// For features z (the actor's last hidden layer, after its activation, detached: no gradient
// reaches the network through the noise) and the clipped mean μ of a state, with σ = exp(log σ)
// a [features, |A|] parameter matrix and W a matrix of independent N(0, σ_kj²) entries:
//
//	u = μ + z·W,  a = tanh(u),
//	log π(a|s) = Σ_j [log N(u_j; μ_j, s_j) − log(1 − a_j² + 10⁻⁶)],  s_j² = Σ_k z_k² σ_kj² + 10⁻⁶,
//
// s_j being the standard deviation of z·W given z. The update draws W = σ ⊙ ε_W once (every row
// of its minibatch, the observations' actions and the next observations' alike, as SB3's
// reset_noise before each gradient step); the gradient reaches log σ through W (the
// reparameterisation) and through s. The acting side draws its own W at the start of each
// collection (SB3's sde_sample_freq −1) or every few steps, and acts with u = μ + z·W for
// every step until the next draw: the exploration is a smooth function of the state, not
// independent noise at every step. SB3 recovers u for log π by atanh of the squashed action,
// clamped below |a| = 1; the update here keeps u itself, which is the same wherever tanh has
// not saturated in float32.

// sdeState is gSDE's matrices, all [features, actDim] row-major.
type sdeState struct {
	latent, actDim int
	clip           float64   // the mean's bound; ≤ 0: none
	eps            []float64 // the update's ε_W
	w, sig2        []float64 // the update's W = σ ⊙ ε_W and σ², from log σ before the update
	actW           []float32 // the acting W, a view of SAC.acting
}

// sdeDefaults fills and checks the gSDE fields of c.
func (c *Config) sdeDefaults() error {
	if !c.UseSDE {
		if c.LogStdInit != 0 || c.ClipMean != 0 {
			return fmt.Errorf("%w: LogStdInit and ClipMean are gSDE's; set UseSDE or drop them", ErrConfig)
		}
		return nil
	}
	switch {
	case c.LogStd != Clamp || c.LogStdMin != -20 || c.LogStdMax != 2:
		return fmt.Errorf("%w: with UseSDE log σ is a parameter matrix, unbounded (SB3's); LogStd and its bounds are plain SAC's, drop them", ErrConfig)
	case len(c.Hidden) == 0:
		return fmt.Errorf("%w: gSDE draws its noise from the actor's last hidden layer; give it at least one (Hidden)", ErrConfig)
	}
	if c.LogStdInit == 0 {
		c.LogStdInit = -3
	}
	if c.ClipMean == 0 {
		c.ClipMean = 2
	}
	if math.IsNaN(c.LogStdInit) || math.IsInf(c.LogStdInit, 0) || math.IsNaN(c.ClipMean) || math.IsInf(c.ClipMean, 0) {
		return fmt.Errorf("%w: LogStdInit %v and ClipMean %v must be finite", ErrConfig, c.LogStdInit, c.ClipMean)
	}
	return nil
}

// newActing allocates the actor's parameters and what the batchers act with: without gSDE
// they are one vector; with it, one buffer holds the network's parameters, log σ (both
// ActorParams, which the actor's Adam steps) and the acting W after them (Acting, published).
func (s *SAC) newActing() {
	np := s.actor.NumParams()
	if !s.cfg.UseSDE {
		s.actorP = make([]float32, np)
		s.acting = s.actorP
		return
	}
	l := s.actor.Sizes[len(s.actor.Sizes)-2]
	m := l * s.actDim
	s.acting = make([]float32, np+2*m)
	s.actorP = s.acting[:np+m]
	for k := range m {
		s.actorP[np+k] = float32(s.cfg.LogStdInit)
	}
	s.sde = &sdeState{latent: l, actDim: s.actDim, clip: s.cfg.ClipMean, eps: make([]float64, m), w: make([]float64, m),
		sig2: make([]float64, m), actW: s.acting[np+m:]}
}

// sdeLogStd is gSDE's log σ, the tail of the actor's parameters.
func (s *SAC) sdeLogStd() []float32 { return s.actorP[s.actor.NumParams():] }

// SDEStd is the mean of gSDE's σ = exp(log σ) over its matrix (SB3's train/std); NaN without
// UseSDE.
func (s *SAC) SDEStd() float64 {
	if s.sde == nil {
		return math.NaN()
	}
	var sum float64
	ls := s.sdeLogStd()
	for _, v := range ls {
		sum += math.Exp(float64(v))
	}
	return sum / float64(len(ls))
}

// ActingNoise is gSDE's acting W (features × actDim, row-major), the matrix the batchers'
// graph multiplies the features by; nil without UseSDE. It is part of Acting.
func (s *SAC) ActingNoise() []float32 {
	if s.sde == nil {
		return nil
	}
	return s.sde.actW
}

// ResampleActingNoise draws gSDE's acting W anew from rng, W = σ ⊙ ε with ε ~ N(0, 1) row-major,
// from log σ as it is now (SB3's reset_noise at a collection's start). Without UseSDE it does
// nothing and draws nothing.
func (s *SAC) ResampleActingNoise(rng *rand.Rand) {
	if s.sde == nil {
		return
	}
	for k, ls := range s.sdeLogStd() {
		s.sde.actW[k] = float32(math.Exp(float64(ls)) * rng.NormFloat64())
	}
}

// drawUpdate draws the update's ε_W from rng, row-major.
func (d *sdeState) drawUpdate(rng *rand.Rand) {
	for k := range d.eps {
		d.eps[k] = rng.NormFloat64()
	}
}

// prepare works out the update's W and σ² from log σ before the update.
func (d *sdeState) prepare(logStd []float32) {
	for k, ls := range logStd {
		sig := math.Exp(float64(ls))
		d.w[k], d.sig2[k] = sig*d.eps[k], sig*sig
	}
}

// sdeHead is gSDE's squashed Gaussian over a tower's rows (head's counterpart): sample makes a
// row's action and log π from the actor's mean and features, keeping what backward and
// logStdGrad need.
type sdeHead struct {
	d      *sdeState
	noise  []float64 // [rows×A] (z·W)_j
	s2     []float64 // [rows×A] s_j²
	act    []float64 // [rows×A] a = tanh(u)
	inside []float64 // [rows×A] 1 where the mean is strictly inside its clip, else 0 (Hardtanh's gradient)
	dn, dv []float64 // [rows×A] ∂loss/∂(z·W)_j and ∂loss/∂(Σ_k z_k² σ_kj²)
	zsum   []float64 // [features×A] scratch of logStdGrad
}

func (s *SAC) newSDEHead(rows int) *sdeHead {
	if s.sde == nil {
		return nil
	}
	n, m := rows*s.actDim, s.sde.latent*s.actDim
	return &sdeHead{d: s.sde, noise: make([]float64, n), s2: make([]float64, n), act: make([]float64, n),
		inside: make([]float64, n), dn: make([]float64, n), dv: make([]float64, n), zsum: make([]float64, 2*m)}
}

// sample computes row i's action into a (A values) from the actor's forward pass w (its
// output, the mean before its clip, and its features) and returns log π(a|s).
func (h *sdeHead) sample(i int, w *mlp.Work, a []float32) float64 {
	A, L := h.d.actDim, h.d.latent
	z, mu := w.Latent()[i*L:(i+1)*L], w.Out()[i*A:(i+1)*A]
	var logp float64
	for j := range A {
		var noise, v float64
		for k, zk32 := range z {
			zk := float64(zk32)
			noise += zk * h.d.w[k*A+j]
			v += zk * zk * h.d.sig2[k*A+j]
		}
		m, inside := float64(mu[j]), 1.0
		if c := h.d.clip; c > 0 && !(m > -c && m < c) {
			m, inside = max(-c, min(c, m)), 0
		}
		s2 := v + 1e-6
		act := math.Tanh(m + noise)
		k := i*A + j
		h.noise[k], h.s2[k], h.act[k], h.inside[k] = noise, s2, act, inside
		a[j] = float32(act)
		logp += -0.5*noise*noise/s2 - 0.5*math.Log(s2) - halfLog2Pi - math.Log(1-act*act+1e-6)
	}
	return logp
}

// backward writes row i's ∂loss/∂(actor outputs) into dOut (A values) from ∂loss/∂log π
// (dLogp) and ∂loss/∂a (dA, A values), and keeps the row's share of log σ's gradient for
// logStdGrad.
func (h *sdeHead) backward(i int, dLogp float64, dA []float64, dOut []float32) {
	for j := range h.d.actDim {
		k := i*h.d.actDim + j
		a, noise, s2 := h.act[k], h.noise[k], h.s2[k]
		g := 1 - a*a
		// u = μ + z·W reaches log π through −log(1 − a² + 10⁻⁶); z·W also through the Gaussian's
		// −(z·W)²/(2s²), and s² through it and −½·log s².
		du := dA[j]*g + dLogp*2*a*g/(g+1e-6)
		dOut[j] = float32(du * h.inside[k])
		h.dn[k] = du - dLogp*noise/s2
		h.dv[k] = 0.5 * dLogp * (noise*noise/(s2*s2) - 1/s2)
	}
}

// logStdGrad writes log σ's gradient over the tower's rows into g (features × A) after every
// row's backward: ∂loss/∂log σ_kj = W_kj·Σ_i z_ik·dn_ij + 2σ_kj²·Σ_i z_ik²·dv_ij, W = σ ⊙ ε
// and σ² = exp(2 log σ) each depending on log σ_kj alone.
func (h *sdeHead) logStdGrad(w *mlp.Work, g []float32) {
	A, L := h.d.actDim, h.d.latent
	m := L * A
	zn, zv := h.zsum[:m], h.zsum[m:]
	clear(h.zsum)
	z := w.Latent()
	for i := range w.Rows() {
		for k, zk32 := range z[i*L : (i+1)*L] {
			zk := float64(zk32)
			for j := range A {
				zn[k*A+j] += zk * h.dn[i*A+j]
				zv[k*A+j] += zk * zk * h.dv[i*A+j]
			}
		}
	}
	for k := range m {
		g[k] = float32(h.d.w[k]*zn[k] + 2*h.d.sig2[k]*zv[k])
	}
}

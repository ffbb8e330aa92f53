package vtraceloss

import (
	"math"
	"math/rand/v2"
)

// lossCase is one tower's worth of loss inputs in float64, the reference's view: the head's
// outputs (logits [rows, w], or mean and log std [rows, w]), values, the rows' actions and
// batch data, and the layout of the rows.
type lossCase struct {
	name      string
	kind      Kind
	c         Coefs
	gaussian  bool
	w         int // logits per row, or action dimensions
	rows      int
	seqLen    int
	timeMajor bool

	params, logStd, values []float64
	acts                   []float64 // [rows] action indices, or [rows, w] Gaussian actions
	bLogp, rew, term       []float64
	trunc, next, ret, adv  []float64
}

// rowOf is the loss row of sequence s's step t.
func (c *lossCase) rowOf(s, t int) int {
	if c.timeMajor {
		return t*(c.rows/c.seqLen) + s
	}
	return s*c.seqLen + t
}

// refLogProbs is log π(a|x) and the entropy of each row, from the definitions: the
// categorical's log-softmax, and the diagonal Gaussian's density
// Σ_j −½((a_j − μ_j)/σ_j)² − log σ_j − ½ log 2π with entropy Σ_j log σ_j + ½ + ½ log 2π.
func refLogProbs(c *lossCase, params, logStd []float64) (logp, ent []float64) {
	logp, ent = make([]float64, c.rows), make([]float64, c.rows)
	w := c.w
	for k := range c.rows {
		z := params[k*w : (k+1)*w]
		if !c.gaussian {
			m := math.Inf(-1)
			for _, v := range z {
				m = math.Max(m, v)
			}
			s := 0.0
			for _, v := range z {
				s += math.Exp(v - m)
			}
			lse := m + math.Log(s)
			for _, v := range z {
				p := math.Exp(v - lse)
				ent[k] -= p * (v - lse)
			}
			logp[k] = z[int(c.acts[k])] - lse
			continue
		}
		for j := range w {
			sd := logStd[k*w+j]
			u := (c.acts[k*w+j] - z[j]) / math.Exp(sd)
			logp[k] += -0.5*u*u - sd - 0.5*math.Log(2*math.Pi)
			ent[k] += sd + 0.5 + 0.5*math.Log(2*math.Pi)
		}
	}
	return logp, ent
}

// refTargets is V-trace from the paper's definitions (Espeholt et al. 2018, eq. 1 and section
// 4.2), as explicit sums rather than a recursion, per sequence:
//
//	ρ_t = π/μ,  δ_t = min(ρ̄, ρ_t)·(r_t + γ·V_{t+1} − V_t),  c_i = λ·min(c̄, ρ_i)
//	v_s = V_s + Σ_{t=s}^{e} γ^{t−s} (Π_{i=s}^{t−1} c_i) δ_t
//	A_s = min(ρ̄, ρ_s)·(r_s + γ·v_{s+1} − V_s)
//
// where e is the first step from s that ends an episode or the sequence; V_{t+1} and v_{t+1}
// are 0 after a termination, the behaviour's successor value (next) after a truncation or
// the sequence's last step, and the current V and v of the next row otherwise. For rows in
// no order, v_s is the row's ret and A_s = min(ρ̄, ρ_s)·adv.
func refTargets(c *lossCase, logp, values []float64) (vs, adv []float64) {
	vs, adv = make([]float64, c.rows), make([]float64, c.rows)
	rho := make([]float64, c.rows)
	for k := range rho {
		rho[k] = math.Exp(logp[k] - c.bLogp[k])
	}
	if c.seqLen == 0 {
		for k := range vs {
			vs[k], adv[k] = c.ret[k], math.Min(c.c.RhoBar, rho[k])*c.adv[k]
		}
		return vs, adv
	}
	g, L := c.c.Gamma, c.seqLen
	for s := range c.rows / L {
		row := func(t int) int { return c.rowOf(s, t) }
		ends := func(t int) bool { return c.term[row(t)] != 0 || c.trunc[row(t)] != 0 || t == L-1 }
		nextV := func(t int) float64 { // V_{t+1} as δ_t sees it
			switch k := row(t); {
			case c.term[k] != 0:
				return 0
			case c.trunc[k] != 0 || t == L-1:
				return c.next[k]
			default:
				return values[row(t+1)]
			}
		}
		delta := func(t int) float64 {
			k := row(t)
			return math.Min(c.c.RhoBar, rho[k]) * (c.rew[k] + g*nextV(t) - values[k])
		}
		for t0 := range L {
			v := values[row(t0)]
			for t := t0; ; t++ {
				prod := 1.0
				for i := t0; i < t; i++ {
					prod *= c.c.Lambda * math.Min(c.c.CBar, rho[row(i)])
				}
				v += math.Pow(g, float64(t-t0)) * prod * delta(t)
				if ends(t) {
					break
				}
			}
			vs[row(t0)] = v
		}
		for t := range L {
			k := row(t)
			nextVS := nextV(t)
			if c.term[k] == 0 && c.trunc[k] == 0 && t < L-1 {
				nextVS = vs[row(t+1)]
			}
			adv[k] = math.Min(c.c.RhoBar, rho[k]) * (c.rew[k] + g*nextVS - values[k])
		}
	}
	return vs, adv
}

// refLoss is the loss over the head's outputs and values with the targets vs and adv held
// fixed (the stop-gradient), and its statistics in the kind's StatNames order.
func refLoss(c *lossCase, params, logStd, values, vs, adv []float64) (float64, []float64) {
	logp, ent := refLogProbs(c, params, logStd)
	n := float64(c.rows)
	var pg, vl, h, kl, clipped, rhoSum, rhoClipped float64
	for k := range c.rows {
		r := math.Exp(logp[k] - c.bLogp[k])
		if c.kind == IMPALA {
			pg += -adv[k] * logp[k]
		} else {
			pg += math.Max(-adv[k]*r, -adv[k]*math.Min(math.Max(r, 1-c.c.ClipCoef), 1+c.c.ClipCoef))
			if r < 1-c.c.ClipCoef || r > 1+c.c.ClipCoef {
				clipped++
			}
		}
		kl += r - 1 - math.Log(r)
		rhoSum += r
		if r > c.c.RhoBar {
			rhoClipped++
		}
		vl += (values[k] - vs[k]) * (values[k] - vs[k])
		h += ent[k]
	}
	pg, vl, h, kl = pg/n, vl/(2*n), h/n, kl/n
	loss := pg + c.c.VfCoef*vl - c.c.EntCoef*h
	if c.kind == APPO {
		loss += c.c.KLCoef * kl
		return loss, []float64{loss, pg, vl, h, kl, clipped / n, rhoSum / n, rhoClipped / n}
	}
	return loss, []float64{loss, pg, vl, h, kl, rhoSum / n, rhoClipped / n}
}

// randomCase makes a case of seqs sequences of seqLen steps (rows in no order when seqLen
// is 0: rows = seqs) with random head outputs and values, behaviour log-probabilities spread
// around the current policy's (so ρ covers [~0.3, ~3] and clipping is active), and the
// episode ends marks (a slice of (row, kind) where kind 1 terminates, 2 truncates, 3 both).
func randomCase(rng *rand.Rand, name string, kind Kind, gaussian bool, seqs, seqLen int, timeMajor bool, ends map[int]int) *lossCase {
	rows := seqs * max(seqLen, 1)
	c := &lossCase{name: name, kind: kind, gaussian: gaussian, w: 3, rows: rows, seqLen: seqLen, timeMajor: timeMajor,
		c: Coefs{Gamma: 0.9, Lambda: 0.95, RhoBar: 1, CBar: 0.9, ClipCoef: 0.2, EntCoef: 0.01, VfCoef: 0.5}}
	if kind == APPO {
		c.c.KLCoef = 0.3
	}
	if gaussian {
		c.w = 2
	}
	vec := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float32ish(rng.NormFloat64() * scale)
		}
		return v
	}
	c.params, c.values = vec(rows*c.w, 1), vec(rows, 1)
	c.rew, c.next, c.ret, c.adv = vec(rows, 1), vec(rows, 2), vec(rows, 2), vec(rows, 1)
	c.term, c.trunc = make([]float64, rows), make([]float64, rows)
	for k, e := range ends {
		// next stays non-zero at a termination: the loss must not read it there.
		c.term[k], c.trunc[k] = float64(e&1), float64(e>>1)
	}
	if gaussian {
		c.logStd = vec(rows*c.w, 0.3)
		c.acts = vec(rows*c.w, 1)
	} else {
		c.acts = make([]float64, rows)
		for k := range c.acts {
			c.acts[k] = float64(rng.IntN(c.w))
		}
	}
	logp, _ := refLogProbs(c, c.params, c.logStd)
	c.bLogp = make([]float64, rows)
	for k := range logp {
		c.bLogp[k] = float32ish(logp[k] + rng.NormFloat64()*0.6)
	}
	return c
}

// float32ish rounds x to float32, so the case's float64 data are exactly the op's.
func float32ish(x float64) float64 { return float64(float32(x)) }

func f32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

package head

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Constants of the squashed Gaussian's log-density, as Stable-Baselines3's
// SquashedDiagGaussianDistribution and TanhBijector have them.
const (
	// squashEpsilon keeps log(1 − a² + ε) finite at a = ±1 (SB3's epsilon, 1e-6).
	squashEpsilon = 1e-6
	// atanhLimit is 1 − float32's machine epsilon (2⁻²³): actions are clamped to ±atanhLimit
	// before atanh, as SB3's TanhBijector.inverse clamps to ±(1 − finfo(float32).eps).
	atanhLimit = 1 - 0x1p-23
)

// TanhGaussian is a diagonal Gaussian over len(Low) dimensions squashed by tanh: u = mean +
// exp(logStd)·ε, a = tanh(u) in [−1, 1], as in Soft Actor-Critic. Its mean and log standard
// deviation are laid out as [Gaussian]'s (mean [batch×D]; log_std shared [D] or per row
// [batch×D]). The log-density of a is that of u with the change of variables:
//
//	log p(a) = Σ_j [ log N(u_j; mean_j, σ_j) − log(1 − a_j² + 1e-6) ],  u_j = atanh(a_j)
//
// with atanh taken of a clamped to ±(1 − 2⁻²³), exactly as SB3 computes it. There is no closed
// form for its entropy; estimate it as the mean of −log p over sampled actions, as SB3 does.
//
// Actions (the squashed a) are what a learner trains on; env actions are a mapped onto
// [Low, High] by Scale (ScaleEnv, the default: low + (a+1)/2·(high−low); ScaleNone: a clipped
// to the bounds).
type TanhGaussian struct {
	Low, High []float32
	Scale     Scale
}

// unit is the squashed action for env action x in dimension j: the inverse of toEnv.
func (g TanhGaussian) unit(x float32, j int) float64 {
	if g.Scale == ScaleNone {
		return float64(x)
	}
	lo, hi := float64(g.Low[j]), float64(g.High[j])
	if hi == lo {
		return 0
	}
	return 2*(float64(x)-lo)/(hi-lo) - 1
}

// toEnv maps squashed action a of dimension j onto the env's bounds.
func (g TanhGaussian) toEnv(a float32, j int) float32 {
	if g.Scale == ScaleNone {
		return min(max(a, g.Low[j]), g.High[j])
	}
	lo, hi := float64(g.Low[j]), float64(g.High[j])
	x := float32(lo + (float64(a)+1)/2*(hi-lo))
	return min(max(x, g.Low[j]), g.High[j]) // rounding may step a hair outside
}

// logDensity is one dimension's term of log p(a): log N(atanh(a); mu, exp(ls)) − log(1 − a² + ε),
// given inv = exp(−ls).
func logDensity(a, mu, ls, inv float64) float64 {
	c := min(max(a, -atanhLimit), atanhLimit)
	u := 0.5 * (math.Log1p(c) - math.Log1p(-c))
	z := (u - mu) * inv
	return -0.5*z*z - ls - halfLog2Pi - math.Log(1-a*a+squashEpsilon)
}

// check validates the buffers; logStd may be nil only when logp is nil (a deterministic policy
// without a recoverable log_std).
func (g TanhGaussian) check(mean, logStd, actions, env, logp []float32) (batch int, shared bool, err error) {
	if g.Scale != "" && g.Scale != ScaleEnv && g.Scale != ScaleNone {
		return 0, false, fmt.Errorf("%w: tanh-gaussian action scale %q; choose env or none", ErrSpec, g.Scale)
	}
	ls := logStd
	if ls == nil {
		if logp != nil {
			return 0, false, fmt.Errorf("head: tanh-gaussian log-probabilities need a log_std")
		}
		ls = mean // stands in for a per-row log_std so that the shape checks pass; never read
	}
	return Gaussian{Low: g.Low, High: g.High}.check(mean, ls, actions, env, logp)
}

// Sample draws a = tanh(mean + exp(logStd)·ε), ε ~ N(0, I), for len(actions)/D rows into
// actions. env, when not nil, receives the env actions; logp, when not nil, log p of the
// float32 action stored (the value a learner recomputes from it).
func (g TanhGaussian) Sample(rng *rand.Rand, mean, logStd, actions, env, logp []float32) error {
	return g.act(rng, mean, logStd, actions, env, logp)
}

// Mode sets actions to tanh(mean), the deterministic action, with env and logp as in Sample.
// logStd may be nil when logp is nil.
func (g TanhGaussian) Mode(mean, logStd, actions, env, logp []float32) error {
	return g.act(nil, mean, logStd, actions, env, logp)
}

func (g TanhGaussian) act(rng *rand.Rand, mean, logStd, actions, env, logp []float32) error {
	batch, shared, err := g.check(mean, logStd, actions, env, logp)
	if err != nil {
		return err
	}
	d := len(g.Low)
	for i := range batch {
		var lp float64
		for j := range d {
			k := i*d + j
			mu := float64(mean[k])
			ls := 0.0
			if logStd != nil {
				ls = float64(logStdRow(logStd, shared, i, d)[j])
			}
			if math.IsNaN(mu) || math.IsNaN(ls) {
				return fmt.Errorf("head: row %d dimension %d has mean %v, log_std %v", i, j, mu, ls)
			}
			std := math.Exp(ls)
			u := mu
			if rng != nil {
				u += std * rng.NormFloat64()
			}
			a := float32(math.Tanh(u))
			actions[k] = a
			if env != nil {
				env[k] = g.toEnv(a, j)
			}
			if logp != nil {
				lp += logDensity(float64(a), mu, ls, 1/std)
			}
		}
		if logp != nil {
			logp[i] = float32(lp)
		}
	}
	return nil
}

// LogProb writes log p of each row of actions (squashed, in [−1, 1]) into logp.
func (g TanhGaussian) LogProb(mean, logStd, actions, logp []float32) error {
	return g.logProb(mean, logStd, actions, logp, false)
}

// EnvLogProb writes log p of each row of env actions into logp: each is first mapped back to
// [−1, 1] by the inverse of Scale. The density is that of the squashed action (SB3's), not of
// the env action: with ScaleEnv they differ by the constant Σ_j log((high_j−low_j)/2).
func (g TanhGaussian) EnvLogProb(mean, logStd, env, logp []float32) error {
	return g.logProb(mean, logStd, env, logp, true)
}

func (g TanhGaussian) logProb(mean, logStd, actions, logp []float32, fromEnv bool) error {
	if logp == nil || logStd == nil {
		return fmt.Errorf("head: LogProb needs a log_std and a logp buffer")
	}
	batch, shared, err := g.check(mean, logStd, actions, nil, logp)
	if err != nil {
		return err
	}
	d := len(g.Low)
	for i := range batch {
		var lp float64
		for j := range d {
			k := i*d + j
			a := float64(actions[k])
			if fromEnv {
				a = g.unit(actions[k], j)
			}
			ls := float64(logStdRow(logStd, shared, i, d)[j])
			if math.IsNaN(a) || a < -1 || a > 1 {
				return fmt.Errorf("head: row %d dimension %d: squashed action %v is outside [-1, 1]", i, j, a)
			}
			lp += logDensity(a, float64(mean[k]), ls, math.Exp(-ls))
		}
		logp[i] = float32(lp)
	}
	return nil
}

// ToEnv maps squashed actions (rows of D values in [−1, 1]) to env actions by Scale: for a
// policy that outputs tanh(mean) itself and acts deterministically.
func (g TanhGaussian) ToEnv(actions, env []float32) error {
	d := len(g.Low)
	if d == 0 || len(g.High) != d || len(actions)%d != 0 || len(env) < len(actions) {
		return fmt.Errorf("head: ToEnv of %d actions into %d for %d dimensions", len(actions), len(env), d)
	}
	for k, a := range actions {
		env[k] = g.toEnv(a, k%d)
	}
	return nil
}

// FromEnv maps env actions back to squashed actions in [−1, 1], the inverse of ToEnv (values
// outside the bounds map outside [−1, 1]).
func (g TanhGaussian) FromEnv(env, actions []float32) error {
	d := len(g.Low)
	if d == 0 || len(g.High) != d || len(env)%d != 0 || len(actions) < len(env) {
		return fmt.Errorf("head: FromEnv of %d actions into %d for %d dimensions", len(env), len(actions), d)
	}
	for k, x := range env {
		actions[k] = float32(g.unit(x, k%d))
	}
	return nil
}

package head

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// halfLog2Pi is ½·log(2π), the Gaussian log-density's constant.
var halfLog2Pi = 0.5 * math.Log(2*math.Pi)

// Categorical is a categorical distribution over N actions, parameterised by logits laid out
// row-major as [batch×N].
type Categorical struct{ N int }

func (c Categorical) check(logits []float32, actions []int32, logp []float32) error {
	if c.N < 1 {
		return fmt.Errorf("%w: categorical head over %d actions", ErrSpec, c.N)
	}
	if len(logits) < len(actions)*c.N {
		return fmt.Errorf("head: %d logits for a batch of %d rows of %d", len(logits), len(actions), c.N)
	}
	if logp != nil && len(logp) < len(actions) {
		return fmt.Errorf("head: logp holds %d values for a batch of %d", len(logp), len(actions))
	}
	return nil
}

// normaliser returns the row's max logit and log Σ exp(l - max), or an error for a NaN row.
func normaliser(row []float32, i int) (float64, float64, error) {
	m := math.Inf(-1)
	for _, l := range row {
		m = math.Max(m, float64(l))
	}
	var sum float64
	for _, l := range row {
		sum += math.Exp(float64(l) - m)
	}
	if math.IsNaN(sum) || math.IsInf(m, 0) {
		return 0, 0, fmt.Errorf("head: logits of row %d are not finite (%v)", i, row)
	}
	return m, math.Log(sum), nil
}

// Sample draws one action per row of logits: len(actions) rows. logp, when not nil, receives
// log softmax(logits)[action].
func (c Categorical) Sample(rng *rand.Rand, logits []float32, actions []int32, logp []float32) error {
	if err := c.check(logits, actions, logp); err != nil {
		return err
	}
	for i := range actions {
		row := logits[i*c.N : (i+1)*c.N]
		m, lse, err := normaliser(row, i)
		if err != nil {
			return err
		}
		// Inverse CDF: the first action whose cumulative probability exceeds u.
		u := rng.Float64()
		a, cum := c.N-1, 0.0
		for k, l := range row {
			cum += math.Exp(float64(l) - m - lse)
			if u < cum {
				a = k
				break
			}
		}
		actions[i] = int32(a)
		if logp != nil {
			logp[i] = float32(float64(row[a]) - m - lse)
		}
	}
	return nil
}

// Mode picks the most probable action of each row (the first one on ties), as argmax does.
func (c Categorical) Mode(logits []float32, actions []int32, logp []float32) error {
	if err := c.check(logits, actions, logp); err != nil {
		return err
	}
	for i := range actions {
		row := logits[i*c.N : (i+1)*c.N]
		m, lse, err := normaliser(row, i)
		if err != nil {
			return err
		}
		a := 0
		for k, l := range row {
			if l > row[a] {
				a = k
			}
		}
		actions[i] = int32(a)
		if logp != nil {
			logp[i] = float32(float64(row[a]) - m - lse)
		}
	}
	return nil
}

// LogProb writes log softmax(logits)[actions[i]] for each row into logp.
func (c Categorical) LogProb(logits []float32, actions []int32, logp []float32) error {
	if logp == nil {
		return fmt.Errorf("head: LogProb needs a logp buffer")
	}
	if err := c.check(logits, actions, logp); err != nil {
		return err
	}
	for i, a := range actions {
		if a < 0 || int(a) >= c.N {
			return fmt.Errorf("head: action %d of row %d is outside 0..%d", a, i, c.N-1)
		}
		row := logits[i*c.N : (i+1)*c.N]
		m, lse, err := normaliser(row, i)
		if err != nil {
			return err
		}
		logp[i] = float32(float64(row[a]) - m - lse)
	}
	return nil
}

// Gaussian is a diagonal Gaussian over len(Low) action dimensions. Its mean is laid out
// [batch×D]; its log standard deviation is either shared, [D], or per row, [batch×D].
// Actions are clipped to [Low, High] for the environment, as SB3 and CleanRL clip: the
// log-probability is that of the unclipped action, which is the one a learner trains on.
type Gaussian struct{ Low, High []float32 }

func (g Gaussian) check(mean, logStd, raw, clipped, logp []float32) (batch int, shared bool, err error) {
	d := len(g.Low)
	if d == 0 || len(g.High) != d {
		return 0, false, fmt.Errorf("%w: gaussian head with %d low and %d high bounds", ErrSpec, d, len(g.High))
	}
	if len(raw)%d != 0 {
		return 0, false, fmt.Errorf("head: action buffer of %d is not a multiple of the action size %d", len(raw), d)
	}
	batch = len(raw) / d
	shared = len(logStd) == d
	switch {
	case len(mean) < batch*d:
		return 0, false, fmt.Errorf("head: %d means for a batch of %d rows of %d", len(mean), batch, d)
	case !shared && len(logStd) < batch*d:
		return 0, false, fmt.Errorf("head: %d log_std values: want %d (shared) or %d (per row)", len(logStd), d, batch*d)
	case clipped != nil && len(clipped) < batch*d:
		return 0, false, fmt.Errorf("head: clipped buffer holds %d values, want %d", len(clipped), batch*d)
	case logp != nil && len(logp) < batch:
		return 0, false, fmt.Errorf("head: logp holds %d values for a batch of %d", len(logp), batch)
	}
	return batch, shared, nil
}

// Sample draws raw = mean + exp(logStd)·ε, ε ~ N(0, I), for len(raw)/D rows. clipped, when
// not nil, receives raw clipped to the bounds; logp, when not nil, the log-density of raw.
func (g Gaussian) Sample(rng *rand.Rand, mean, logStd, raw, clipped, logp []float32) error {
	return g.act(rng, mean, logStd, raw, clipped, logp)
}

// Mode sets raw to the mean (the deterministic action), with clipping and logp as in Sample.
func (g Gaussian) Mode(mean, logStd, raw, clipped, logp []float32) error {
	return g.act(nil, mean, logStd, raw, clipped, logp)
}

func (g Gaussian) act(rng *rand.Rand, mean, logStd, raw, clipped, logp []float32) error {
	batch, shared, err := g.check(mean, logStd, raw, clipped, logp)
	if err != nil {
		return err
	}
	d := len(g.Low)
	for i := range batch {
		var lp float64
		for j := range d {
			k := i*d + j
			ls := logStdOf(logStd, shared, j, k)
			mu := float64(mean[k])
			if math.IsNaN(mu) || math.IsNaN(ls) {
				return fmt.Errorf("head: row %d dimension %d has mean %v, log_std %v", i, j, mu, ls)
			}
			eps := 0.0
			if rng != nil {
				eps = rng.NormFloat64()
			}
			a := float32(mu + math.Exp(ls)*eps)
			raw[k] = a
			if clipped != nil {
				clipped[k] = min(max(a, g.Low[j]), g.High[j])
			}
			// log N(a; mu, σ) with z = (a-mu)/σ computed from the float32 action actually stored.
			z := (float64(a) - mu) / math.Exp(ls)
			lp += -0.5*z*z - ls - halfLog2Pi
		}
		if logp != nil {
			logp[i] = float32(lp)
		}
	}
	return nil
}

// logStdOf is the log_std of element k (dimension j of its row): the shared row's, or its own.
func logStdOf(logStd []float32, shared bool, j, k int) float64 {
	if shared {
		return float64(logStd[j])
	}
	return float64(logStd[k])
}

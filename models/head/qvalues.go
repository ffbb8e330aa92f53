package head

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// QValues acts on a Q-network's outputs, N Q-values a row laid out [batch×N], as DQN's
// collection does: ε-greedily, with probability Epsilon a uniformly random action and
// otherwise the greedy one (the first of the largest Q-values, as argmax picks). The
// log-probability of an action under that policy is log(1 − ε + ε/N) for the greedy action and
// log(ε/N) for another (−Inf when ε is 0), which is what a dataset records.
type QValues struct {
	N       int
	Epsilon float64
}

func (h QValues) check(q []float32, actions []int32, logp []float32) error {
	switch {
	case h.N < 1:
		return fmt.Errorf("%w: qvalues head over %d actions", ErrSpec, h.N)
	case !(h.Epsilon >= 0 && h.Epsilon <= 1):
		return fmt.Errorf("%w: qvalues head with exploration rate ε = %v, want [0, 1]", ErrSpec, h.Epsilon)
	case len(q) < len(actions)*h.N:
		return fmt.Errorf("head: %d Q-values for a batch of %d rows of %d", len(q), len(actions), h.N)
	case logp != nil && len(logp) < len(actions):
		return fmt.Errorf("head: logp holds %d values for a batch of %d", len(logp), len(actions))
	}
	return nil
}

// greedy is the first index of row's largest value; a NaN is an error naming the row.
func greedy(row []float32, i int) (int, error) {
	best := 0
	for k, v := range row {
		if v != v {
			return 0, fmt.Errorf("head: row %d holds a NaN Q-value (action %d): the Q-network diverged", i, k)
		}
		if v > row[best] {
			best = k
		}
	}
	return best, nil
}

// logProb is log π(a) for the ε-greedy policy whose greedy action is g.
func (h QValues) logProb(a, g int) float32 {
	p := h.Epsilon / float64(h.N)
	if a == g {
		p += 1 - h.Epsilon
	}
	return float32(math.Log(p))
}

// SampleRows draws each row's action from its own stream rngs[i]: one uniform number u, and
// when u < ε a second, the random action's index. logp, when not nil, receives each action's
// log-probability under the ε-greedy policy.
func (h QValues) SampleRows(rngs []*rand.Rand, q []float32, actions []int32, logp []float32) error {
	if err := checkStreams(rngs, len(actions)); err != nil {
		return err
	}
	if err := h.check(q, actions, logp); err != nil {
		return err
	}
	for i := range actions {
		g, err := greedy(q[i*h.N:(i+1)*h.N], i)
		if err != nil {
			return err
		}
		a := g
		if h.Epsilon > 0 && rngs[i].Float64() < h.Epsilon {
			a = rngs[i].IntN(h.N)
		}
		actions[i] = int32(a)
		if logp != nil {
			logp[i] = h.logProb(a, g)
		}
	}
	return nil
}

// Mode picks each row's greedy action; logp, when not nil, receives 0, the log-probability of
// the only action a greedy policy takes.
func (h QValues) Mode(q []float32, actions []int32, logp []float32) error {
	if err := h.check(q, actions, logp); err != nil {
		return err
	}
	for i := range actions {
		g, err := greedy(q[i*h.N:(i+1)*h.N], i)
		if err != nil {
			return err
		}
		actions[i] = int32(g)
		if logp != nil {
			logp[i] = 0
		}
	}
	return nil
}

// LogProb writes each row's log-probability of actions[i] under the ε-greedy policy.
func (h QValues) LogProb(q []float32, actions []int32, logp []float32) error {
	if logp == nil {
		return fmt.Errorf("head: LogProb needs a logp buffer")
	}
	if err := h.check(q, actions, logp); err != nil {
		return err
	}
	for i, a := range actions {
		if a < 0 || int(a) >= h.N {
			return fmt.Errorf("head: action %d of row %d is outside 0..%d", a, i, h.N-1)
		}
		g, err := greedy(q[i*h.N:(i+1)*h.N], i)
		if err != nil {
			return err
		}
		logp[i] = h.logProb(int(a), g)
	}
	return nil
}

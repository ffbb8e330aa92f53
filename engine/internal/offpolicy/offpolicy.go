// Package offpolicy holds what the off-policy learners (engine/dqn, engine/sac) share beyond
// their networks (engine/internal/mlp): the checks of the hyper-parameters they have in
// common, and the replay buffer each keeps behind algo.ReplayLearner (Memory), so that the
// engine's off-policy loop hands transitions over and asks for updates without knowing how
// they are stored or sampled.
package offpolicy

import (
	"fmt"
	"math"
)

// Common are the hyper-parameters every off-policy update has, after its defaults.
type Common struct {
	Gamma       float64 // discount, in [0, 1]
	Tau         float64 // Polyak coefficient, in (0, 1]
	AdamEps     float64 // Adam's ε, positive
	MaxGradNorm float64 // clipping norm; any number but NaN (negative or 0: none)
	TargetEvery int     // updates between target updates, ≥ 1
	Minibatch   int     // rows per update, ≥ 1
	Towers      int     // towers the minibatch is split over; it must divide Minibatch
}

// Check returns an error wrapping errConfig (the algorithm's own) that names the first field
// of c out of its range, or nil.
func (c Common) Check(errConfig error) error {
	switch {
	case !(c.Gamma >= 0 && c.Gamma <= 1):
		return fmt.Errorf("%w: Gamma = %v, want [0, 1]", errConfig, c.Gamma)
	case !(c.Tau > 0 && c.Tau <= 1):
		return fmt.Errorf("%w: Tau = %v, want (0, 1]", errConfig, c.Tau)
	case !(c.AdamEps > 0):
		return fmt.Errorf("%w: AdamEps = %v", errConfig, c.AdamEps)
	case math.IsNaN(c.MaxGradNorm):
		return fmt.Errorf("%w: MaxGradNorm is NaN", errConfig)
	case c.TargetEvery < 1:
		return fmt.Errorf("%w: TargetEvery = %d", errConfig, c.TargetEvery)
	case c.Minibatch < 1:
		return fmt.Errorf("%w: Minibatch = %d", errConfig, c.Minibatch)
	case c.Towers < 1 || c.Minibatch%c.Towers != 0:
		return fmt.Errorf("%w: Towers = %d for a minibatch of %d (it must divide it)", errConfig, c.Towers, c.Minibatch)
	}
	return nil
}

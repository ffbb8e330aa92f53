package dqn

import "fmt"

// Start sets the online Q-network and its target to p (Net()'s layout): a fine-tune starts
// from a trained Q-network (train --algo dqn --init-policy), the optimiser as New made it.
func (d *DQN) Start(p []float32) error {
	if len(p) != len(d.params) {
		return fmt.Errorf("%w: starting a Q-network of %d parameters from %d values", ErrConfig, len(d.params), len(p))
	}
	copy(d.params, p)
	copy(d.target, p)
	return nil
}

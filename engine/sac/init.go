package sac

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/engine/replay"
)

// Fine-tuning a trained actor (train --algo sac --init-policy): SAC starts from the actor's
// parameters, with new critics, which learn the actor's values alone for a number of updates
// before the actor moves (WarmUpdate).

// StartActor sets the actor's parameters to p (Actor()'s layout: the mean, then the log std
// before its bound, in the last layer), leaving the critics, their targets and the
// optimisers as New made them.
func (s *SAC) StartActor(p []float32) error {
	if len(p) != len(s.actorP) {
		return fmt.Errorf("%w: starting an actor of %d parameters from %d values", ErrConfig, len(s.actorP), len(p))
	}
	copy(s.actorP, p)
	return nil
}

// WarmUpdate is an update of the critics alone: Update's critics' step and target step on b,
// with the actor and α held; not with UseSDE. It draws the same noise as Update (ε′, then ε,
// which it does not use), so a run's random stream does not depend on where the warm-up ends, and counts
// as an update (Updates).
func (s *SAC) WarmUpdate(ctx context.Context, b *replay.Batch, rng *rand.Rand) (Stats, error) {
	if err := s.check(b); err != nil {
		return Stats{}, err
	}
	if s.sde != nil {
		return Stats{}, fmt.Errorf("%w: a critics-only warm-up with gSDE (a fine-tune starts from an actor with its own log std; UseSDE makes a new one)", ErrConfig)
	}
	n, a := b.Len(), s.actDim
	for i := range n {
		for j := range a {
			s.mb.Actions[i*3*a+2*a+j] = float32(rng.NormFloat64())
		}
	}
	for range n * a {
		rng.NormFloat64()
	}
	s.pack(b)
	var st Stats
	if err := s.criticStep(ctx, &st); err != nil {
		return Stats{}, err
	}
	s.targetStep(&st)
	return st, nil
}

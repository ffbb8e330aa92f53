package engine

import (
	"fmt"
	"slices"

	"github.com/towerrl/towerrl/batcher"
)

// fillSequences writes rollout r into the trainer's batch as sequences of t.seqLen steps
// (fillEnvMajor), each with the states (the policy model's) the batcher fed at its first
// step.
func (t *trainer) fillSequences(r *batcher.Rollout) error {
	b := t.batch
	T, n, L := r.T, r.N, t.seqLen
	if err := t.fillEnvMajor(r, L); err != nil {
		return err
	}
	off := 0
	for _, s := range t.pm.States() {
		k := slices.Index(r.StateNames, s.Name)
		if k < 0 {
			return fmt.Errorf("engine: the rollout carries no recurrent state %q (it has %v)", s.Name, r.StateNames)
		}
		size := len(r.States[k]) / (T * n)
		if off+size > b.StateDim {
			return fmt.Errorf("engine: the rollout's recurrent states hold more than the %d values per env the policy declares", b.StateDim)
		}
		seq := 0
		for i := range n {
			for c := range T / L {
				src := c*L*n + i
				copy(b.State[seq*b.StateDim+off:seq*b.StateDim+off+size], r.States[k][src*size:(src+1)*size])
				seq++
			}
		}
		off += size
	}
	if off != b.StateDim {
		return fmt.Errorf("engine: the rollout's recurrent states hold %d values per env, the policy declares %d", off, b.StateDim)
	}
	return nil
}

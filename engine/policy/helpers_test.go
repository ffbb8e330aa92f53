package policy

import (
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envHeadSpec is the head spec a policy of env id is bound with when the user names nothing:
// the env's observation shape and action space.
func envHeadSpec(t *testing.T, id string) head.Spec {
	t.Helper()
	env, err := envs.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	hs := head.Spec{EnvID: id, ObsShape: env.Observation.Shape}
	if err := hs.SetSpace(env.Action); err != nil {
		t.Fatal(err)
	}
	return hs
}

// sequenceBatch lays rollout r out as a recurrent tower trains it, written here from the
// layout's definition (not the trainer's code): each env's rollout cut into sequences of L
// steps, env-major (env i's sequence c at rows (i·T/L + c)·L ...), each with the states the
// batchers fed at its first step, state after state; advantages and returns are random.
func sequenceBatch(t *testing.T, r *batcher.Rollout, states []State, L int, rng *rand.Rand) *learner.SampleBatch {
	t.Helper()
	T, n, od, ad := r.T, r.N, r.ObsDim, r.ActDim
	dim := 0
	for _, s := range states {
		dim += s.Dim
	}
	mb := learner.NewSampleBatch(T*n, od, ad, dim)
	for i := range n {
		for c := range T / L {
			seq := i*(T/L) + c
			off := 0
			for _, s := range states {
				k := slices.Index(r.StateNames, s.Name)
				if k < 0 {
					t.Fatalf("the rollout carries no state %q", s.Name)
				}
				src := c*L*n + i
				copy(mb.State[seq*dim+off:seq*dim+off+s.Dim], r.States[k][src*s.Dim:(src+1)*s.Dim])
				off += s.Dim
			}
			for step := range L {
				dst, src := seq*L+step, (c*L+step)*n+i
				copy(mb.Obs[dst*od:(dst+1)*od], r.Obs[src*od:(src+1)*od])
				copy(mb.Actions[dst*ad:(dst+1)*ad], r.Actions[src*ad:(src+1)*ad])
				mb.Rewards[dst], mb.Terminated[dst], mb.Truncated[dst] = r.Rewards[src], r.Terminated[src], r.Truncated[src]
				mb.LogP[dst], mb.Values[dst], mb.Version[dst] = r.LogP[src], r.Values[src], r.Version[src]
				mb.Advantages[dst], mb.Returns[dst] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			mb.SeqLens = append(mb.SeqLens, int32(L))
		}
	}
	if err := mb.SetLen(T * n); err != nil {
		t.Fatal(err)
	}
	return mb
}

package learner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/internal/benchscale"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// BenchmarkTowersUpdate times one PPO update (forward, backward, averaging over towers, global
// norm clipping, Adam) of the 64×64 tanh MLP actor-critic with CartPole shapes at minibatch 512,
// for 1 and 2 towers, and reports samples/s; also at minibatch 128 (`make demo`'s: 4 envs × 128
// steps in 4 minibatches, where the fixed cost per update matters most), 4096 (where it
// matters least) and, for 2 towers, 16384 (issue 32's PPO run: 2 workers × 256 envs × 128
// steps in 4 minibatches). The scaling figure is towers=2 against towers=1, both at the default
// GOMAXPROCS (one tower runs as fast with -cpu 1). Two towers need both CPUs at once,
// so anything else running on the machine slows them more than one tower: compare figures
// taken on a quiet machine, with -count 5, or see BenchmarkTowersScaling.
func BenchmarkTowersUpdate(b *testing.B) {
	for _, c := range []struct{ n, mb int }{{1, 512}, {2, 512}, {1, 128}, {2, 128}, {1, 4096}, {2, 4096}, {2, 16384}} {
		n, mb := c.n, c.mb
		name := fmt.Sprintf("towers=%d", n)
		if mb != 512 {
			name += fmt.Sprintf("/minibatch=%d", mb)
		}
		b.Run(name, func(b *testing.B) {
			tw, batch := ppoTowers(b, n, mb)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tw.Update(ctx, batch, 0, mb); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(mb*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkTowersScaling runs the updates of BenchmarkTowersUpdate (minibatch 512) for 1 and 2
// towers in turns, 20 timed updates of each per turn after 3 untimed ones (a tower left idle
// for longer than spin.For parks, and the first update after pays its wake-up), and reports
// the median update time of each and the speed-up, the ratio of the medians (also of their
// fastest fifths, "speedup-p20"). Taking both in the same moments, and quantiles of single
// updates, keeps the figure steady when other work comes and goes; under steady load from
// other processes two towers cannot have both CPUs, and no figure means much.
func BenchmarkTowersScaling(b *testing.B) {
	const mb, timed = 512, 20
	one, batch1 := ppoTowers(b, 1, mb)
	two, batch2 := ppoTowers(b, 2, mb)
	ctx := context.Background()
	update := func(tw *learner.Towers, batch *learner.SampleBatch) func() error {
		return func() error {
			_, err := tw.Update(ctx, batch, 0, mb)
			return err
		}
	}
	benchscale.Compare(b, timed, update(one, batch1), update(two, batch2))
}

// ppoTowers makes n towers of PPO's loss over a fresh 64×64 actor-critic for CartPole and a
// minibatch of mb random rows for them.
func ppoTowers(b testing.TB, n, mb int) (*learner.Towers, *learner.SampleBatch) {
	rng := rand.New(rand.NewPCG(1, 2))
	params, err := models.NewParams(models.Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}}, rng)
	if err != nil {
		b.Fatal(err)
	}
	batch := learner.NewSampleBatch(mb, 4, 1, 0)
	for i := range mb {
		for j := range 4 {
			batch.Obs[i*4+j] = float32(rng.NormFloat64())
		}
		batch.Actions[i] = float32(rng.IntN(2))
		batch.Advantages[i] = float32(rng.NormFloat64())
		batch.Returns[i] = float32(rng.NormFloat64())
		batch.LogP[i] = -0.69
	}
	batch.SetLen(mb)
	tw, err := learner.NewTowers(learner.TowersConfig{N: n, Minibatch: mb, MaxGradNorm: 0.5, NormalizeAdvantages: true},
		params.Data(), learner.NewAdam(params.Size(), learner.Constant(2.5e-4), 0, 0, 1e-5), batch,
		policy.Towers(params, &ppo.PPO{Coefs: ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := tw.Close(); err != nil {
			b.Error(err)
		}
	})
	return tw, batch
}

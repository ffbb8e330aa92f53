package learner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// BenchmarkTowersUpdate times one PPO update (forward, backward, averaging over towers, global
// norm clipping, Adam) of the 64×64 tanh MLP actor-critic with CartPole shapes at minibatch 512,
// for 1 and 2 towers, and reports samples/s (also at minibatch 4096, where the towers' fixed
// per-graph cost matters less). Run it with -cpu 1 for the one-core figure and -cpu 2 for two
// towers on two cores.
func BenchmarkTowersUpdate(b *testing.B) {
	for _, c := range []struct{ n, mb int }{{1, 512}, {2, 512}, {1, 4096}, {2, 4096}} {
		n, mb := c.n, c.mb
		name := fmt.Sprintf("towers=%d", n)
		if mb != 512 {
			name += fmt.Sprintf("/minibatch=%d", mb)
		}
		b.Run(name, func(b *testing.B) {
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
				engine.PPOTowers(params, ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}))
			if err != nil {
				b.Fatal(err)
			}
			defer tw.Close()
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

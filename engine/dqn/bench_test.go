package dqn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/engine/replay"
)

// BenchmarkUpdate is one Double DQN update with RL Zoo's 256×256 ReLU Q-network at
// CartPole's sizes (4 observations, 2 actions) with minibatch 64 and Acrobot's (6, 3) with
// 128, on 1 and 2 towers: issue 30's update speed figure (scripts/offpolicy_bench.py runs it
// beside PyTorch).
func BenchmarkUpdate(b *testing.B) {
	for _, c := range []struct{ batch, obs, actions int }{{64, 4, 2}, {128, 6, 3}} {
		for _, towers := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/towers=%d", c.batch, towers), func(b *testing.B) {
				d, err := New(Config{Hidden: []int{256, 256}, Minibatch: c.batch, Towers: towers, TargetEvery: 1000},
					c.obs, c.actions, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				data := rand.New(rand.NewPCG(2, 2))
				batch := replay.NewBatch(c.batch, c.obs, 1)
				for _, col := range [][]float32{batch.Obs, batch.NextObs, batch.Rewards} {
					for i := range col {
						col[i] = float32(data.NormFloat64())
					}
				}
				for i := range batch.Actions {
					batch.Actions[i] = float32(data.IntN(c.actions))
				}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.Update(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
			})
		}
	}
}

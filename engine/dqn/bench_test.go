package dqn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/internal/benchscale"
)

// benchSizes are BenchmarkUpdate's cases: RL Zoo's 256×256 ReLU Q-network at CartPole's sizes
// (4 observations, 2 actions) with minibatch 64 and Acrobot's (6, 3) with 128.
var benchSizes = []struct{ batch, obs, actions int }{{64, 4, 2}, {128, 6, 3}}

// BenchmarkUpdate is one Double DQN update with RL Zoo's 256×256 ReLU Q-network at
// CartPole's sizes (4 observations, 2 actions) with minibatch 64 and Acrobot's (6, 3) with
// 128, on 1 and 2 towers: issue 30's update speed figure (scripts/offpolicy_bench.py runs it
// beside PyTorch).
func BenchmarkUpdate(b *testing.B) {
	for _, c := range benchSizes {
		for _, towers := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/towers=%d", c.batch, towers), func(b *testing.B) {
				d, batch := benchDQN(b, c.batch, c.obs, c.actions, towers)
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

// BenchmarkUpdateScaling runs BenchmarkUpdate's updates on 1 and 2 towers in turns, 20 timed
// updates of each per turn after 3 untimed ones, and reports the median update time of each
// and the speed-up, the ratio of the medians (also of their fastest fifths, "speedup-p20"), as
// learner's BenchmarkTowersScaling does for PPO: on a machine whose load comes and goes, taking
// both in the same moments and quantiles of single updates keeps the ratio steadier than two
// BenchmarkUpdate runs one after the other.
func BenchmarkUpdateScaling(b *testing.B) {
	for _, c := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", c.batch), func(b *testing.B) {
			var ds [2]*DQN
			var batches [2]*replay.Batch
			for k := range ds {
				ds[k], batches[k] = benchDQN(b, c.batch, c.obs, c.actions, k+1)
			}
			ctx := context.Background()
			update := func(k int) func() error {
				return func() error {
					_, err := ds[k].Update(ctx, batches[k])
					return err
				}
			}
			benchscale.Compare(b, 20, update(0), update(1))
		})
	}
}

// benchDQN makes a DQN with a 256×256 Q-network on towers towers for observations of obs
// values and actions actions, and a minibatch of batch random transitions for it; the DQN is
// closed when the benchmark ends.
func benchDQN(b *testing.B, batch, obs, actions, towers int) (*DQN, *replay.Batch) {
	d, err := New(Config{Hidden: []int{256, 256}, Minibatch: batch, Towers: towers, TargetEvery: 1000},
		obs, actions, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := d.Close(); err != nil {
			b.Error(err)
		}
	})
	data := rand.New(rand.NewPCG(2, 2))
	mb := replay.NewBatch(batch, obs, 1)
	for _, col := range [][]float32{mb.Obs, mb.NextObs, mb.Rewards} {
		for i := range col {
			col[i] = float32(data.NormFloat64())
		}
	}
	for i := range mb.Actions {
		mb.Actions[i] = float32(data.IntN(actions))
	}
	return d, mb
}

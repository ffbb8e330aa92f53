package sac

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/internal/benchscale"
)

// BenchmarkUpdate is one SAC update at HalfCheetah's sizes (17 observations, 6 actions),
// 256×256 ReLU actor and twin critics, minibatch 256, on 1 and 2 towers: issue 30's update
// speed figure (scripts/offpolicy_bench.py runs it beside PyTorch).
func BenchmarkUpdate(b *testing.B) {
	for _, towers := range []int{1, 2} {
		b.Run(fmt.Sprintf("towers=%d", towers), func(b *testing.B) {
			s, batch, data := benchSAC(b, towers)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Update(ctx, batch, data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}

// BenchmarkUpdateScaling runs BenchmarkUpdate's updates on 1 and 2 towers in turns, 20 timed
// updates of each per turn after 3 untimed ones, and reports the median update time of each
// and the speed-up, the ratio of the medians (also of their fastest fifths, "speedup-p20"), as
// engine/dqn's BenchmarkUpdateScaling does: issue 30's two-tower figure, steadier than two
// BenchmarkUpdate runs one after the other on a machine whose load comes and goes.
func BenchmarkUpdateScaling(b *testing.B) {
	var ss [2]*SAC
	var batches [2]*replay.Batch
	var rngs [2]*rand.Rand
	for k := range ss {
		ss[k], batches[k], rngs[k] = benchSAC(b, k+1)
	}
	ctx := context.Background()
	update := func(k int) func() error {
		return func() error {
			_, err := ss[k].Update(ctx, batches[k], rngs[k])
			return err
		}
	}
	benchscale.Compare(b, 20, update(0), update(1))
}

// benchSAC makes a SAC at HalfCheetah's sizes on towers towers, a minibatch of 256 random
// transitions for it and the random source of its updates; the SAC is closed when the
// benchmark ends.
func benchSAC(b *testing.B, towers int) (*SAC, *replay.Batch, *rand.Rand) {
	s, err := New(Config{Minibatch: 256, Towers: towers}, 17, 6, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	data := rand.New(rand.NewPCG(2, 2))
	batch := replay.NewBatch(256, 17, 6)
	for _, col := range [][]float32{batch.Obs, batch.NextObs, batch.Rewards} {
		for i := range col {
			col[i] = float32(data.NormFloat64())
		}
	}
	for i := range batch.Actions {
		batch.Actions[i] = float32(2*data.Float64() - 1)
	}
	return s, batch, data
}

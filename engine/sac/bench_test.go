package sac

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/engine/replay"
)

// BenchmarkUpdate is one SAC update at HalfCheetah's sizes (17 observations, 6 actions),
// 256×256 ReLU actor and twin critics, minibatch 256, on 1 and 2 towers: issue 30's update
// speed figure (scripts/offpolicy_bench.py runs it beside PyTorch).
func BenchmarkUpdate(b *testing.B) {
	for _, towers := range []int{1, 2} {
		b.Run(fmt.Sprintf("towers=%d", towers), func(b *testing.B) {
			s, err := New(Config{Minibatch: 256, Towers: towers}, 17, 6, rand.New(rand.NewPCG(1, 1)))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
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

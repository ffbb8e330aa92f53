package batcher

import (
	"context"
	"testing"
)

// TestCollectAllocatesNothing: after warm-up, a whole rollout allocates nothing.
func TestCollectAllocatesNothing(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", PolicyConfig{})
	b := newBatcher(t, Config{Env: "CartPole-v1", Workers: 2, EnvsPerWorker: 64, Steps: 32}, p)
	ctx := context.Background()
	for range 20 { // let episode lists reach their steady capacity
		if _, err := b.Collect(ctx, 32); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(10, func() {
		if _, err := b.Collect(ctx, 32); err != nil {
			t.Fatal(err)
		}
	}); a > 0 {
		t.Errorf("%v allocations per Collect of 32 steps × 128 envs", a)
	}
}

// BenchmarkBatcher collects CartPole-v1 with the 64×64 tanh MLP actor-critic, sampled, two
// workers of 1024 envs each (the setting), and reports env steps/s and the split of
// the workers' time.
func BenchmarkBatcher(b *testing.B) {
	p := loadPolicy(b, "../testdata/mlp_tanh.onnx", "CartPole-v1", PolicyConfig{})
	bt := newBatcher(b, Config{Env: "CartPole-v1", Workers: 2, EnvsPerWorker: 1024, Steps: 64}, p)
	ctx := context.Background()
	if _, err := bt.Collect(ctx, 64); err != nil {
		b.Fatal(err)
	}
	before := bt.Timings()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bt.Collect(ctx, 64); err != nil {
			b.Fatal(err)
		}
	}
	t := bt.Timings()
	steps := float64(t.Steps - before.Steps)
	b.ReportMetric(steps/b.Elapsed().Seconds(), "steps/s")
	busy := (t.Env + t.Inference + t.Sampling + t.Buffers - before.Env - before.Inference - before.Sampling - before.Buffers).Seconds()
	b.ReportMetric(100*(t.Env-before.Env).Seconds()/busy, "%env")
	b.ReportMetric(100*(t.Inference-before.Inference).Seconds()/busy, "%inference")
	b.ReportMetric(100*(t.Sampling-before.Sampling).Seconds()/busy, "%sampling")
	b.ReportMetric(100*(t.Buffers-before.Buffers).Seconds()/busy, "%buffers")
}

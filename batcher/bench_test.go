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
	before, t := benchCollect(b, bt, 64)
	busy := (t.Env + t.Inference + t.Sampling + t.Buffers - before.Env - before.Inference - before.Sampling - before.Buffers).Seconds()
	b.ReportMetric(100*(t.Env-before.Env).Seconds()/busy, "%env")
	b.ReportMetric(100*(t.Inference-before.Inference).Seconds()/busy, "%inference")
	b.ReportMetric(100*(t.Sampling-before.Sampling).Seconds()/busy, "%sampling")
	b.ReportMetric(100*(t.Buffers-before.Buffers).Seconds()/busy, "%buffers")
}

// BenchmarkForeignTwins collects with each fixed-batch fixture (its batch freed at load) and
// with its dynamic-batch twin, one worker of 256 envs, sampled (deterministic for a policy
// without a distribution), and reports env steps/s: the two should be within noise.
//
//	go test ./batcher -run '^$' -bench ForeignTwins -benchtime 3s
func BenchmarkForeignTwins(b *testing.B) {
	for _, tw := range twins(b) {
		for _, f := range tw {
			b.Run(f.Name, func(b *testing.B) {
				p, err := LoadPolicy(context.Background(), f.path(), f.Env, PolicyConfig{})
				if err != nil {
					b.Fatal(err)
				}
				bt := newBatcher(b, Config{Env: f.Env, EnvsPerWorker: 256, Steps: 64, Deterministic: p.stochastic() != nil}, p)
				before, t := benchCollect(b, bt, 64)
				b.ReportMetric(100*(t.Inference-before.Inference).Seconds()/b.Elapsed().Seconds(), "%inference")
			})
		}
	}
}

// benchCollect collects rollouts of steps in b's loop after one warm-up rollout, reports env
// steps/s and allocations, and returns the timings before and after the loop.
func benchCollect(b *testing.B, bt *Batcher, steps int) (before, after Timings) {
	ctx := context.Background()
	if _, err := bt.Collect(ctx, steps); err != nil {
		b.Fatal(err)
	}
	before = bt.Timings()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bt.Collect(ctx, steps); err != nil {
			b.Fatal(err)
		}
	}
	after = bt.Timings()
	b.ReportMetric(float64(after.Steps-before.Steps)/b.Elapsed().Seconds(), "steps/s")
	return before, after
}

package batcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/onnx"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// TestCollectAllocatesNothing: after warm-up, a whole rollout allocates nothing, with
// today's constant-weight sessions and with weights published in place (after a Publish).
func TestCollectAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	tr := newTrainer(t, "../testdata/mlp_tanh.onnx")
	for _, publish := range []bool{false, true} {
		var cfg bind.Config
		if publish {
			cfg.Publish = tr.layout
		}
		p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", cfg)
		b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 64, Steps: 32}, p)
		if publish {
			tr.perturb(rand.New(rand.NewPCG(1, 1)), 0.01)
			if err := b.Publish(ctx, 1, tr.flat); err != nil {
				t.Fatal(err)
			}
		}
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
			t.Errorf("published %v: %v allocations per Collect of 32 steps × 128 envs", publish, a)
		}
	}
}

// BenchmarkBatcher collects CartPole-v1 with the 64×64 tanh MLP actor-critic, sampled, two
// workers of 1024 envs each (the setting), and reports env steps/s and the split of
// the workers' time. In the same run it then times ONNX Runtime alone on that model, two
// goroutines each running a session of batch 1024 as many times as each worker ran its
// policy, and reports those rows/s ("ort-rows/s", the batcher's bound) and the batcher's
// share of it ("%of-ort").
//
//	go test ./batcher -run '^$' -bench 'Batcher$' -count 5
func BenchmarkBatcher(b *testing.B) {
	const workers, envs, steps = 2, 1024, 64
	p := loadPolicy(b, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	bt := newBatcher(b, Config{Env: envSpec("CartPole-v1"), Workers: workers, EnvsPerWorker: envs, Steps: steps}, p)
	before, t, _ := benchCollect(b, bt, steps)
	rate := float64(t.Steps-before.Steps) / b.Elapsed().Seconds()
	calls := int(t.Steps-before.Steps) / (workers * envs)
	ort := ortAlone(b, "../testdata/mlp_tanh.onnx", workers, envs, calls)
	b.ReportMetric(ort, "ort-rows/s")
	b.ReportMetric(100*rate/ort, "%of-ort")
	reportSplit(b, before, t, workers)
}

// BenchmarkWorker collects CartPole-v1 with the 64×64 tanh MLP actor-critic, sampled, one
// worker of 1024 envs (issue 32's `batcher --workers 1`), and reports the process's CPU time
// (user + system, getrusage) per env step, "cpu-ns/step", and the split of the worker's time.
// CPU time depends far less than steps/s on other load; to compare two versions of the
// batcher, build each one's test binary and run them in turns, several rounds.
//
//	go test ./batcher -run '^$' -bench 'Worker$' -benchtime 100x -count 10
func BenchmarkWorker(b *testing.B) {
	const envs, steps = 1024, 64
	p := loadPolicy(b, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	bt := newBatcher(b, Config{Env: envSpec("CartPole-v1"), Workers: 1, EnvsPerWorker: envs, Steps: steps}, p)
	before, t, cpu := benchCollect(b, bt, steps)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(t.Steps-before.Steps), "cpu-ns/step")
	reportSplit(b, before, t, 1)
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ortAlone runs the model at path in workers sessions at once (one goroutine each, ONNX
// Runtime's default single thread per session, as batcher workers run it), calls runs of
// batch rows each, and returns the rows per second of them all.
func ortAlone(b *testing.B, path string, workers, batch, calls int) float64 {
	sessions := make([]*onnx.Session, workers)
	for w := range sessions {
		s, err := onnx.Open(context.Background(), path, onnx.Config{MaxBatch: batch})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		in, err := onnx.Input[float32](s, 0)
		if err != nil {
			b.Fatal(err)
		}
		for i := range in {
			in[i] = float32(i%13)*0.05 - 0.3
		}
		sessions[w] = s
	}
	errs := make(chan error, workers)
	start := time.Now()
	for _, s := range sessions {
		go func() {
			for range calls {
				if err := s.Run(batch); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return float64(workers*batch*calls) / time.Since(start).Seconds()
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
				p, err := loadFile(context.Background(), f.path(), f.Env, bind.Config{})
				if err != nil {
					b.Fatal(err)
				}
				bt := newBatcher(b, Config{Env: envSpec(f.Env), EnvsPerWorker: 256, Steps: 64, Deterministic: p.Stochastic() != nil}, p)
				before, t, _ := benchCollect(b, bt, 64)
				b.ReportMetric(100*(t.Inference-before.Inference).Seconds()/b.Elapsed().Seconds(), "%inference")
			})
		}
	}
}

// benchCollect collects rollouts of steps in b's loop after one warm-up rollout, reports env
// steps/s and allocations, and returns the timings before and after the loop and the
// process's CPU time (user + system) in it.
func benchCollect(b *testing.B, bt *Batcher, steps int) (before, after Timings, cpu time.Duration) {
	ctx := context.Background()
	if _, err := bt.Collect(ctx, steps); err != nil {
		b.Fatal(err)
	}
	before, cpu0 := bt.Timings(), cpuTime(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bt.Collect(ctx, steps); err != nil {
			b.Fatal(err)
		}
	}
	after, cpu = bt.Timings(), cpuTime(b)-cpu0
	b.ReportMetric(float64(after.Steps-before.Steps)/b.Elapsed().Seconds(), "steps/s")
	return before, after, cpu
}

// reportSplit reports the split of the workers' time between before and t: env, inference,
// sampling and buffers, as percentages of their sum; and "%wait", the share of the workers'
// wall time (Collect's wall clock × workers) spent outside a step: waiting for the other
// workers at the rollout's end and for the next Collect.
func reportSplit(b *testing.B, before, t Timings, workers int) {
	busy := (t.Env + t.Inference + t.Sampling + t.Buffers - before.Env - before.Inference - before.Sampling - before.Buffers).Seconds()
	b.ReportMetric(100*(t.Env-before.Env).Seconds()/busy, "%env")
	b.ReportMetric(100*(t.Inference-before.Inference).Seconds()/busy, "%inference")
	b.ReportMetric(100*(t.Sampling-before.Sampling).Seconds()/busy, "%sampling")
	b.ReportMetric(100*(t.Buffers-before.Buffers).Seconds()/busy, "%buffers")
	if wall := (t.Wall - before.Wall).Seconds() * float64(workers); wall > 0 {
		b.ReportMetric(100*(1-busy/wall), "%wait")
	}
}

// BenchmarkPublishInference runs one inference over 1024 rows (and over 4, make demo's
// envs) through an agent whose session reads the weights Publish writes (fed weights:
// overridable initializers bound from the worker's buffers) and through one of today's
// constant-weight session, side by side: the two alternate call by call (in alternating
// order) on the same rows, so load on the machine falls on both alike. It reports each one's
// median µs per call and how much slower the fed one is.
//
//	go test ./batcher -run '^$' -bench PublishInference -benchtime 2000x
func BenchmarkPublishInference(b *testing.B) {
	for _, f := range []struct{ name, path, env string }{
		{"mlp_tanh", "../testdata/mlp_tanh.onnx", "CartPole-v1"},
		{"cleanrl_cartpole", bindtest.ForeignDir + "/cleanrl_cartpole.onnx", "CartPole-v1"},
		{"rllib_cartpole_lstm", bindtest.ForeignDir + "/rllib_cartpole_lstm.onnx", "CartPole-v1"},
	} {
		for _, rows := range []int{1024, 4} {
			b.Run(fmt.Sprintf("%s/rows=%d", f.name, rows), func(b *testing.B) {
				benchFed(b, f.path, f.env, rows)
			})
		}
	}
}

// benchFed is BenchmarkPublishInference for one policy and batch.
func benchFed(b *testing.B, path, env string, rows int) {
	tr := newTrainer(b, path)
	pol := loadPolicy(b, path, env, bind.Config{})
	constant := newTestAgent(b, pol, rows, 0, true)
	defer constant.Close()
	published := newTestAgent(b, loadPolicy(b, path, env, bind.Config{Publish: tr.layout}), rows, 0, true)
	defer published.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	spec, _ := envs.Lookup(env)
	obs := make([]float32, rows*spec.Observation.Dim())
	for i := range obs {
		obs[i] = 0.2 * (2*rng.Float32() - 1)
	}
	var state [][]float32
	for k := range pol.States() {
		s := make([]float32, rows*constant.size[k])
		for i := range s {
			s[i] = 0.1 * (2*rng.Float32() - 1)
		}
		state = append(state, s)
	}
	agents := []*onnxAgent{constant, published}
	times := [2][]float64{}
	for _, a := range agents { // warm up each batch size's binding
		if err := a.r.Run(rows, obs, state, nil); err != nil {
			b.Fatal(err)
		}
	}
	k := 0
	for b.Loop() {
		for j := range 2 {
			i := (j + k) % 2
			t0 := time.Now()
			if err := agents[i].r.Run(rows, obs, state, nil); err != nil {
				b.Fatal(err)
			}
			times[i] = append(times[i], time.Since(t0).Seconds())
		}
		k++
	}
	c, p := median(times[0]), median(times[1])
	b.ReportMetric(c*1e6, "const-µs/call")
	b.ReportMetric(p*1e6, "fed-µs/call")
	b.ReportMetric(100*(p/c-1), "%slower")
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkPublish times getting a new policy version to the workers, Publish against
// today's path (export the model, WithModel, UpdatePolicy: a session per worker), for
// CleanRL's CartPole MLP on one worker of 4 envs (make demo's setting) and for the
// torch-exported 64×64 tanh MLP on two workers of 1024 envs.
//
//	go test ./batcher -run '^$' -bench 'Publish$' -benchtime 200x
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	for _, c := range []struct {
		name, path string
		workers, m int
	}{
		{"cleanrl_cartpole/1x4", bindtest.ForeignDir + "/cleanrl_cartpole.onnx", 1, 4},
		{"mlp_tanh/2x1024", "../testdata/mlp_tanh.onnx", 2, 1024},
	} {
		for _, path := range []string{"publish", "export+UpdatePolicy"} {
			b.Run(c.name+"/"+path, func(b *testing.B) {
				tr := newTrainer(b, c.path)
				p, err := bind.New(ctx, tr.model, 0, spec, bind.Config{Publish: tr.layout})
				if err != nil {
					b.Fatal(err)
				}
				bt := newBatcher(b, Config{Env: envSpec("CartPole-v1"), Workers: c.workers, EnvsPerWorker: c.m, Steps: 1}, p)
				v := int64(0)
				for b.Loop() {
					v++
					tr.flat[0] += 1e-3 // a trainer's step
					if path == "publish" {
						if err := bt.Publish(ctx, v, tr.flat); err != nil {
							b.Fatal(err)
						}
						continue
					}
					if err := bt.UpdatePolicy(ctx, p.WithModel(tr.export(b), v)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e6, "µs/publish")
			})
		}
	}
}

package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/towerrl/towerrl/engine/algo"
)

// slowed is an asynchronous algorithm whose targets take a fixed time: a learner slowed down
// for the backpressure test.
type slowed struct {
	algo.Algorithm
	d time.Duration
}

func (s slowed) Name() string    { return "slowed-appo" }
func (s slowed) Sequences() bool { return true }
func (s slowed) Targets(r algo.Rollout, adv, ret []float32) error {
	time.Sleep(s.d)
	return s.Algorithm.Targets(r, adv, ret)
}

func init() {
	algo.Register("slowed-appo", func(s algo.Settings) (algo.Algorithm, error) {
		a, err := algo.New("appo", s)
		return slowed{a, 20 * time.Millisecond}, err
	})
}

// TestAsyncAlgorithmsLearn trains APPO and IMPALA on CartPole-v1 with the batchers collecting
// while the learner trains: both learn, and every metrics line carries the policy lag (a
// histogram over every trained row) and who waited for whom.
func TestAsyncAlgorithmsLearn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		algo  string
		steps int64
		min   float64
	}{{"appo", 400_000, 475}, {"impala", 400_000, 400}} {
		t.Run(tc.algo, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			var ms []Metrics
			res, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: tc.algo, TotalSteps: tc.steps, Seed: 1, EvalEpisodes: 100},
				Options{Out: dir, Progress: func(m Metrics) { ms = append(ms, m) }})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: eval %.1f ± %.1f after %d steps in %.2f s", tc.algo, res.EvalReturnMean, res.EvalReturnStd, res.EnvSteps, res.TrainSeconds)
			if res.EvalReturnMean < tc.min {
				t.Errorf("%s: eval return %.1f, want ≥ %v", tc.algo, res.EvalReturnMean, tc.min)
			}
			for _, m := range ms {
				a := m.Async
				if a == nil {
					t.Fatalf("iteration %d has no async metrics", m.Iteration)
				}
				var rows int64
				for _, n := range a.LagHistogram {
					rows += n
				}
				if rows != 512 || a.PolicyLagMax < 0 || float64(a.PolicyLagMean) > float64(a.PolicyLagMax) ||
					!(a.BatcherIdle >= 0 && a.BatcherIdle <= 1) || !(a.LearnerIdle >= 0 && a.LearnerIdle <= 1) {
					t.Fatalf("iteration %d: async metrics %+v (histogram over %d rows, want 512)", m.Iteration, *a, rows)
				}
			}
			if a := res.Async; a == nil || a.LagHistogram[0]+a.LagHistogram[1]+a.LagHistogram[2] == 0 || a.PolicyLagMean < 0 {
				t.Fatalf("the result's async summary %+v", a)
			}
			got := metricsWithoutTimings(t, dir)
			if _, ok := got[len(got)-1]["async"]; !ok {
				t.Fatal("metrics.jsonl has no async object")
			}
		})
	}
}

// TestAsyncBackpressure slows the learner 20 ms per rollout (about 10× its own time): the
// batchers block on the full ring and say so, memory stays flat, and the run still completes.
func TestAsyncBackpressure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var ms []Metrics
	var heap []uint64
	_, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: "slowed-appo", TotalSteps: 512 * 60, Seed: 2, EvalEpisodes: -1},
		Options{Progress: func(m Metrics) {
			ms = append(ms, m)
			var st runtime.MemStats
			runtime.ReadMemStats(&st)
			heap = append(heap, st.HeapInuse)
		}})
	if err != nil {
		t.Fatal(err)
	}
	idle := 0.0
	for _, m := range ms[10:] {
		idle += float64(m.Async.BatcherIdle)
	}
	idle /= float64(len(ms) - 10)
	if idle < 0.5 {
		t.Errorf("with the learner slowed the batchers were idle %.0f%% of the time, want most of it", 100*idle)
	}
	first, last := heap[10], heap[len(heap)-1]
	if grow := float64(last) - float64(first); grow > math.Max(8<<20, 0.5*float64(first)) {
		t.Errorf("heap in use grew from %d to %d bytes over %d iterations", first, last, len(heap)-10)
	}
	t.Logf("batchers idle %.0f%%, heap in use %d → %d bytes", 100*idle, first, last)
}

// TestAsyncResume stops an APPO run after a few iterations and resumes it to the end: the
// checkpoint holds the learner's state, the resumed batchers start fresh episodes.
func TestAsyncResume(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 12, CheckpointEvery: 4, Seed: 3, EvalEpisodes: -1}
	stop := make(chan struct{})
	_, err := Train(context.Background(), cfg, Options{Out: dir, Stop: stop, Progress: func(m Metrics) {
		if m.Iteration == 6 {
			close(stop)
		}
	}})
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	res, err := Resume(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.EnvSteps != 512*12 || len(metricsWithoutTimings(t, dir)) != 12 {
		t.Fatalf("resumed: %+v, %d metrics lines", res, len(metricsWithoutTimings(t, dir)))
	}
}

// TestAPPOPendulum: APPO with configs/pendulum-appo.json's settings (Gaussian head) swings
// Pendulum-v1 up: a 20-episode evaluation of at least −250 after 600k steps (the issue asks for
// it within 1M; measured −160 at 1M).
func TestAPPOPendulum(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "configs", "pendulum-appo.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TotalSteps = 600_000
	res, err := Train(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("APPO on Pendulum-v1: eval %.1f ± %.1f after %d steps in %.1f s", res.EvalReturnMean, res.EvalReturnStd, res.EnvSteps, res.TrainSeconds)
	if res.EvalReturnMean < -250 {
		t.Errorf("eval return %.1f, want ≥ −250", res.EvalReturnMean)
	}
}

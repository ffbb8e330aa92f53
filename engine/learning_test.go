//go:build !race

// The learning runs are too slow under the race detector: make test runs them in its first
// pass (the asynchronous, DD-PPO and source code paths run under -race in async_test.go,
// ddppo_test.go and cmd/train's serve test).

package engine

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

// TestAsyncAlgorithmsLearn trains APPO and IMPALA on CartPole-v1, 3 seeds each, with the
// batchers collecting while the learner trains: they learn (an asynchronous run depends on
// timing, so the bound is on the seeds' median and best 100-episode evaluations), and every
// metrics line carries the policy lag (a histogram over every trained row) and who waited for
// whom, and the result the run's totals.
func TestAsyncAlgorithmsLearn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		algo        string
		steps       int64
		median, top float64
	}{{"appo", 600_000, 400, 475}, {"impala", 400_000, 400, 450}} {
		t.Run(tc.algo, func(t *testing.T) {
			var evals []float64
			for seed := range uint64(3) {
				dir := filepath.Join(t.TempDir(), "run")
				var ms []Metrics
				res, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: tc.algo, TotalSteps: tc.steps, Seed: seed, EvalEpisodes: 100},
					Options{Out: dir, Progress: func(m Metrics) { ms = append(ms, m) }})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s seed %d: eval %.1f ± %.1f after %d steps in %.2f s", tc.algo, seed, res.EvalReturnMean, res.EvalReturnStd, res.EnvSteps, res.TrainSeconds)
				evals = append(evals, res.EvalReturnMean)
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
			}
			slices.Sort(evals)
			if evals[1] < tc.median || evals[2] < tc.top {
				t.Errorf("%s: evaluations %v over 3 seeds, want a median ≥ %v and a best ≥ %v", tc.algo, evals, tc.median, tc.top)
			}
		})
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

// TestDDPPOCurvesMatchOneProcess: over 8 seeds, DD-PPO on 2 ranks of 4 envs learns CartPole as
// PPO in one process with 8 envs does (same rows per update): the mean training return of the
// last 10 iterations does not differ between the two by Welch's t-test at the 1% level, and
// both learn.
func TestDDPPOCurvesMatchOneProcess(t *testing.T) {
	const seeds, steps = 8, 102_400
	final := func(ms []Metrics) float64 {
		var sum float64
		var n int
		for _, m := range ms[len(ms)-10:] {
			if !math.IsNaN(float64(m.ReturnMean)) {
				sum += float64(m.ReturnMean)
				n++
			}
		}
		return sum / float64(max(n, 1))
	}
	var ranks, one []float64
	for seed := range uint64(seeds) {
		cfg := Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: steps, Seed: seed, EvalEpisodes: -1}
		var ms []Metrics
		_, errs := trainRanks(t, 2, cfg, "", false, func(r int, _ *Config, o *Options) {
			if r == 0 {
				o.Progress = func(m Metrics) { ms = append(ms, m) }
			}
		})
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		ranks = append(ranks, final(ms))
		ms = nil
		cfg.Algo, cfg.Envs = "ppo", 8
		if _, err := Train(context.Background(), cfg, Options{Progress: func(m Metrics) { ms = append(ms, m) }}); err != nil {
			t.Fatal(err)
		}
		one = append(one, final(ms))
	}
	tStat, df := welch(ranks, one)
	t.Logf("final training return over %d seeds: 2 ranks × 4 envs %v, 1 process × 8 envs %v; Welch t = %.2f (df %.1f)", seeds, ranks, one, tStat, df)
	// Two-sided 1% critical value of Student's t for df ≥ 7 is at most 3.50.
	if math.Abs(tStat) > 3.5 {
		t.Errorf("the 2-rank and 1-process returns differ: Welch t = %.2f", tStat)
	}
	if mean(ranks) < 100 || mean(one) < 100 {
		t.Errorf("runs did not learn: mean final returns %.1f and %.1f", mean(ranks), mean(one))
	}
}

// TestSourceFeedsTheRun trains ppo and appo on rollouts from a RolloutSource: every rollout
// handed out is acknowledged, every version is published to it (ppo: each iteration), ppo
// drops the rollouts of an older version and still learns. Both make 4 passes over each
// rollout: at appo's default of 3 this short run (150k steps) is still learning (55.6).
func TestSourceFeedsTheRun(t *testing.T) {
	for _, name := range []string{"ppo", "appo"} {
		t.Run(name, func(t *testing.T) {
			src := &batcherSource{t: t, steps: 128, stale: name == "ppo"}
			defer func() {
				if src.b != nil {
					src.b.Close()
				}
			}()
			var last Metrics
			res, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: name, TotalSteps: 150_000, Epochs: 4, Seed: 4, EvalEpisodes: 20},
				Options{Source: src, Progress: func(m Metrics) { last = m }})
			if err != nil {
				t.Fatal(err)
			}
			iters := 150_000 / 512
			if src.acks != src.n {
				t.Errorf("%d rollouts handed out, %d acknowledged", src.n, src.acks)
			}
			want := iters
			if name == "ppo" {
				want = 2*iters - 1 // every second one was a version behind and dropped
			}
			if src.n != want || len(src.versions) != iters+1 || src.versions[iters] != int64(iters) {
				t.Errorf("%d rollouts taken (want %d), versions published %v", src.n, want, src.versions)
			}
			if tr := last.Transport; tr == nil || tr.Rollouts < 1 || tr.Bytes != 1000*int64(tr.Rollouts) || tr.LatencySeconds != 0.001 || tr.BytesPerSec <= 0 {
				t.Errorf("the last iteration's transport metrics %+v", tr)
			}
			t.Logf("%s from a source: eval %.1f", name, res.EvalReturnMean)
			if res.EvalReturnMean < 150 {
				t.Errorf("eval return %.1f after %d steps from a source", res.EvalReturnMean, res.EnvSteps)
			}
		})
	}
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// welch is Welch's t statistic for the difference of two samples' means, and its
// Welch–Satterthwaite degrees of freedom.
func welch(a, b []float64) (float64, float64) {
	va, vb := variance(a)/float64(len(a)), variance(b)/float64(len(b))
	df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	return (mean(a) - mean(b)) / math.Sqrt(va+vb), df
}

func variance(x []float64) float64 {
	m, s := mean(x), 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return s / float64(len(x)-1)
}

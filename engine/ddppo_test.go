package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/towerrl/towerrl/engine/internal/enginetest"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/learner/mpi"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// trainRanks runs Train (or Resume, with dir) on n in-process ranks and returns each rank's
// result and error. Every rank gets the same config; rank 0's Out is out.
func trainRanks(t *testing.T, n int, cfg Config, out string, resume bool, edit func(r int, c *Config, o *Options)) ([]Result, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gs := mpi.InProcess(n)
	res, errs := make([]Result, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, o := cfg, Options{Out: out, Ranks: gs[r]}
			if edit != nil {
				edit(r, &c, &o)
			}
			if resume {
				res[r], errs[r] = Resume(ctx, out, o)
			} else {
				res[r], errs[r] = Train(ctx, c, o)
			}
		})
	}
	wg.Wait()
	return res, errs
}

// TestDDPPORanks trains DD-PPO on two in-process ranks: rank 0 alone writes the run, whose
// steps count both ranks' rows, whose checkpoint holds both ranks' batchers, and which resumes
// on two ranks to the metrics and policy of an uninterrupted run (and is refused on one).
func TestDDPPORanks(t *testing.T) {
	cfg := Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * 512 * 8, CheckpointEvery: 3, Seed: 11, EvalEpisodes: -1}
	full := filepath.Join(t.TempDir(), "full")
	res, errs := trainRanks(t, 2, cfg, full, false, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if res[0].EnvSteps != 2*512*8 || res[0].Iterations != 8 || res[1].EnvSteps != res[0].EnvSteps {
		t.Fatalf("results %+v", res)
	}
	ms := metricsWithoutTimings(t, full)
	if len(ms) != 8 || ms[0]["env_steps"].(float64) != 1024 {
		t.Fatalf("%d metrics lines, the first %v", len(ms), ms[0])
	}
	// Each iteration's all-reduce time, and per update: 4 epochs × 4 minibatches.
	data, err := os.ReadFile(filepath.Join(full, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		var m struct {
			Iter  int     `json:"iteration"`
			Total float64 `json:"allreduce_seconds"`
			Per   float64 `json:"allreduce_us_per_update"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if want := 1e6 * m.Total / 16; !(m.Total > 0) || math.Abs(m.Per-want) > 1e-9*want {
			t.Errorf("iteration %d: allreduce_seconds %v, allreduce_us_per_update %v (want %v)", m.Iter, m.Total, m.Per, want)
		}
	}
	ck, err := models.LoadCheckpoint(context.Background(), filepath.Join(full, checkpointFile))
	if err != nil {
		matches, _ := filepath.Glob(filepath.Join(full, "checkpoint*"))
		t.Fatalf("%v (have %v)", err, matches)
	}
	if ck.Ints["ranks"] != 2 || len(ck.Bytes["batcher.rank1"]) == 0 || bytes.Equal(ck.Bytes["batcher.rank1"], ck.Bytes["batcher"]) {
		t.Fatalf("checkpoint: ranks %d, rank 1's batcher %d bytes (rank 0's %d)", ck.Ints["ranks"], len(ck.Bytes["batcher.rank1"]), len(ck.Bytes["batcher"]))
	}

	// Stopped after iteration 4 on rank 1's request (checkpoint at 3 and at the stop), resumed.
	cut := filepath.Join(t.TempDir(), "cut")
	stop := make(chan struct{})
	var once sync.Once
	_, errs = trainRanks(t, 2, cfg, cut, false, func(r int, _ *Config, o *Options) {
		if r == 0 {
			o.Progress = func(m Metrics) {
				if m.Iteration == 4 {
					once.Do(func() { close(stop) })
				}
			}
		} else {
			o.Stop = stop
		}
	})
	for r, err := range errs {
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("rank %d of the stopped run: %v", r, err)
		}
	}
	if _, err := Resume(context.Background(), cut, Options{}); err == nil || !strings.Contains(err.Error(), "written by 2 ranks") {
		t.Fatalf("resume on one rank: %v", err)
	}
	if _, errs = trainRanks(t, 2, Config{}, cut, true, nil); errs[0] != nil || errs[1] != nil {
		t.Fatalf("resume on two ranks: %v", errs)
	}
	sameRun(t, full, cut, 8)
}

// TestDDPPORefusals: ranks started with different configs all stop before training, naming
// the field; ppo on several ranks is refused.
func TestDDPPORefusals(t *testing.T) {
	cfg := Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * 512 * 2, Seed: 1, EvalEpisodes: -1}
	out := filepath.Join(t.TempDir(), "run")
	_, errs := trainRanks(t, 2, cfg, out, false, func(r int, c *Config, _ *Options) {
		if r == 1 {
			c.Envs = 8
		}
	})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "envs") || errs[0] == nil {
		t.Fatalf("differing configs: %v", errs)
	}
	if _, err := os.Stat(filepath.Join(out, "config.json")); err == nil {
		t.Fatal("a refused run left its config.json")
	}
	cfg.Algo = "ppo"
	_, errs = trainRanks(t, 2, cfg, out, false, nil)
	for r, err := range errs {
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ddppo") {
			t.Fatalf("rank %d: ppo on two ranks: %v", r, err)
		}
	}
}

// TestDDPPOUpdateEquivalence: 2 ranks of B rows each (in-process ranks, mpi.Collective over
// mpi.InProcess) update the parameters as 1 process does with the 2B rows, to 1e-6 over 4
// updates: minibatch k of the one process holds both ranks' minibatch k, its advantages are
// standardised over all of them, and the gradient is the mean over all of them.
func TestDDPPOUpdateEquivalence(t *testing.T) {
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	rng := rand.New(rand.NewPCG(5, 9))
	const B, mb = 256, 64 // per rank: 4 minibatches of 64
	ranks := []*learner.SampleBatch{
		enginetest.RandomMinibatch(rng, B, 2, enginetest.Scales{Ret: 1, Value: 0.1, LogP: 0.05}),
		enginetest.RandomMinibatch(rng, B, 2, enginetest.Scales{Ret: 3, Value: 0.5, LogP: 0.05}),
	}
	loss := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	newTowers := func(rows int, coll learner.Collective, layout *learner.SampleBatch) (*learner.Towers, *models.Params) {
		params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		tw, err := learner.NewTowers(learner.TowersConfig{N: 1, Minibatch: rows, MaxGradNorm: 0.5, NormalizeAdvantages: true, Collective: coll},
			params.Data(), learner.NewAdam(params.Size(), learner.Constant(1e-3), 0.9, 0.999, 1e-5), layout, policy.Towers(params, &ppo.PPO{Coefs: loss}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tw.Close() })
		return tw, params
	}
	// One process: minibatch k is rank 0's rows [k·mb, (k+1)·mb) then rank 1's.
	one, block := learner.NewSampleBatch(2*B, 4, 1, 0), learner.NewSampleBatch(mb, 4, 1, 0)
	for k := range B / mb {
		for _, r := range ranks {
			if err := r.CopyRange(block, k*mb, (k+1)*mb); err != nil {
				t.Fatal(err)
			}
			if err := one.Append(block); err != nil {
				t.Fatal(err)
			}
		}
	}
	tw, single := newTowers(2*mb, nil, one)
	for k := range B / mb {
		if _, err := tw.Update(context.Background(), one, 2*k*mb, 2*(k+1)*mb); err != nil {
			t.Fatal(err)
		}
	}
	gs := mpi.InProcess(2)
	got := make([][]float32, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		coll, err := mpi.NewCollective(gs[r], 1)
		if err != nil {
			t.Fatal(err)
		}
		b := learner.NewSampleBatch(B, 4, 1, 0)
		b.Append(ranks[r])
		rtw, params := newTowers(mb, coll, b)
		wg.Go(func() {
			for k := range B / mb {
				if _, err := rtw.Update(context.Background(), b, k*mb, (k+1)*mb); err != nil {
					errs[r] = err
					return
				}
			}
			got[r] = params.Data()
		})
	}
	wg.Wait()
	enginetest.SameAsOneProcess(t, single.Data(), got, errs, fmt.Sprintf("2 ranks × %d rows vs 1 process × %d rows, 4 updates", B, 2*B))
}

// TestDDPPOPreemption trains 2 in-process ranks with sync_frac 0.5, rank 1 slowed down 4×
// (Options.Slowdown): rank 1 is cut short (never below a quarter of the rollout), rank 0's
// metrics report both ranks' collected fractions, env_steps counts the rows collected, and the
// ranks end with the same parameters.
func TestDDPPOPreemption(t *testing.T) {
	const iters, steps, envs = 4, 128, 4
	cfg := Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * iters * steps * envs, Seed: 5, EvalEpisodes: -1, SyncFrac: 0.5}
	out := filepath.Join(t.TempDir(), "run")
	res, errs := trainRanks(t, 2, cfg, out, false, func(r int, _ *Config, o *Options) {
		if r == 1 {
			o.Slowdown = 4
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if res[0].ParamsSHA256 != res[1].ParamsSHA256 {
		t.Fatalf("the ranks end with different parameters: %s and %s", res[0].ParamsSHA256, res[1].ParamsSHA256)
	}
	data, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	preempted := 0
	lines := 0
	for line := range bytes.Lines(data) {
		var m Metrics
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		lines++
		p := m.Preemption
		if p == nil || len(p.CollectedFrac) != 2 {
			t.Fatalf("iteration %d: preemption metrics %+v", m.Iteration, p)
		}
		f0, f1 := float64(p.CollectedFrac[0]), float64(p.CollectedFrac[1])
		if f0 != 1 && f1 != 1 || f0 < 0.25 || f1 < 0.25 || f0 > 1 || f1 > 1 {
			t.Errorf("iteration %d: collected fractions %v, %v: one rank must finish, none may keep less than 0.25", m.Iteration, f0, f1)
		}
		n := 0
		for _, f := range []float64{f0, f1} {
			if f < 1 {
				n++
			}
		}
		if n != p.Preempted {
			t.Errorf("iteration %d: %d preempted for fractions %v, %v", m.Iteration, p.Preempted, f0, f1)
		}
		preempted += p.Preempted
		total += (f0 + f1) * steps * envs
		if m.EnvSteps != int64(total) {
			t.Errorf("iteration %d: env_steps %d, the fractions sum to %v", m.Iteration, m.EnvSteps, total)
		}
		t.Logf("iteration %d: collected %.3f and %.3f, rank 0 waited %.3fs", m.Iteration, f0, f1, float64(p.WaitSeconds))
	}
	if lines != iters || preempted == 0 {
		t.Errorf("%d metrics lines (want %d), %d preempted rollouts (want some: rank 1 is 4× slower)", lines, iters, preempted)
	}
}

// TestSyncFrac: the default (ddppo only) and the refusals (package engine/ddppo tests how many
// ranks must finish).
func TestSyncFrac(t *testing.T) {
	for _, tc := range []struct {
		algo string
		in   float64
		want float64
		bad  bool
	}{
		{"ddppo", 0, DefaultSyncFrac, false},
		{"ppo", 0, 0, false},
		{"ddppo", 1, 1, false},
		{"ddppo", 0.5, 0.5, false},
		{"ddppo", -0.1, 0, true},
		{"ddppo", 1.5, 0, true},
		{"ddppo", math.NaN(), 0, true},
	} {
		c, err := Config{Env: "CartPole-v1", Algo: tc.algo, SyncFrac: tc.in}.WithDefaults()
		switch {
		case tc.bad && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "SyncFrac")):
			t.Errorf("%s, %v: %v, want ErrConfig naming SyncFrac", tc.algo, tc.in, err)
		case !tc.bad && (err != nil || c.SyncFrac != tc.want):
			t.Errorf("%s, %v: SyncFrac %v, %v; want %v", tc.algo, tc.in, c.SyncFrac, err, tc.want)
		}
	}
}

// TestDDPPONormalised trains DD-PPO with observation normalisation and reward scaling on two
// in-process ranks: the ranks sum their statistics, so their parameters stay identical (the
// run's hash checks pass), also when the slow rank is preempted and collects fewer steps; the
// checkpoint holds both ranks' discounted returns, and a run stopped and resumed on two ranks
// ends as the uninterrupted one.
func TestDDPPONormalised(t *testing.T) {
	cfg := Config{Env: "Pendulum-v1", Algo: "ddppo", Envs: 2, RolloutSteps: 128, Minibatches: 4, TotalSteps: 2 * 256 * 6,
		CheckpointEvery: 2, Seed: 3, EvalEpisodes: -1, NormObs: true, NormReward: true}
	full := filepath.Join(t.TempDir(), "full")
	res, errs := trainRanks(t, 2, cfg, full, false, nil)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("ranks: %v", errs)
	}
	if res[0].ParamsSHA256 != res[1].ParamsSHA256 {
		t.Fatal("the ranks end with different parameters")
	}
	ck, err := models.LoadCheckpoint(context.Background(), filepath.Join(full, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.Bytes[ckptObsNorm]) == 0 || len(ck.Bytes[ckptRewardNorm+".rank1"]) == 0 || bytes.Equal(ck.Bytes[ckptRewardNorm+".rank1"], ck.Bytes[ckptRewardNorm]) {
		t.Fatalf("checkpoint: obs statistics %d bytes, rank 1's returns %d bytes", len(ck.Bytes[ckptObsNorm]), len(ck.Bytes[ckptRewardNorm+".rank1"]))
	}

	cut := filepath.Join(t.TempDir(), "cut")
	stop := make(chan struct{})
	var once sync.Once
	_, errs = trainRanks(t, 2, cfg, cut, false, func(r int, _ *Config, o *Options) {
		if r == 0 {
			o.Progress = func(m Metrics) {
				if m.Iteration == 3 {
					once.Do(func() { close(stop) })
				}
			}
		} else {
			o.Stop = stop
		}
	})
	for r, err := range errs {
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("rank %d of the stopped run: %v", r, err)
		}
	}
	if _, errs = trainRanks(t, 2, Config{}, cut, true, nil); errs[0] != nil || errs[1] != nil {
		t.Fatalf("resume on two ranks: %v", errs)
	}
	sameRun(t, full, cut, 6)

	pre := cfg
	pre.SyncFrac = 0.5
	res, errs = trainRanks(t, 2, pre, filepath.Join(t.TempDir(), "pre"), false, func(r int, _ *Config, o *Options) {
		if r == 1 {
			o.Slowdown = 4
		}
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("preempted ranks: %v", errs)
	}
	if res[0].ParamsSHA256 != res[1].ParamsSHA256 {
		t.Fatal("the preempted ranks end with different parameters")
	}
}

package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/engine/internal/enginetest"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// TestPPOTowersEquivalence: N gorgonia PPO towers averaging their gradients update the
// parameters as one tower on the whole minibatch does, to 1e-5 after several Adam steps, for
// N = 2, 3 and a minibatch (130) that 3 does not divide (both sides then train on 129 rows).
func TestPPOTowersEquivalence(t *testing.T) {
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	rng := rand.New(rand.NewPCG(8, 8))
	const rows = 520
	data := enginetest.RandomMinibatch(rng, rows, 2, enginetest.Scales{Ret: 1, Value: 0.1, LogP: 0.05})
	loss := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	train := func(n, mb, use int) []float32 {
		params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		tw, err := learner.NewTowers(learner.TowersConfig{N: n, Minibatch: use, MaxGradNorm: 0.5, NormalizeAdvantages: true},
			params.Data(), learner.NewAdam(params.Size(), learner.Constant(1e-3), 0, 0, 1e-5), data, policy.Towers(params, &ppo.PPO{Coefs: loss}))
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		b := learner.NewSampleBatch(rows, 4, 1, 0)
		b.Append(data)
		for lo := 0; lo+mb <= rows; lo += mb {
			if _, err := tw.Update(context.Background(), b, lo, lo+use); err != nil {
				t.Fatal(err)
			}
		}
		return params.Data()
	}
	for _, tc := range []struct{ n, mb int }{{2, 130}, {3, 130}, {3, 129}} {
		use := tc.mb / tc.n * tc.n
		one := train(1, tc.mb, use)
		many := train(tc.n, tc.mb, tc.mb)
		worst := 0.0
		for k := range one {
			worst = math.Max(worst, math.Abs(float64(one[k]-many[k])))
		}
		if worst > 1e-5 {
			t.Errorf("%d towers, minibatch %d: parameters differ from one tower's by %.3g", tc.n, tc.mb, worst)
		}
		t.Logf("%d towers, minibatch %d (%d used), 4 updates: max parameter difference %.3g", tc.n, tc.mb, use, worst)
	}
}

// TestTowerCountBits: the docs said a run's bits are the same for any tower count; they are
// the same for the same count (the towers' gradients are averaged in a fixed order), while
// another count sums each minibatch's rows in other groups, so the float32 results differ in
// their last places. Held here: two runs on 2 towers end with the same parameter hash, and a
// run's first iteration on 1 and on 2 towers ends with parameters within 1e-4 of each other.
func TestTowerCountBits(t *testing.T) {
	ctx := context.Background()
	run := func(towers int, iters int64) (Result, []float32) {
		dir := t.TempDir()
		res, err := Train(ctx, Config{Env: "CartPole-v1", Towers: towers, TotalSteps: 512 * iters, Seed: 2, EvalEpisodes: -1}, Options{Out: dir})
		if err != nil {
			t.Fatal(err)
		}
		c, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := c.Tensor("params")
		return res, p.Data
	}
	a, _ := run(2, 4)
	b, _ := run(2, 4)
	if a.ParamsSHA256 != b.ParamsSHA256 {
		t.Errorf("two runs on 2 towers: %s and %s", a.ParamsSHA256, b.ParamsSHA256)
	}
	r1, one := run(1, 1)
	r2, two := run(2, 1)
	worst := 0.0
	for k := range one {
		worst = math.Max(worst, math.Abs(float64(one[k]-two[k])))
	}
	if worst > 1e-4 {
		t.Errorf("after one iteration, 1 and 2 towers differ by %.3g", worst)
	}
	t.Logf("one iteration: 1 tower %s, 2 towers %s, largest parameter difference %.3g", r1.ParamsSHA256[:12], r2.ParamsSHA256[:12], worst)
}

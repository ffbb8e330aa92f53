package batcher

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// foreignFixture is the part of a fixture's NAME.json these tests read.
type foreignFixture struct {
	Name          string
	Family        string `json:"family"`
	Env           string `json:"env"`
	Head          string `json:"head"`
	ActionScaling string `json:"action_scaling"`
	DynamicBatch  bool   `json:"dynamic_batch"`
	WeakOf        string `json:"weak_of"`
	Recurrent     *struct {
		States []struct {
			Input string `json:"input"`
		} `json:"state_pairs"`
	} `json:"recurrent"`
	PyTorch *struct {
		Mean     float64 `json:"mean"`
		Std      float64 `json:"std"`
		Episodes int     `json:"episodes"`
	} `json:"pytorch_return"`
}

func (f foreignFixture) path() string { return filepath.Join(bindtest.ForeignDir, f.Name+".onnx") }

// foreignFixtures lists the fixtures that act in an env (the Atari CNN has none here).
func foreignFixtures(t testing.TB) []foreignFixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(bindtest.ForeignDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no fixtures in %s; generate them with scripts/gen_fixtures_foreign.py", bindtest.ForeignDir)
	}
	var out []foreignFixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f := foreignFixture{Name: strings.TrimSuffix(filepath.Base(p), ".json")}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if f.Env != "" && f.PyTorch != nil {
			out = append(out, f)
		}
	}
	return out
}

// TestForeignReturns evaluates every fixture with no flags, deterministic actions, and checks
// its mean return against the one PyTorch recorded for it.
//
// The episodes differ (the fixture's numpy envs reset from other seeds than towerrl's), so the
// means are two estimates of the policy's expected return: their difference has standard
// error sqrt(σ_py²/n_py + σ_go²/n_go). A difference within 3 of those is noise; a wrong
// binding, unscaled SAC actions or a state not carried moves the mean by far more. Policies
// that earn the same return every episode (σ = 0: CartPole's 500) would allow no difference at
// all, while float32 rounding may end a rare episode early, so the bound is at least 2% of the
// return.
func TestForeignReturns(t *testing.T) {
	episodes := 50
	if testing.Short() {
		episodes = 16
	}
	for _, f := range foreignFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			p, err := loadFile(context.Background(), f.path(), f.Env, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := Evaluate(context.Background(), EvalConfig{Env: envSpec(f.Env), Episodes: episodes, Deterministic: true, Seed: 7}, p)
			if err != nil {
				t.Fatal(err)
			}
			py := f.PyTorch
			se := math.Sqrt(py.Std*py.Std/float64(py.Episodes) + res.ReturnStd*res.ReturnStd/float64(len(res.Returns)))
			tol := max(3*se, 0.02*math.Abs(py.Mean))
			t.Logf("%s (%s, %s head): towerrl %.1f ± %.1f over %d episodes, PyTorch %.1f ± %.1f over %d; tolerance %.1f",
				f.Name, f.Family, p.Spec().Head, res.ReturnMean, res.ReturnStd, len(res.Returns), py.Mean, py.Std, py.Episodes, tol)
			if d := math.Abs(res.ReturnMean - py.Mean); d > tol {
				t.Errorf("mean return %.1f, PyTorch %.1f: off by %.1f, more than %.1f", res.ReturnMean, py.Mean, d, tol)
			}
			if string(p.Spec().Head) != f.Head {
				t.Errorf("head %s, fixture says %s", p.Spec().Head, f.Head)
			}
		})
	}
}

// twins pairs each fixed-batch fixture with its dynamic-batch twin (the same network exported
// with a dynamic batch axis).
func twins(t testing.TB) [][2]foreignFixture {
	all := foreignFixtures(t)
	byName := map[string]foreignFixture{}
	for _, f := range all {
		byName[f.Name] = f
	}
	var out [][2]foreignFixture
	for _, f := range all {
		if dyn, ok := byName[f.Name+"_dynbatch"]; ok && !f.DynamicBatch {
			out = append(out, [2]foreignFixture{f, dyn})
		}
	}
	if len(out) == 0 {
		t.Fatal("no fixed-batch fixture with a _dynbatch twin")
	}
	return out
}

// TestFixedBatchTwins: a fixed-batch export, its batch freed, runs at the full batch and
// collects what its dynamic-batch twin collects: the same sampled actions (deterministic
// ones for a policy without a distribution) and log-probabilities.
func TestFixedBatchTwins(t *testing.T) {
	ctx := context.Background()
	for _, tw := range twins(t) {
		fixed, dyn := tw[0], tw[1]
		t.Run(fixed.Name, func(t *testing.T) {
			collect := func(f foreignFixture) (*Rollout, *bind.Policy) {
				p, err := loadFile(ctx, f.path(), f.Env, bind.Config{})
				if err != nil {
					t.Fatal(err)
				}
				det := p.Stochastic() != nil
				b := newBatcher(t, Config{Env: envSpec(f.Env), EnvsPerWorker: 16, Steps: 64, Seed: 4, Deterministic: det}, p)
				r, err := b.Collect(ctx, 64)
				if err != nil {
					t.Fatal(err)
				}
				return r, p
			}
			a, pa := collect(fixed)
			b, _ := collect(dyn)
			if pa.FixedBatch() != 0 || !pa.Edited() {
				t.Fatalf("the fixed batch was not freed (FixedBatch %d)", pa.FixedBatch())
			}
			for k := range a.Actions {
				if math.Abs(float64(a.Actions[k]-b.Actions[k])) > 1e-5 || math.Abs(float64(a.EnvActions[k]-b.EnvActions[k])) > 1e-5 {
					t.Fatalf("element %d: fixed-batch export acts %v (env %v), its dynamic twin %v (env %v)", k, a.Actions[k], a.EnvActions[k], b.Actions[k], b.EnvActions[k])
				}
			}
			for k := range a.LogP {
				if math.Abs(float64(a.LogP[k]-b.LogP[k])) > 1e-4 || math.Abs(float64(a.Values[k]-b.Values[k])) > 1e-4 {
					t.Fatalf("row %d: logp %v value %v, twin %v %v", k, a.LogP[k], a.Values[k], b.LogP[k], b.Values[k])
				}
			}
		})
	}
}

package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/engine/normalize"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/onnx"
)

// recordObs steps n envs of id with uniform random actions for steps steps and returns every
// observation fed (steps·n rows).
func recordObs(t *testing.T, id string, n, steps int, seed uint64) []float32 {
	t.Helper()
	env, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.Reset(); err != nil {
		t.Fatal(err)
	}
	spec := env.Spec()
	rng := rand.New(rand.NewPCG(seed, 1))
	box, _ := spec.Action.(envs.Box)
	var out []float32
	for range steps {
		out = append(out, env.Buffers().Obs...)
		a := envs.Actions{}
		if d, ok := spec.Action.(envs.Discrete); ok {
			a.Discrete = make([]int, n)
			for i := range a.Discrete {
				a.Discrete[i] = rng.IntN(d.N)
			}
		} else {
			a.Box = make([]float32, n*box.Dim())
			for i := range a.Box {
				k := i % box.Dim()
				a.Box[i] = box.Low[k] + float32(rng.Float64())*(box.High[k]-box.Low[k])
			}
		}
		if err := env.Step(a); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// runONNX runs model on obs (rows of dim values) and returns its outputs by name.
func runONNX(t *testing.T, model []byte, obs []float32, dim int) map[string][]float32 {
	t.Helper()
	batch := len(obs) / dim
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := onnx.Feed(s, 0, []int64{int64(batch), int64(dim)}, obs); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(batch); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for i, info := range s.Outputs() {
		v, err := onnx.Output[float32](s, i)
		if err != nil {
			t.Fatal(err)
		}
		out[info.Name] = append([]float32(nil), v[:batch*info.RowSize()]...)
	}
	return out
}

// TestPolicyNormaliserMatchesGo trains Pendulum with observation normalisation, then runs the
// run's policy.onnx through ONNX Runtime on recorded observations (random-action episodes, and
// values far outside them that the clip bounds): its outputs are bit for bit those of the same
// weights exported without a normaliser and fed the observations normalised in Go with the
// checkpoint's statistics. The normaliser's initializers are the checkpoint's map.
func TestPolicyNormaliserMatchesGo(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Env: "Pendulum-v1", Envs: 2, RolloutSteps: 256, Minibatches: 4, TotalSteps: 512 * 6, Seed: 2, EvalEpisodes: -1,
		CheckpointEvery: 6, NormObs: true}
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Train(ctx, cfg, Options{Out: dir}); err != nil {
		t.Fatal(err)
	}
	ck, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	stats := normalize.NewObs(3, 0)
	if err := stats.UnmarshalBinary(ck.Bytes[ckptObsNorm]); err != nil {
		t.Fatal(err)
	}
	if stats.Count < 512*6 {
		t.Fatalf("the statistics counted %v observations, the run collected %d", stats.Count, 512*6)
	}
	var f normalize.Frozen
	stats.Freeze(&f)

	// The same weights without the normaliser.
	full, _ := cfg.WithDefaults()
	spec, _ := envs.Lookup(cfg.Env)
	h, _ := full.binding(spec)
	pm, err := newPolicyModel(ctx, full, h, nil, onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	params, _ := ck.Tensor("params")
	copy(pm.Flat(), params.Data)
	raw, err := pm.Export(int64(ck.Ints["version"]))
	if err != nil {
		t.Fatal(err)
	}
	policy := readFile(t, filepath.Join(dir, "policy.onnx"))
	weights, err := onnx.WeightValues(policy, []string{models.ObsNormMean, models.ObsNormScale})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if weights[0][i] != f.Mean[i] || weights[1][i] != f.Scale[i] {
			t.Fatalf("policy.onnx's map %v %v, the checkpoint's %v %v", weights[0], weights[1], f.Mean, f.Scale)
		}
	}

	obs := recordObs(t, cfg.Env, 4, 300, 9)
	obs = append(obs, 100, -100, 1e4, -1e4, 50, 0)
	normed := make([]float32, len(obs))
	if err := f.Apply(normed, obs); err != nil {
		t.Fatal(err)
	}
	got, want := runONNX(t, policy, obs, 3), runONNX(t, raw, normed, 3)
	for _, name := range []string{models.OutputMean, models.OutputLogStd, models.OutputValue} {
		if len(got[name]) != len(want[name]) || len(got[name]) == 0 {
			t.Fatalf("%s: %d and %d values", name, len(got[name]), len(want[name]))
		}
		for i, v := range want[name] {
			if math.Float32bits(v) != math.Float32bits(got[name][i]) {
				t.Fatalf("%s[%d]: %v from policy.onnx on raw observations, %v from the plain export on Go-normalised ones", name, i, got[name][i], v)
			}
		}
	}
}

// TestLearnerSeesTheCollectionMap: after three iterations (the statistics have moved), the
// learner's view of a rollout (its observations normalised by the trainer) gives, through the
// learner's own gorgonia forward with the current weights, the values the batchers computed
// with ONNX Runtime when they collected it. Normalised with the statistics updated after the
// rollout instead, it would not.
func TestLearnerSeesTheCollectionMap(t *testing.T) {
	ctx := context.Background()
	cfg, err := Config{Env: "MountainCarContinuous-v0", Envs: 2, RolloutSteps: 256, Minibatches: 4, TotalSteps: 512 * 10, Seed: 4,
		NormObs: true, NormReward: true}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := envs.Lookup(cfg.Env)
	h, _ := cfg.binding(spec)
	pm, err := newPolicyModel(ctx, cfg, h, nil, onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := newTrainer(cfg, spec, pm, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := tr.close(); err != nil {
			t.Error(err)
		}
	}()
	if err := tr.start(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for it := range 3 {
		if _, err := tr.iterate(ctx, it, cfg.Iterations()); err != nil {
			t.Fatal(err)
		}
	}
	if tr.obsNorm.cur.Mean[1] == 0 || tr.obsNorm.stats.Count < 3*512 {
		t.Fatalf("the statistics did not move: %+v", tr.obsNorm.stats.Moments)
	}
	r, err := tr.col.collect(ctx, tr.version)
	if err != nil {
		t.Fatal(err)
	}
	nr, err := tr.normalized(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	rows := r.T * r.N
	values := func(obs []float32) []float32 {
		pol, err := models.Build(G.NewGraph(), pm.(policy.Native).Params, rows)
		if err != nil {
			t.Fatal(err)
		}
		defer pol.Close()
		if err := pol.Compile(); err != nil {
			t.Fatal(err)
		}
		if err := pol.Forward(obs); err != nil {
			t.Fatal(err)
		}
		v, err := pol.Read(pol.Value)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), v...)
	}
	worst := func(a, b []float32) float64 {
		w := 0.0
		for i := range a {
			w = math.Max(w, math.Abs(float64(a[i])-float64(b[i])))
		}
		return w
	}
	if w := worst(values(nr.Obs[:rows*r.ObsDim]), r.Values[:rows]); w > 1e-5 {
		t.Fatalf("the learner's values of its normalised observations differ from the batchers' by up to %g", w)
	}
	// With the map after this rollout's observations are merged in, they would differ.
	if err := tr.obsNorm.commit(ctx, tr.red); err != nil {
		t.Fatal(err)
	}
	later := make([]float32, rows*r.ObsDim)
	if err := tr.obsNorm.cur.Apply(later, r.Obs[:rows*r.ObsDim]); err != nil {
		t.Fatal(err)
	}
	if w := worst(values(later), r.Values[:rows]); w < 1e-4 {
		t.Fatalf("the next map changes the values by only %g: the test cannot tell the maps apart", w)
	}
	if err := tr.col.release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAsyncNormalised: APPO, whose batchers stream rollouts while the learner trains (rows of
// several versions in one rollout, each normalised with its own version's map), runs with
// both normalisations and publishes every iteration or every third.
func TestAsyncNormalised(t *testing.T) {
	for _, bi := range []int{1, 3} {
		cfg := Config{Env: "Pendulum-v1", Algo: "appo", Envs: 2, RolloutSteps: 64, Minibatches: 2, TotalSteps: 128 * 12, Seed: 1,
			EvalEpisodes: 2, NormObs: true, NormReward: true, BroadcastInterval: bi, QueueSize: 3}
		dir := filepath.Join(t.TempDir(), "run")
		if _, err := Train(context.Background(), cfg, Options{Out: dir}); err != nil {
			t.Fatalf("broadcast interval %d: %v", bi, err)
		}
		if _, err := onnx.WeightValues(readFile(t, filepath.Join(dir, "policy.onnx")), []string{models.ObsNormMean}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForeignNormalisedWhenAsked fine-tunes foreign policies with NormObs set: CleanRL's
// export (its graph trained as given) and RLlib's MLP (a new critic: policy.onnx is the
// original graph written back); both policy.onnx files carry the normaliser in front of their
// own graph and evaluate. Without NormObs (the default for a fine-tune) none is added.
func TestForeignNormalisedWhenAsked(t *testing.T) {
	for _, c := range []struct {
		fixture string
		norm    bool
	}{{"cleanrl_cartpole", true}, {"rllib_cartpole_mlp", true}, {"vecnorm_cartpole", false}} {
		cfg := Config{Env: "CartPole-v1", InitPolicy: filepath.Join("..", "testdata", "foreign", c.fixture+".onnx"), Envs: 2, RolloutSteps: 64,
			TotalSteps: 128 * 4, Seed: 1, EvalEpisodes: 2, NormObs: c.norm, ValueWarmup: -1}
		dir := filepath.Join(t.TempDir(), "run")
		if _, err := Train(context.Background(), cfg, Options{Out: dir}); err != nil {
			t.Fatalf("%s: %v", c.fixture, err)
		}
		_, err := onnx.WeightValues(readFile(t, filepath.Join(dir, "policy.onnx")), []string{models.ObsNormMean})
		if (err == nil) != c.norm {
			t.Fatalf("%s (norm_obs %v): policy.onnx's normaliser: %v", c.fixture, c.norm, err)
		}
	}
}

// TestSourceNormalised feeds a run with normalisation from a RolloutSource (remote batchers'
// stand-in, which builds its policy from each published ONNX export, normaliser included),
// every other rollout two versions behind (older than the rollout before it, as interleaved
// remote batchers' can be): ppo drops those, appo trains on them with their own version's map.
func TestSourceNormalised(t *testing.T) {
	for _, name := range []string{"ppo", "appo"} {
		src := &batcherSource{t: t, steps: 64, stale: true, behind: 2}
		_, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: name, Envs: 4, RolloutSteps: 64, TotalSteps: 256 * 6,
			Seed: 4, EvalEpisodes: 2, NormObs: true, NormReward: true}, Options{Source: src})
		if src.b != nil {
			src.b.Close()
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestFineTuneOwnNormalisedPolicy fine-tunes a towerrl policy.onnx that has a normaliser: its
// map stays frozen and in front; asking for another is refused, saying why.
func TestFineTuneOwnNormalisedPolicy(t *testing.T) {
	ctx := context.Background()
	first := filepath.Join(t.TempDir(), "first")
	cfg := Config{Env: "Pendulum-v1", Envs: 2, RolloutSteps: 64, Minibatches: 2, TotalSteps: 128 * 3, EvalEpisodes: -1, NormObs: true}
	if _, err := Train(ctx, cfg, Options{Out: first}); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(first, "policy.onnx")
	before, err := onnx.WeightValues(readFile(t, policy), []string{models.ObsNormMean})
	if err != nil {
		t.Fatal(err)
	}
	ft := Config{Env: "Pendulum-v1", InitPolicy: policy, Envs: 2, RolloutSteps: 64, Minibatches: 2, TotalSteps: 128 * 3, EvalEpisodes: -1}
	dir := filepath.Join(t.TempDir(), "ft")
	if _, err := Train(ctx, ft, Options{Out: dir}); err != nil {
		t.Fatal(err)
	}
	after, err := onnx.WeightValues(readFile(t, filepath.Join(dir, "policy.onnx")), []string{models.ObsNormMean})
	if err != nil || after[0][1] != before[0][1] {
		t.Fatalf("the fine-tuned policy's map %v, the original's %v (%v)", after, before, err)
	}
	ft.NormObs = true
	if _, err := Train(ctx, ft, Options{Out: filepath.Join(t.TempDir(), "twice")}); err == nil || !strings.Contains(err.Error(), "normalises its observations") {
		t.Fatalf("a second normaliser: %v", err)
	}
}

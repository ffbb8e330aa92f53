//go:build !race

// The fine-tuning runs are too slow under the race detector; make test runs them in its
// first pass. The three tests below run in parallel with each other (after engine's other
// tests): each is a synchronous PPO run, deterministic under its seed however the cores are
// shared, and a run keeps about one core busy (one batcher worker and one learner tower, in
// turn), so one after the other they left the second core idle, for most of the GRU's 200k
// steps among others.

package engine

import (
	"context"
	"encoding/json"
	"math"
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
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps int64
	}{
		{"cleanrl_cartpole_weak", 150_000}, {"sb3_ppo_cartpole_weak", 150_000}, {"sb3_ppo_cartpole_old_weak", 150_000},
		{"vecnorm_cartpole_weak", 150_000},
		// RLlib's export has no value output: a new critic is trained from scratch (30
		// warm-up iterations first), and the 256×256 actor moves more slowly (447 after 400k
		// steps on this seed, 480–500 on seeds 2–5).
		{"rllib_cartpole_mlp_weak", 500_000},
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
// flags, and a feed-forward policy (towerrl's own MLP) trained the same way with the longer
// of their budgets; the three runs go in parallel. The feed-forward policy must stay below 100; the
// recurrent ones must reach 200 over 100 evaluation episodes and gain at least 50 on the weak
// policy (they start at 65 and 164).
//
// With fine-tuning's default of no entropy bonus and the new critic reading the recurrent
// features and the observations, after 200k steps (sequences of 8 steps, Config.SeqLen's
// default) on seeds 0–4 the LSTM reached 500, 447, 240, 491, 251 and the GRU 465, 494, 469,
// 461, 487; the feed-forward MLP, also without the bonus, 41–43. After 300k steps the LSTM
// reached 500 on seeds 0–9 but seed 2 (346) and the GRU 432–500 on all ten; after 500k (the
// default budget, train with no flags) the LSTM 500 on all ten, the GRU 432–500 and the
// feed-forward MLP 42.5–43.2 (seeds 0–2). When the critic read the features alone, 200k steps
// gave the LSTM 496, 498, 335, 346, 257 and the GRU 455, 448, 445, 299, 492; the failing runs'
// deterministic policy fails every episode after 230–350 steps. Tried before the observations were added, on seeds 0–4 unless said: RL Zoo's
// CartPoleNoVel settings (γ = λ = 0.98: LSTM 500, 412, 254 on seeds 2–4, GRU 200 and 205 on
// seeds 1–2; with its 8 envs × 32 steps, one minibatch, 10 epochs, lr 1e-3 and sequences of
// 32: LSTM 396, GRU 402 on seed 0), 10 epochs (LSTM 500, 244, 410 on seeds 2–4, 2.5× the
// time), a learning rate of 1e-3 (LSTM 500, 489, 500, 191, 500; GRU 193 and 341 on seeds
// 0–1), 5e-4 (LSTM 500, 500, 500, 500, 194; GRU 469, 238, 261, 498, 216; with the
// observations, LSTM 500, 313, 500, 500, 500 and GRU 336, 500, 227, 500, 500), sequences of 16
// (LSTM 158–359, GRU 227–488), 8 envs and 2 minibatches (LSTM 253–390, GRU 113–221), and the
// value loss flowing back into the recurrent core as in RLlib (LSTM 41–50, GRU 56–75 on seeds
// 2–3). So this test asserts what held on every seed measured at 200k steps.
//
// The LSTM trains 100k steps of that budget, not 200k: on the test's seed (1) it reaches 500
// after 100k steps (447 after 200k), four times its bar, and the recurrent runs are most of
// make test's engine time (each took 576–625 s of a loaded first pass). The GRU keeps its 200k:
// on seed 1 it reached 221.0 after 100k and 215.9 after 150k against its bar of 214. The
// feed-forward policy trains the longest budget (200k), so that it stays below 100 with at
// least as many steps as either recurrent policy.
func TestFineTuneRecurrent(t *testing.T) {
	t.Parallel()
	const (
		env     = "CartPoleNoVel-v1"
		ffSteps = 200_000
	)
	train := func(t *testing.T, init string, steps int64) Result {
		t.Helper()
		// EntCoef −1: no entropy bonus for the feed-forward policy either (fine-tuning's default).
		res, err := Train(context.Background(), Config{Env: env, InitPolicy: init, TotalSteps: steps, Seed: 1, EvalEpisodes: 100, EntCoef: -1},
			Options{Out: filepath.Join(t.TempDir(), "run")})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	t.Run("feed-forward", func(t *testing.T) {
		t.Parallel()
		ff := train(t, "", ffSteps)
		t.Logf("feed-forward MLP trained from scratch: %.1f ± %.1f over %d episodes in %.1f s", ff.EvalReturnMean, ff.EvalReturnStd, ff.EvalEpisodes, ff.TrainSeconds)
		if ff.EvalReturnMean > 100 {
			t.Errorf("a feed-forward policy reaches %.1f on %s: the env does not need memory", ff.EvalReturnMean, env)
		}
	})
	for _, tc := range []struct {
		name  string
		steps int64
	}{{"rllib_cartpole_lstm_weak", 100_000}, {"sf_cartpole_gru_weak", ffSteps}} {
		name := tc.name
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
			res := train(t, src, tc.steps)
			t.Logf("%s: PyTorch return %.1f, fine-tuned %.1f ± %.1f over %d episodes in %.1f s",
				name, fx.PytorchReturn.Mean, res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes, res.TrainSeconds)
			if res.EvalReturnMean < 200 || res.EvalReturnMean < fx.PytorchReturn.Mean+50 {
				t.Errorf("fine-tuned return %.1f, want >= 200 and at least 50 above the weak policy's %.1f", res.EvalReturnMean, fx.PytorchReturn.Mean)
			}
			checkSameInterface(t, src, filepath.Join(filepath.Dir(res.Policy), policyFile))
		})
	}
}

// TestFineTuneSAC fine-tunes Stable-Baselines3's SAC actor (testdata/foreign/sb3_sac_pendulum:
// the docs' export, tanh(mu) at batch 1, no value output) on Pendulum-v1 with no flags: a new
// critic, its 30 warm-up iterations, then 20 of PPO over the pre-tanh action. The deterministic
// policy must keep its PyTorch return within noise: three standard errors of the difference
// of the two means (PyTorch's over its 50 episodes, ours over 100). Before the log_std layer
// was kept out of PPO's reach this run scored −898 (seed 2: −635) against PyTorch's −194.
func TestFineTuneSAC(t *testing.T) {
	t.Parallel()
	const name = "sb3_sac_pendulum"
	src := filepath.Join("..", "testdata", "foreign", name+".onnx")
	var fx struct {
		Env           string `json:"env"`
		PytorchReturn struct {
			Mean     float64 `json:"mean"`
			Std      float64 `json:"std"`
			Episodes int     `json:"episodes"`
		} `json:"pytorch_return"`
	}
	if err := json.Unmarshal(readFile(t, filepath.Join("..", "testdata", "foreign", name+".json")), &fx); err != nil {
		t.Fatal(err)
	}
	res, err := Train(context.Background(), Config{Env: fx.Env, InitPolicy: src, TotalSteps: 50 * 2048, Seed: 1, EvalEpisodes: 100},
		Options{Out: filepath.Join(t.TempDir(), "run")})
	if err != nil {
		t.Fatal(err)
	}
	pt := fx.PytorchReturn
	se := math.Sqrt(pt.Std*pt.Std/float64(pt.Episodes) + res.EvalReturnStd*res.EvalReturnStd/float64(res.EvalEpisodes))
	t.Logf("%s: PyTorch return %.1f ± %.1f, fine-tuned %.1f ± %.1f over %d episodes in %.1f s (3 standard errors: %.1f)",
		name, pt.Mean, pt.Std, res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes, res.TrainSeconds, 3*se)
	if res.EvalReturnMean < pt.Mean-3*se {
		t.Errorf("fine-tuned return %.1f, want >= %.1f (PyTorch's %.1f less 3 standard errors)", res.EvalReturnMean, pt.Mean-3*se, pt.Mean)
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

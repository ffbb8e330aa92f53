package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// fixturePath is a fixture's absolute path (a config's InitPolicy is stored absolute).
func fixturePath(t *testing.T, elem ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{"..", "testdata"}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fineTuneRuns are small off-policy fine-tunes of foreign exports: SB3's SAC Pendulum actor
// (its new critics alone for the first 50 of 250 updates, 2 towers; the hidden layers and
// activation given are the actor's own, as a preset's may be, so they are taken) and a DQN CartPole
// Q-network trained in PyTorch as SB3 trains it (scripts/gen_fixture_dqn_trained.py), exported by
// SB3's older recipe (the Q-network alone).
func fineTuneRuns(t *testing.T) []Config {
	return []Config{
		{Env: "Pendulum-v1", Algo: "sac", InitPolicy: fixturePath(t, "foreign", "sb3_sac_pendulum.onnx"), Hidden: []int{256, 256}, Activation: "relu", TotalSteps: 12 * 100, TrainFreq: 4,
			RolloutSteps: 100, LearningStarts: 200, BatchSize: 32, Towers: 2, CriticWarmup: 50, CheckpointEvery: 4, Seed: 6, EvalEpisodes: -1},
		{Env: "CartPole-v1", Algo: "dqn", InitPolicy: fixturePath(t, "dqn", "dqn_cartpole_trained.onnx"), TotalSteps: 12 * 200, Envs: 2,
			TrainFreq: 4, RolloutSteps: 100, GradientSteps: 2, LearningStarts: 200, TargetUpdateInterval: 100, CheckpointEvery: 4, Seed: 5,
			EvalEpisodes: -1},
	}
}

// TestReplayFineTuneResume: a fine-tune stopped after iteration 6 and resumed (from the copy
// of the policy in its checkpoint: the InitPolicy file is not read again) ends with the
// metrics and the policy.onnx of the run never stopped.
func TestReplayFineTuneResume(t *testing.T) {
	for _, cfg := range fineTuneRuns(t) {
		t.Run(cfg.Algo, func(t *testing.T) { resumeMatches(t, cfg) })
	}
}

// TestReplayFineTune: a fine-tune writes back the original graph — every name, the opset,
// the inputs and outputs with their fixed batch — with the trained weights, which are the
// learner's (the checkpoint's acting network, run through the graph in ONNX Runtime, gives
// the native network's outputs), and so is best_policy.onnx of its evaluations during
// training; SAC's actor holds still while its critics warm up.
func TestReplayFineTune(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range fineTuneRuns(t) {
		t.Run(cfg.Algo, func(t *testing.T) {
			cfg.EvalEvery, cfg.EvalEpisodes = cfg.TotalSteps/3, 1
			dir := filepath.Join(t.TempDir(), "run")
			var ms []Metrics
			if _, err := Train(ctx, cfg, Options{Out: dir, Progress: func(m Metrics) { ms = append(ms, m) }}); err != nil {
				t.Fatal(err)
			}
			orig, err := os.ReadFile(cfg.InitPolicy)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, policyFile))
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(structure(t, got), structure(t, orig)) {
				t.Fatal("policy.onnx differs from the InitPolicy beyond its initializers' values")
			}
			best, err := os.ReadFile(filepath.Join(dir, rundir.BestPolicyFile))
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(structure(t, best), structure(t, orig)) {
				t.Fatal("best_policy.onnx differs from the InitPolicy beyond its initializers' values")
			}
			spec, err := envs.Lookup(cfg.Env)
			if err != nil {
				t.Fatal(err)
			}
			hb, err := cfg.binding(spec)
			if err != nil {
				t.Fatal(err)
			}
			d, err := policy.ImportDense(orig, hb)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
			if err != nil {
				t.Fatal(err)
			}
			name := map[string]string{"sac": "sac.actor", "dqn": "dqn.q"}[cfg.Algo]
			acting, ok := ck.Tensor(name)
			if !ok {
				t.Fatalf("the checkpoint has no %s", name)
			}
			if same(acting.Data, d.Params) {
				t.Fatal("the acting network did not move")
			}
			obs := observations(spec, 16)
			want := nativeActs(d, acting.Data, obs, hb.Spec)
			out := runGraph(t, got, obs, d.Net.In)
			for i := range want {
				if math.Abs(float64(out[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("policy.onnx's output %d is %v, the native network's %v", i, out[i], want[i])
				}
			}
			if cfg.Algo == "sac" {
				// 50 warm-up updates of 250, one per collection of 4 steps after the first 200
				// steps: iteration 4 ends at update 50.
				for _, m := range ms[:4] {
					if m.Stats != nil && m.Stats["actor_loss"] != 0 {
						t.Fatalf("iteration %d (%d updates): actor loss %v during the critics' warm-up", m.Iteration, m.Replay.Updates, m.Stats["actor_loss"])
					}
				}
				if last := ms[len(ms)-1]; last.Stats["actor_loss"] == 0 {
					t.Fatal("the actor never moved after the warm-up")
				}
			}
		})
	}
}

// same reports whether a and b hold the same values.
func same(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// structure is a model with its initializers' values cleared.
func structure(t *testing.T, data []byte) *onnxpb.ModelProto {
	t.Helper()
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	for _, init := range mp.GetGraph().GetInitializer() {
		init.RawData, init.FloatData = nil, nil
	}
	return &mp
}

// observations are n rows spread over the env's observation box (or ±2 where unbounded).
func observations(spec envs.Spec, n int) []float32 {
	box := spec.Observation
	d := box.Dim()
	obs := make([]float32, n*d)
	for r := range n {
		for j := range d {
			lo, hi := -2.0, 2.0
			if len(box.Low) == d && !math.IsInf(float64(box.Low[j]), 0) && box.Low[j] > -1e6 {
				lo, hi = float64(box.Low[j]), float64(box.High[j])
			}
			f := float64((r*7+j*3)%n) / float64(n-1)
			obs[r*d+j] = float32(lo + f*(hi-lo))
		}
	}
	return obs
}

// nativeActs is what the graph's first output holds for the native network with params p:
// the Q-values, or tanh of the mean, mapped onto the bounds when the graph maps it.
func nativeActs(d *policy.Dense, p, obs []float32, spec head.Spec) []float32 {
	rows := len(obs) / d.Net.In
	w := d.Net.NewWork(rows)
	copy(w.In(), obs)
	d.Net.Forward(p, w)
	out, o := w.Out(), d.Net.Out()
	var got []float32
	for r := range rows {
		row := out[r*o : (r+1)*o]
		if d.Binding.Head == head.QValuesKind {
			got = append(got, row...)
			continue
		}
		for j := range len(spec.Low) {
			a := math.Tanh(float64(row[j]))
			if d.Binding.ActionsScaled {
				lo, hi := float64(spec.Low[j]), float64(spec.High[j])
				a = lo + (a+1)*(hi-lo)/2
			}
			got = append(got, float32(a))
		}
	}
	return got
}

// runGraph runs model's first output on each row of obs, one row at a time (batch 1, as the
// fixtures are exported).
func runGraph(t *testing.T, model []byte, obs []float32, rowLen int) []float32 {
	t.Helper()
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []float32
	for r := range len(obs) / rowLen {
		buf, err := onnx.Input[float32](s, 0)
		if err != nil {
			t.Fatal(err)
		}
		copy(buf, obs[r*rowLen:(r+1)*rowLen])
		if err := s.Run(1); err != nil {
			t.Fatal(err)
		}
		v, err := onnx.Output[float32](s, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v[:s.Outputs()[0].RowSize()]...)
	}
	return out
}

// TestReplayFineTuneRefuses: what an off-policy fine-tune cannot take is refused before
// anything is written, saying what to do: a network shape other than the InitPolicy's, a critic
// warm-up without one (or for dqn), and a policy that is not the algorithm's kind.
func TestReplayFineTuneRefuses(t *testing.T) {
	sacInit := fixturePath(t, "foreign", "sb3_sac_pendulum.onnx")
	for _, c := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"hidden", Config{Env: "Pendulum-v1", Algo: "sac", InitPolicy: sacInit, Hidden: []int{64}, TotalSteps: 1000}, []string{"hidden [64]", "[256 256] relu", "drop them"}},
		{"activation", Config{Env: "Pendulum-v1", Algo: "sac", InitPolicy: sacInit, Activation: "tanh", TotalSteps: 1000}, []string{`activation "tanh"`, "drop them"}},
		{"warm-up from scratch", Config{Env: "Pendulum-v1", Algo: "sac", CriticWarmup: 10}, []string{"critic_warmup"}},
		{"warm-up for dqn", Config{Env: "CartPole-v1", Algo: "dqn", InitPolicy: fixturePath(t, "dqn", "sb3_dqn_cartpole_qnet.onnx"), CriticWarmup: 10},
			[]string{"critic_warmup"}},
		{"policy for dqn", Config{Env: "CartPole-v1", Algo: "dqn", InitPolicy: fixturePath(t, "foreign", "sb3_ppo_cartpole.onnx"), TotalSteps: 1000},
			[]string{"categorical", "--algo ppo"}},
		{"Gaussian policy for sac", Config{Env: "Pendulum-v1", Algo: "sac", InitPolicy: fixturePath(t, "foreign", "sb3_ppo_pendulum.onnx"), TotalSteps: 1000},
			[]string{"--algo ppo"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			_, err := Train(context.Background(), c.cfg, Options{Out: dir})
			if err == nil {
				t.Fatal("trained")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
			if _, serr := os.Stat(filepath.Join(dir, policyFile)); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a refused run wrote policy.onnx (%v)", serr)
			}
		})
	}
}

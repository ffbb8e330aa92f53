package engine

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/tfevent/tfeventtest"
	"github.com/towerrl/towerrl/models"
)

// replayRuns are small off-policy runs: DQN on CartPole (ε-greedy, a hard target copy every
// 100 env steps, 2 updates per collection of 4 steps of 2 envs) and SAC on Pendulum (auto α,
// 2 towers), both learning after 200 steps.
func replayRuns() []Config {
	return []Config{
		{Env: "CartPole-v1", Algo: "dqn", TotalSteps: 12 * 200, Envs: 2, TrainFreq: 4, RolloutSteps: 100, GradientSteps: 2,
			LearningStarts: 200, TargetUpdateInterval: 100, Hidden: []int{32, 32}, CheckpointEvery: 4, Seed: 5, EvalEpisodes: -1},
		{Env: "Pendulum-v1", Algo: "sac", TotalSteps: 12 * 100, TrainFreq: 2, RolloutSteps: 100, LearningStarts: 200,
			BatchSize: 32, Towers: 2, Hidden: []int{32, 32}, CheckpointEvery: 4, Seed: 6, EvalEpisodes: -1},
	}
}

// TestReplayResumeMatchesUninterrupted kills off-policy runs after iteration 6 (their last
// checkpoint is at 4: the replay buffer, the learner's networks and optimisers, the sampling
// stream, the batchers), resumes them, and checks that every metrics line and the final
// policy are those of the same run made without interruption.
func TestReplayResumeMatchesUninterrupted(t *testing.T) {
	for _, cfg := range replayRuns() {
		t.Run(cfg.Algo, func(t *testing.T) { resumeMatches(t, cfg) })
	}
	// SAC with gSDE: the acting noise drawn at each collection's start (one env: SB3 with
	// n_envs 1, as the preset runs it).
	sde := replayRuns()[1]
	sde.UseSDE, sde.LogStdInit = true, -2
	t.Run("sac-gSDE", func(t *testing.T) { resumeMatches(t, sde) })
}

// TestReplayRun checks what an off-policy run writes: metrics lines with the buffer's fill,
// updates, ε falling on DQN's schedule, the algorithm's statistics; policy.onnx with the
// acting network's head; a checkpoint holding the buffer; an evaluation at the end.
func TestReplayRun(t *testing.T) {
	for _, cfg := range replayRuns() {
		t.Run(cfg.Algo, func(t *testing.T) {
			cfg.EvalEpisodes = 2
			dir := filepath.Join(t.TempDir(), "run")
			var ms []Metrics
			res, err := Train(context.Background(), cfg, Options{Out: dir, Progress: func(m Metrics) { ms = append(ms, m) }})
			if err != nil {
				t.Fatal(err)
			}
			if res.EnvSteps != cfg.TotalSteps || res.Iterations != 12 || res.EvalEpisodes != 2 || len(ms) != 12 {
				t.Fatalf("result %+v after %d iterations", res, len(ms))
			}
			per := int64(cfg.RolloutSteps * max(cfg.Envs, 1))
			for i, m := range ms {
				r := m.Replay
				if r == nil || m.EnvSteps != int64(i+1)*per || r.BufferFill != int(min(m.EnvSteps, int64(r.BufferSize))) {
					t.Fatalf("iteration %d: %d steps, replay %+v", i+1, m.EnvSteps, r)
				}
				// Updates once more than 200 steps are in: after each collection past them.
				collections := (m.EnvSteps - 200) / int64(cfg.TrainFreq*max(cfg.Envs, 1))
				want := max(collections, 0) * int64(max(cfg.GradientSteps, 1))
				if r.Updates != want {
					t.Fatalf("iteration %d (%d steps): %d updates, want %d", i+1, m.EnvSteps, r.Updates, want)
				}
			}
			last := ms[len(ms)-1]
			switch cfg.Algo {
			case "dqn":
				// ε at the last collection's start, 2300 steps: 1 − 0.95·2300/240, floored at 0.05.
				if got := float64(last.Replay.Epsilon); math.Abs(got-0.05) > 1e-12 || float64(ms[0].Replay.Epsilon) != 1 {
					t.Fatalf("ε %v at the start and %v at the end, want 1 and 0.05", ms[0].Replay.Epsilon, got)
				}
				for _, k := range []string{"td_loss", "q_values", "epsilon"} {
					if v, ok := last.Stats[k]; !ok || math.IsNaN(float64(v)) {
						t.Fatalf("statistic %s: %v in %v", k, v, last.Stats)
					}
				}
			case "sac":
				for _, k := range []string{"qf_loss", "qf1_values", "qf2_values", "actor_loss", "alpha", "alpha_loss"} {
					if v, ok := last.Stats[k]; !ok || math.IsNaN(float64(v)) {
						t.Fatalf("statistic %s: %v in %v", k, v, last.Stats)
					}
				}
				if a := float64(last.Stats["alpha"]); !(a > 0 && a < 1) {
					t.Fatalf("α = %v after %d updates, want it tuned down from 1", a, last.Replay.Updates)
				}
			}
			b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
			if err != nil || !strings.Contains(string(b), `"buffer_fill"`) {
				t.Fatalf("metrics.jsonl: %v", err)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &line); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, policyFile)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReplayConfig: dqn and sac take SB3's defaults (not PPO's), an explicit 0 of
// learning_starts and exploration_final_eps is kept through config.json, and bad settings are
// errors naming the field and what to do.
func TestReplayConfig(t *testing.T) {
	c, err := Config{Env: "CartPole-v1", Algo: "dqn"}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != 32 || c.TrainFreq != 4 || c.GradientSteps != 1 || c.TargetUpdateInterval != 10_000 || c.Tau != 1 ||
		c.LR != 1e-4 || c.MaxGradNorm != 10 || c.ExplorationFraction != 0.1 || c.ExplorationFinalEps != 0.05 ||
		c.LearningStarts != 100 || c.BufferSize != 100_000 || c.Activation != "relu" || c.RolloutSteps != 1000 || c.Envs != 1 ||
		c.DQNTarget != "double" {
		t.Fatalf("dqn defaults: %+v", c)
	}
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		t.Fatal(err)
	}
	if c.replaySettings(spec).MaxTarget {
		t.Fatal("dqn_target double: the learner is told to take the max target")
	}
	c.DQNTarget = "max"
	if !c.replaySettings(spec).MaxTarget {
		t.Fatal("dqn_target max: the learner is not told to take the max target")
	}
	s, err := Config{Env: "Pendulum-v1", Algo: "sac"}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if s.BatchSize != 256 || s.TrainFreq != 1 || s.Tau != 0.005 || s.LR != 3e-4 || s.MaxGradNorm >= 0 || s.Hidden[0] != 256 ||
		s.RolloutSteps != 1000 || s.EntCoef != 0 {
		t.Fatalf("sac defaults: %+v", s)
	}
	// SB3's name of gSDE's log σ start gets towerrl's in the error.
	if _, err := ParseConfig([]byte(`{"env": "Pendulum-v1", "algo": "sac", "use_sde": true, "log_std_init": -3.67}`)); err == nil ||
		!strings.Contains(err.Error(), `"logstd_init"`) {
		t.Fatalf("log_std_init: %v, want the error to name logstd_init", err)
	}
	p, err := ParseConfig([]byte(`{"env": "Acrobot-v1", "algo": "dqn", "learning_starts": 0, "exploration_final_eps": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	back, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.LearningStarts != -1 || back.finalEps() != 0 {
		t.Fatalf("explicit zeros through config.json: learning_starts %d, final ε %v (%s)", back.LearningStarts, back.finalEps(), b)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Env: "Pendulum-v1", Algo: "dqn"}, "use --algo sac"},
		{Config{Env: "CartPole-v1", Algo: "sac"}, "use --algo dqn"},
		{Config{Env: "CartPole-v1", BatchSize: 64}, "batch_size 64"},
		{Config{Env: "CartPole-v1", TrainFreq: 4}, "train_freq 4"},
		{Config{Env: "CartPole-v1", Algo: "dqn", GradientSteps: -2}, "gradient_steps = -2"},
		{Config{Env: "CartPole-v1", Algo: "dqn", BatchSize: 33, Towers: 2}, "multiple of towers"},
		{Config{Env: "CartPole-v1", Algo: "dqn", TrainFreq: 4, RolloutSteps: 10}, "multiple of train_freq"},
		{Config{Env: "CartPole-v1", Algo: "dqn", ExplorationFraction: 1.5}, "exploration_fraction"},
		{Config{Env: "Pendulum-v1", Algo: "sac", ExplorationFraction: 0.2}, "sac explores by sampling"},
		{Config{Env: "CartPole-v1", Algo: "dqn", BufferSize: 1 << 50}, "buffer_size"},
		{Config{Env: "CartPole-v1", Algo: "dqn", Tau: 2}, "tau = 2"},
		{Config{Env: "Pendulum-v1", Algo: "sac", CriticWarmup: 5}, "critic_warmup = 5"},
		{Config{Env: "CartPole-v1", Algo: "dqn", NormObs: true}, "norm_obs"},
		{Config{Env: "CartPole-v1", Algo: "dqn", DQNTarget: "triple"}, `dqn_target "triple"; choose double`},
		{Config{Env: "Pendulum-v1", Algo: "sac", DQNTarget: "max"}, "sac has twin critics"},
		{Config{Env: "CartPole-v1", DQNTarget: "max"}, "dqn_target max"},
		{Config{Env: "CartPole-v1", Algo: "dqn", UseSDE: true}, "use_sde (gSDE) is sac's"},
		{Config{Env: "CartPole-v1", UseSDE: true}, "use_sde (sac's gSDE)"},
		{Config{Env: "Pendulum-v1", Algo: "sac", SDESampleFreq: 4}, "set use_sde"},
		{Config{Env: "Pendulum-v1", Algo: "sac", UseSDE: true, SDESampleFreq: -2}, "sde_sample_freq = -2"},
		{Config{Env: "Pendulum-v1", Algo: "sac", UseSDE: true, SDESampleFreq: 4, OverlapCollection: true}, "with overlap_collection"},
		{Config{Env: "Pendulum-v1", Algo: "sac", LogStdInit: -3}, "sac's only with use_sde"},
	} {
		if _, err := tc.cfg.WithDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// TestReplayNoBufferCheckpoint: with no_buffer_checkpoint the checkpoint holds no replay
// buffer (and is smaller), and a run cut after iteration 6 still resumes to its end, with an
// empty buffer refilled from there.
func TestReplayNoBufferCheckpoint(t *testing.T) {
	cfg := replayRuns()[0]
	cfg.NoBufferCheckpoint = true
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "run")
	kill, cancel := context.WithCancel(ctx)
	defer cancel()
	var fill int
	_, err := Train(kill, cfg, Options{Out: dir, Progress: func(m Metrics) {
		if m.Iteration == 6 {
			cancel()
		}
	}})
	if err == nil {
		t.Fatal("the cut run finished")
	}
	c, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Bytes["replay"]; ok || c.Ints["iteration"] != 4 {
		t.Fatalf("the checkpoint of iteration %d holds a replay buffer", c.Ints["iteration"])
	}
	res, err := Resume(ctx, dir, Options{Progress: func(m Metrics) {
		if m.Iteration == 5 {
			fill = m.Replay.BufferFill
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.EnvSteps != cfg.TotalSteps || fill != cfg.RolloutSteps*cfg.Envs {
		t.Fatalf("resumed: %d steps, the buffer held %d transitions after the first iteration, want %d", res.EnvSteps, fill, cfg.RolloutSteps*cfg.Envs)
	}
}

// TestReplayTensorBoard: an off-policy run's event files hold CleanRL's tags for its
// statistics (DQN's losses/td_loss, losses/q_values and charts/epsilon; SAC's
// losses/qf1_loss, qf2_loss, qf_loss, actor_loss, alpha, alpha_loss), each with metrics.jsonl's
// value at every iteration that has one, and the replay buffer's figures.
func TestReplayTensorBoard(t *testing.T) {
	for _, cfg := range replayRuns() {
		t.Run(cfg.Algo, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if _, err := Train(context.Background(), cfg, Options{Out: dir}); err != nil {
				t.Fatal(err)
			}
			evs, err := tfeventtest.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tfeventtest.Scalars(evs)
			if err != nil {
				t.Fatal(err)
			}
			stats := map[string]string{"dqn": "td_loss q_values epsilon", "sac": "qf1_loss qf2_loss qf_loss qf1_values qf2_values actor_loss alpha alpha_loss"}[cfg.Algo]
			ms := readMetrics(t, dir)
			for _, name := range strings.Fields(stats) {
				var want []tfeventtest.Point
				for _, m := range ms {
					if v, ok := m.Stats[name]; ok {
						want = append(want, tfeventtest.Point{Step: m.EnvSteps, Value: float32(v)})
					}
				}
				tag := statTag(name)
				if pts := got[tag]; len(want) == 0 || !equalPoints(pts, want) {
					t.Errorf("%s: %v, want %v", tag, pts, want)
				}
			}
			if pts := got["replay/buffer_fill"]; len(pts) != len(ms) || pts[len(pts)-1].Value != float32(ms[len(ms)-1].Replay.BufferFill) {
				t.Errorf("replay/buffer_fill: %v", pts)
			}
			if len(got["charts/SPS"]) != len(ms) {
				t.Errorf("charts/SPS: %d points for %d iterations", len(got["charts/SPS"]), len(ms))
			}
		})
	}
}

// TestReplaySDE: a SAC run with gSDE (the batchers acting with its noise matrix) evaluates the
// actor's export, which policy.onnx is: deterministic tanh(clip(μ)), without the acting
// graph's matrix, so that the final evaluation scores the file as eval does; the
// evaluations during training and gSDE's σ are in the metrics.
func TestReplaySDE(t *testing.T) {
	cfg := killRuns["sac-sde"]
	cfg.TotalSteps, cfg.EvalEvery, cfg.EvalEpisodes = 50*12, 300, 2
	dir := filepath.Join(t.TempDir(), "run")
	res, err := Train(context.Background(), cfg, Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, dir)
	evals := 0
	for _, m := range ms {
		if m.Eval != nil {
			evals++
		}
	}
	last := ms[len(ms)-1]
	if sd := float64(last.Stats["sde_std"]); evals != 2 || !(sd > 0 && sd < 1) {
		t.Fatalf("%d evaluations during training, gSDE's σ %v; want 2 and about e⁻²", evals, sd)
	}
	data, err := os.ReadFile(filepath.Join(dir, policyFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "sac/actor") || strings.Contains(string(data), "sde.weight") {
		t.Fatal("policy.onnx is not the actor's export, or holds the acting noise's matrix")
	}
	if ev := scoreFile(t, filepath.Join(dir, policyFile), cfg); ev.ReturnMean != res.EvalReturnMean {
		t.Fatalf("policy.onnx scores %v, the run's final evaluation %v", ev.ReturnMean, res.EvalReturnMean)
	}
}

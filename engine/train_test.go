package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/onnx"
)

// TestTrainCartPoleLearns trains for 40k steps (a few seconds) and checks that the policy is
// far better than random (CartPole's random policy averages about 22 steps), and the run
// directory's contract: config.json, one metrics line per iteration, a loadable policy.onnx
// with the towerrl metadata, and curve.png.
func TestTrainCartPoleLearns(t *testing.T) {
	dir := t.TempDir()
	var seen []Metrics
	plotted := 0
	plot := func(path, _ string, ms []Metrics) error { // engine/curve.Write draws it; tested there
		plotted = len(ms)
		return os.WriteFile(path, []byte("a curve"), 0o644)
	}
	res, err := Train(context.Background(), Config{Env: "CartPole-v1", TotalSteps: 40960, Seed: 3, EvalEpisodes: 20},
		Options{Out: dir, Progress: func(m Metrics) { seen = append(seen, m) }, Plot: plot})
	if err != nil {
		t.Fatal(err)
	}
	if res.Iterations != 80 || res.EnvSteps != 40960 || len(seen) != 80 || seen[79].Version != 80 || plotted != 80 {
		t.Fatalf("result %+v, %d progress calls", res, len(seen))
	}
	if res.EvalReturnMean < 150 {
		t.Fatalf("evaluation return %.1f after 40k steps; a learning PPO is well above 150", res.EvalReturnMean)
	}
	// metrics.jsonl: one JSON object per iteration, steps increasing.
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		var m Metrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d: %v", lines+1, err)
		}
		lines++
		if m.Iteration != lines || m.EnvSteps != int64(lines*512) || math.IsNaN(float64(m.LR)) {
			t.Fatalf("line %d: %+v", lines, m)
		}
	}
	if lines != 80 {
		t.Fatalf("%d metrics lines", lines)
	}
	var cfg Config
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg.Env != "CartPole-v1" || cfg.Epochs != 4 || cfg.LR != 2.5e-4 {
		t.Fatalf("config.json: %v %+v", err, cfg)
	}
	for _, name := range []string{"policy.onnx", "curve.png"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	s, err := onnx.Open(context.Background(), res.Policy, onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Metadata()["towerrl.version"] != "80" || s.Metadata()["towerrl.env_id"] != "CartPole-v1" || s.Inputs()[0].Name != "obs" {
		t.Fatalf("metadata %v inputs %v", s.Metadata(), s.Inputs())
	}
	// The exported file is what batchers and cmd/eval load.
	cart, _ := envs.Lookup("CartPole-v1")
	if _, err := bind.Load(context.Background(), res.Policy, cart, bind.Config{}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want error
	}{
		{Config{}, ErrConfig},
		{Config{Env: "Nope-v0"}, envs.ErrUnknownEnv},
		{Config{Env: "CartPole-v1", Algo: "nope"}, ErrConfig},
		{Config{Env: "CartPole-v1", Gamma: 2}, ErrConfig},
		{Config{Env: "CartPole-v1", TotalSteps: 100}, ErrConfig},
		{Config{Env: "CartPole-v1", Towers: 200}, ErrConfig},
	} {
		if _, err := Train(context.Background(), tc.cfg, Options{}); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.cfg, err, tc.want)
		}
	}
}

// counting is PPO that counts the trainer's calls: an algorithm added from outside the engine
// by registering it.
type counting struct {
	*ppo.PPO
	targets, losses *atomic.Int64
}

func (c counting) Name() string { return "counting-ppo" }
func (c counting) Targets(r algo.Rollout, adv, ret []float32) error {
	c.targets.Add(1)
	return c.PPO.Targets(r, adv, ret)
}
func (c counting) Loss(h algo.Heads) (algo.Loss, error) {
	c.losses.Add(1)
	return c.PPO.Loss(h)
}

// TestRegisteredAlgorithm: Config.Algo picks a registered algorithm, which computes the
// targets of every rollout and the loss of every tower.
func TestRegisteredAlgorithm(t *testing.T) {
	var targets, losses atomic.Int64
	algo.Register("counting-ppo", func(s algo.Settings) (algo.Algorithm, error) {
		p, err := ppo.New(s)
		if err != nil {
			return nil, err
		}
		return counting{PPO: p.(*ppo.PPO), targets: &targets, losses: &losses}, nil
	}, algo.Capabilities{OnPolicy: true})
	cfg := smallRun(1)
	cfg.Algo, cfg.Towers = "counting-ppo", 2
	var title string
	plot := func(_, t string, _ []Metrics) error { title = t; return nil }
	res, err := Train(context.Background(), cfg, Options{Out: t.TempDir(), Plot: plot, NoTensorBoard: true})
	if err != nil {
		t.Fatal(err)
	}
	// The curve is titled by the run's algorithm (every run's was "PPO on …").
	if want := fmt.Sprintf("COUNTING-PPO on %s, seed %d", cfg.Env, cfg.Seed); title != want {
		t.Errorf("curve title %q, want %q", title, want)
	}
	if targets.Load() != int64(res.Iterations) || losses.Load() != 2 {
		t.Fatalf("%d iterations: Targets called %d times, Loss %d times (want one per iteration, one per tower)", res.Iterations, targets.Load(), losses.Load())
	}
}

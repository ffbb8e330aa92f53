package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/learner/mpi"
	"go.uber.org/zap"
)

func TestTrainAndResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	var out bytes.Buffer
	cfg := engine.Config{Env: "CartPole-v1", TotalSteps: 2048, EvalEpisodes: 3}
	if err := run(context.Background(), &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	var sum map[string]any
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"eval_return_mean", "env_steps", "wall_seconds", "policy"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary lacks %s: %s", k, out.String())
		}
	}
	if sum["policy"] != filepath.Join(dir, "policy.onnx") || sum["env_steps"].(float64) != 2048 {
		t.Fatalf("summary %s", out.String())
	}
	// Resuming a finished run has nothing left to do but evaluate; it must not fail or retrain.
	out.Reset()
	if err := run(context.Background(), &out, zap.NewNop(), nil, engine.Config{}, nil, "", dir, "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), &out, zap.NewNop(), nil, engine.Config{}, nil, dir, "", "", nil, serveFlags{}); err == nil {
		t.Fatal("no --env accepted")
	}
}

// configure parses args as train's command line and resolves the run's configuration
// (preset, then the config file, then the flags given).
func configure(t *testing.T, file []byte, args ...string) (engine.Config, chosen, error) {
	t.Helper()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	var cf configFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	change, err := cf.overrides(fs)
	if err != nil {
		return engine.Config{}, chosen{}, err
	}
	return resolve(file, change)
}

// TestPresets: --env alone takes the env's preset, named in config.json; a flag overrides its
// field (an explicit false or 0 too), a --config file's fields go over the preset's and flags
// over both; --preset none gives the plain defaults; --show-preset prints the preset in force;
// a preset that does not exist is an error naming it.
func TestPresets(t *testing.T) {
	cfg, c, err := configure(t, nil, "--env", "CartPole-v1")
	if err != nil || !c.ok || cfg.Preset != "ppo/CartPole-v1" || cfg.TotalSteps != 500_000 || cfg.EntCoef != 0.01 {
		t.Fatalf("no flags: %+v %v", cfg, err)
	}
	cfg, _, err = configure(t, nil, "--env", "CartPole-v1", "--total-steps", "2048", "--ent-coef", "0", "--norm-obs", "--hidden", "16,8")
	if err != nil || cfg.TotalSteps != 2048 || cfg.EntCoef != -1 || !cfg.NormObs || len(cfg.Hidden) != 2 || cfg.Hidden[1] != 8 ||
		cfg.Preset != "ppo/CartPole-v1" || cfg.RolloutSteps != 128 {
		t.Fatalf("flags over the preset: %+v %v", cfg, err)
	}
	cfg, _, err = configure(t, nil, "--env", "CartPole-v1", "--eval-episodes", "-1", "--checkpoint-every", "3", "--gamma", "0.98", "--rollout-steps", "64")
	if err != nil || cfg.EvalEpisodes != -1 || cfg.CheckpointEvery != 3 || cfg.Gamma != 0.98 || cfg.RolloutSteps != 64 {
		t.Fatalf("--eval-episodes, --checkpoint-every, --gamma, --rollout-steps: %+v %v", cfg, err)
	}
	file := []byte(`{"env": "CartPole-v1", "rollout_steps": 64, "lr": 0.001}`)
	cfg, _, err = configure(t, file, "--lr", "0.002")
	if err != nil || cfg.RolloutSteps != 64 || cfg.LR != 0.002 || cfg.Envs != 4 || cfg.Preset != "ppo/CartPole-v1" {
		t.Fatalf("config file over the preset, flags over both: %+v %v", cfg, err)
	}
	cfg, c, err = configure(t, nil, "--env", "CartPole-v1", "--preset", "none")
	if err != nil || c.ok || cfg.Preset != "none" || cfg.TotalSteps != 0 || cfg.LR != 0 {
		t.Fatalf("--preset none: %+v %v", cfg, err)
	}
	cfg, _, err = configure(t, []byte(`{"env": "CartPole-v1", "preset": "none"}`))
	if err != nil || cfg.Preset != "none" || cfg.TotalSteps != 0 {
		t.Fatalf(`"preset": "none" in a config file: %+v %v`, cfg, err)
	}
	if _, _, err := configure(t, nil, "--env", "CartPole-v1", "--preset", "ppo/CartPole-v0"); err == nil ||
		!strings.Contains(err.Error(), `"ppo/CartPole-v0" does not exist`) {
		t.Fatalf("a preset that does not exist: %v", err)
	}
	if _, _, err := configure(t, nil, "--env", "CartPole-v1", "--hidden", "16,x"); err == nil || !strings.Contains(err.Error(), "--hidden") {
		t.Fatalf("bad --hidden: %v", err)
	}

	var out bytes.Buffer
	cfg, c, _ = configure(t, nil, "--env", "CartPole-v1")
	if err := showPreset(&out, cfg, c); err != nil {
		t.Fatal(err)
	}
	var shown struct {
		Preset, About string
		Config        map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &shown); err != nil || shown.Preset != "ppo/CartPole-v1" || shown.Config["rollout_steps"] != 128.0 || shown.About == "" {
		t.Fatalf("--show-preset: %s (%v)", out.String(), err)
	}
	out.Reset()
	cfg, c, _ = configure(t, nil, "--env", "CartPole-v1", "--preset", "none")
	if err := showPreset(&out, cfg, c); err != nil || !strings.Contains(out.String(), `"preset":"none"`) || !strings.Contains(out.String(), "--preset none") {
		t.Fatalf("--show-preset with --preset none: %s %v", out.String(), err)
	}

	// config.json names the preset.
	cfg, _, _ = configure(t, nil, "--env", "CartPole-v1", "--total-steps", "2048")
	cfg.EvalEpisodes = -1
	dir := filepath.Join(t.TempDir(), "run")
	if err := run(context.Background(), &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var written engine.Config
	if err := json.Unmarshal(b, &written); err != nil || written.Preset != "ppo/CartPole-v1" || written.TotalSteps != 2048 {
		t.Fatalf("config.json: preset %q, total_steps %d (%v)", written.Preset, written.TotalSteps, err)
	}
}

// TestOneSummaryPerJob: under mpirun every rank printed a summary on stdout, rank 1's with
// "eval_return_mean":0 and "policy":"", which broke scripts reading one JSON object. Rank 0
// alone prints it.
func TestOneSummaryPerJob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := engine.Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * 512 * 2, EvalEpisodes: 2}
	gs := mpi.InProcess(2)
	outs := make([]bytes.Buffer, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			errs[r] = run(context.Background(), &outs[r], zap.NewNop(), nil, cfg, nil, dir, "", "", gs[r], serveFlags{})
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if outs[1].Len() != 0 {
		t.Errorf("rank 1 printed %q", outs[1].String())
	}
	var sum engine.Result
	if err := json.Unmarshal(outs[0].Bytes(), &sum); err != nil || sum.Policy == "" || sum.EvalEpisodes != 2 || strings.Count(outs[0].String(), "\n") != 1 {
		t.Fatalf("rank 0 printed %q (%v)", outs[0].String(), err)
	}
}

// TestServePortBusy: train --serve with its port taken failed leaving batcher.creds and nats/
// in --out, and the same command was then refused (a folder not empty, with no config.json to
// resume). It now fails naming the port and leaves nothing; the same command fails the same
// way until the port is free.
func TestServePortBusy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := filepath.Join(t.TempDir(), "run")
	cfg := engine.Config{Env: "CartPole-v1", TotalSteps: 2048, EvalEpisodes: -1}
	sf := serveFlags{addr: l.Addr().String(), tasks: 1, credits: -1}
	for try := 1; try <= 2; try++ {
		var out bytes.Buffer
		err := run(context.Background(), &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, sf)
		if err == nil || strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), l.Addr().String()) {
			t.Fatalf("try %d: %v; want an error naming the busy address", try, err)
		}
		if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
			entries, _ := os.ReadDir(dir)
			t.Fatalf("try %d left %s: %v (%v)", try, dir, entries, err)
		}
	}
}

// TestHugeConfigFile: a --config of 100 MB was read whole and its value echoed into stderr; a
// file past 1 MiB is refused before it is read, in an error of a line.
func TestHugeConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.json")
	big := append([]byte(`{"env": "`), bytes.Repeat([]byte("x"), 2<<20)...)
	if err := os.WriteFile(path, append(big, `"}`...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := readConfig(path)
	if err == nil || !strings.Contains(err.Error(), "--config") || !strings.Contains(err.Error(), "more than the 1.0 MiB") || len(err.Error()) > 400 {
		t.Fatalf("a 2 MiB config: %v", err)
	}
}

// TestEvalFlags: --eval-every, --stop-at-return and --gif-every set their config fields (a
// return of 0 too: the flag given is the value), and a run with them reports the best policy
// and why it stopped in its summary.
func TestEvalFlags(t *testing.T) {
	cfg, _, err := configure(t, nil, "--env", "CartPole-v1", "--eval-every", "2", "--stop-at-return", "0", "--gif-every", "3")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.EvalEvery != 2 || cfg.StopAtReturn == nil || *cfg.StopAtReturn != 0 || cfg.GifEvery != 3 {
		t.Fatalf("eval_every %d, stop_at_return %v, gif_every %d", cfg.EvalEvery, cfg.StopAtReturn, cfg.GifEvery)
	}
	if cfg, _, err = configure(t, nil, "--env", "CartPole-v1"); err != nil || cfg.StopAtReturn != nil {
		t.Fatalf("stop_at_return %v without the flag, %v", cfg.StopAtReturn, err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	var out bytes.Buffer
	low := 0.0 // any CartPole evaluation reaches it: the run stops at the first
	cfg = engine.Config{Env: "CartPole-v1", TotalSteps: 512 * 4, EvalEpisodes: 2, EvalEvery: 2, StopAtReturn: &low}
	if err := run(context.Background(), &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Iterations   int                `json:"iterations"`
		Best         *engine.BestPolicy `json:"best"`
		StoppedEarly string             `json:"stopped_early"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Iterations != 2 || sum.Best == nil || sum.Best.Path != filepath.Join(dir, "best_policy.onnx") || sum.Best.EnvSteps != 1024 ||
		!strings.Contains(sum.StoppedEarly, "stop_at_return 0") {
		t.Errorf("summary %s", out.String())
	}
}

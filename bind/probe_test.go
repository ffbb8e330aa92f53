package bind

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// TestProbeScaleWarns: the case — SAC's squashed output (in [−1, 1]) bound by the user
// as a plain Gaussian mean on Pendulum (bounds ±2) — gets a warning naming the flags at load,
// and the continuous fixtures bound without flags get none.
func TestProbeScaleWarns(t *testing.T) {
	env, err := envs.Lookup("Pendulum-v1")
	if err != nil {
		t.Fatal(err)
	}
	load := func(name string, cfg Config) []observer.LoggedEntry {
		t.Helper()
		core, logs := observer.New(zapcore.WarnLevel)
		cfg.Session = onnx.Config{Logger: zap.New(core)}
		data, err := os.ReadFile(filepath.Join("..", "testdata", "foreign", name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(context.Background(), data, 0, env, cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return logs.All()
	}
	for _, name := range []string{"sb3_ppo_pendulum", "cleanrl_pendulum", "sb3_sac_pendulum", "sb3_sac_pendulum_scaled"} {
		for _, e := range load(name, Config{}) {
			if strings.Contains(e.Message, "probe") {
				t.Errorf("%s bound without flags: unexpected warning %q", name, e.Message)
			}
		}
	}
	// SAC's deterministic output "31" is tanh(mean), in [−1, 1]; named as a Gaussian's mean.
	got := load("sb3_sac_pendulum", Config{Head: head.GaussianKind,
		Names: head.Names{Params: "31", LogStd: "/actor/Clip_output_0"}})
	found := false
	for _, e := range got {
		found = found || strings.Contains(e.Message, "lies in [−1, 1]") && strings.Contains(e.Message, "--head tanh-gaussian --action-scale env") &&
			strings.Contains(e.Message, "let towerrl bind it")
	}
	if !found {
		t.Fatalf("SAC's squashed output taken as a Gaussian mean: no scale warning; warnings %v", got)
	}
}

// TestProbeQuietOnOwnExports: a towerrl export names its head and action space in its
// metadata, so a Gaussian mean past the bounds (a trained PPO policy's, which the env clips) is
// not taken for a binding to correct: no scale warning.
func TestProbeQuietOnOwnExports(t *testing.T) {
	env, err := envs.Lookup("Pendulum-v1")
	if err != nil {
		t.Fatal(err)
	}
	spec := head.Spec{Head: head.GaussianKind, EnvID: env.ID, ObsShape: []int{3}, Low: []float32{-2}, High: []float32{2}}
	params, err := models.NewParams(models.Config{Spec: spec, Hidden: []int{8}}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	bias, _, ok := params.Tensor("actor_mean.2.bias")
	if !ok {
		t.Fatalf("no actor_mean.2.bias in %v", params.Names())
	}
	bias[0] = 10 // every mean near 10, five times the bound
	data, err := models.Export(params, 0)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	if _, err := New(context.Background(), data, 0, env, Config{Session: onnx.Config{Logger: zap.New(core)}}); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.All() {
		t.Errorf("unexpected warning %q", e.Message)
	}
}

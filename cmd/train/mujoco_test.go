//go:build mujoco && cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/gif"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// mujocoDir holds the MuJoCo exports of scripts/gen_fixtures_mujoco.py (see its README.md).
const mujocoDir = "../../testdata/foreign/mujoco/"

// TestMujocoInitPolicy: train --env ENV --init-policy P fine-tunes each MuJoCo export (SB3 PPO
// with and without VecNormalize baked in, SB3 SAC's actor, CleanRL's continuous PPO) with no
// binding flag, for two short iterations; the policy.onnx it writes binds again with no flag,
// to the same head, and is the export's graph (checkFineTuned) with new weights.
func TestMujocoInitPolicy(t *testing.T) {
	paths, err := filepath.Glob(mujocoDir + "*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s (%v); generate them with scripts/gen_fixtures_mujoco.py", mujocoDir, err)
	}
	ctx := context.Background()
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		t.Run(name, func(t *testing.T) {
			var fx struct {
				Env  string `json:"env"`
				Head string `json:"head"`
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &fx); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "run")
			// Two iterations of 256 steps, 2 epochs of 2 minibatches each (kept small for -race).
			// ValueWarmup 1: SAC's actor comes without a critic, and the new one trains alone
			// for ValueWarmup iterations (30 by default) before the actor moves.
			cfg := engine.Config{Env: fx.Env, InitPolicy: mujocoDir + name + ".onnx", TotalSteps: 512, RolloutSteps: 256,
				Epochs: 2, Minibatches: 2, EvalEpisodes: 1, Seed: 1, ValueWarmup: 1}
			var out bytes.Buffer
			if err := run(ctx, &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
				t.Fatal(err)
			}
			var sum struct {
				EnvSteps float64 `json:"env_steps"`
				Policy   string  `json:"policy"`
				Eval     float64 `json:"eval_return_mean"`
			}
			if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s", name, out.String())
			if sum.EnvSteps != 512 || sum.Policy != filepath.Join(dir, "policy.onnx") {
				t.Fatalf("summary %s", out.String())
			}
			env, err := envs.Lookup(fx.Env)
			if err != nil {
				t.Fatal(err)
			}
			pol, err := bind.Load(ctx, sum.Policy, env, bind.Config{})
			if err != nil {
				t.Fatalf("the fine-tuned policy: %v", err)
			}
			if h := string(pol.Spec().Head); h != fx.Head {
				t.Fatalf("the fine-tuned policy binds to a %s head, the export to %s", h, fx.Head)
			}
			checkFineTuned(t, mujocoDir+name+".onnx", sum.Policy)
		})
	}
}

// checkFineTuned checks that the fine-tuned graph at got is the export at orig with trained
// weights: the same inputs and outputs (names and types), every initializer of the export still
// there, the library's parameters (named for their module: policy.*, actor.*, agent.*) changed
// at least in part, and the other constants (VecNormalize's obs_mean and its folded
// sqrt(var + eps)) as they were.
func checkFineTuned(t *testing.T, orig, got string) {
	t.Helper()
	load := func(path string) *onnxpb.GraphProto {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var m onnxpb.ModelProto
		if err := proto.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m.GetGraph()
	}
	a, b := load(orig), load(got)
	sig := func(vs []*onnxpb.ValueInfoProto) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.GetName()+" "+prototext.Format(v.GetType()))
		}
		return out
	}
	if !slices.Equal(sig(a.GetInput()), sig(b.GetInput())) || !slices.Equal(sig(a.GetOutput()), sig(b.GetOutput())) {
		t.Errorf("interface changed: %v -> %v, %v -> %v", sig(a.GetInput()), sig(a.GetOutput()), sig(b.GetInput()), sig(b.GetOutput()))
	}
	inits := map[string]*onnxpb.TensorProto{}
	for _, x := range b.GetInitializer() {
		inits[x.GetName()] = x
	}
	changed := 0
	for _, x := range a.GetInitializer() {
		y, ok := inits[x.GetName()]
		param := strings.HasPrefix(x.GetName(), "policy.") || strings.HasPrefix(x.GetName(), "actor.") ||
			strings.HasPrefix(x.GetName(), "agent.")
		switch {
		case !ok:
			t.Errorf("initializer %s is gone", x.GetName())
		case proto.Equal(x, y):
		case param:
			changed++
		default:
			t.Errorf("constant %s changed", x.GetName())
		}
	}
	if changed == 0 {
		t.Error("no parameter changed")
	}
}

// TestMujocoGifEvery: train --gif-every 1 on InvertedPendulum-v4 films an episode after each of
// its two iterations, offscreen through MuJoCo: gifs/step-000000256.gif and step-000000512.gif,
// 480×480 frames shown 0.16 s each (a frame every 4 steps of 0.04 s), named in metrics.jsonl.
func TestMujocoGifEvery(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := engine.Config{Env: "InvertedPendulum-v4", TotalSteps: 512, RolloutSteps: 256, Epochs: 1, Minibatches: 2,
		EvalEpisodes: 1, Seed: 1, GifEvery: 1}
	if err := run(context.Background(), &bytes.Buffer{}, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{}); err != nil {
		t.Fatal(err)
	}
	metrics, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gifs/step-000000256.gif", "gifs/step-000000512.gif"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		g, err := gif.DecodeAll(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(g.Image) < 2 || g.Config.Width != 480 || g.Config.Height != 480 || g.Delay[0] != 16 {
			t.Errorf("%s: %d frames of %d×%d shown %d hundredths", name, len(g.Image), g.Config.Width, g.Config.Height, g.Delay[0])
		}
		if !bytes.Contains(metrics, []byte(`"gif":"`+name+`"`)) {
			t.Errorf("metrics.jsonl does not name %s", name)
		}
	}
}

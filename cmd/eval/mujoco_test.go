//go:build mujoco && cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
)

// mujocoDir holds the MuJoCo exports of scripts/gen_fixtures_mujoco.py (see its README.md).
const mujocoDir = "../../testdata/foreign/mujoco/"

// mujocoFixture is the part of a MuJoCo fixture's NAME.json these tests read.
type mujocoFixture struct {
	Name          string
	Env           string `json:"env"`
	Head          string `json:"head"`
	ActionScaling string `json:"action_scaling"`
	Bounds        struct {
		Low       float32 `json:"low"`
		High      float32 `json:"high"`
		ActionDim int     `json:"action_dim"`
	} `json:"bounds"`
}

func mujocoFixtures(t *testing.T) []mujocoFixture {
	t.Helper()
	paths, err := filepath.Glob(mujocoDir + "*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s (%v); generate them with scripts/gen_fixtures_mujoco.py", mujocoDir, err)
	}
	var out []mujocoFixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f := mujocoFixture{Name: strings.TrimSuffix(filepath.Base(p), ".json")}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, f)
	}
	return out
}

// evalSummary is the part of eval's summary these tests read.
type evalSummary struct {
	Episodes   int       `json:"episodes"`
	ReturnMean float64   `json:"return_mean"`
	LengthMean float64   `json:"length_mean"`
	Returns    []float64 `json:"returns"`
}

// TestMujocoForeignNoFlags: SB3's PPO (with and without VecNormalize baked in) and SAC exports
// and CleanRL's continuous PPO for MuJoCo envs are bound with no flag, to the fixture's head
// and the env's action space (SAC's squashed actions mapped onto the env's bounds), without a
// warning, and evaluate whole episodes: HalfCheetah's last 1000 steps (it never terminates).
// (cmd/batcher's TestMujocoForeignPolicies checks the actions against PyTorch's.)
func TestMujocoForeignNoFlags(t *testing.T) {
	ctx := context.Background()
	for _, f := range mujocoFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			path := mujocoDir + f.Name + ".onnx"
			env, err := envs.Lookup(f.Env)
			if err != nil {
				t.Fatal(err)
			}
			p, err := bind.Load(ctx, path, env, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			spec := p.Spec()
			low, high := slices.Repeat([]float32{f.Bounds.Low}, f.Bounds.ActionDim), slices.Repeat([]float32{f.Bounds.High}, f.Bounds.ActionDim)
			if string(spec.Head) != f.Head || !slices.Equal(spec.Low, low) || !slices.Equal(spec.High, high) {
				t.Fatalf("bound %s over %v to %v, want %s over %v to %v", spec.Head, spec.Low, spec.High, f.Head, low, high)
			}
			if spec.Head == head.TanhGaussianKind && (spec.Scale != head.ScaleEnv) != (f.ActionScaling == "none") {
				t.Fatalf("action scale %q, fixture's action_scaling %q", spec.Scale, f.ActionScaling)
			}
			core, logs := observer.New(zapcore.WarnLevel)
			var stdout bytes.Buffer
			o := options{policy: path, env: f.Env, episodes: 2, seed: 3}
			o.flags.Device = "cpu"
			if err := run(ctx, &stdout, zap.New(core), o); err != nil {
				t.Fatal(err)
			}
			for _, e := range logs.All() {
				t.Errorf("warning: %s %v", e.Message, e.ContextMap())
			}
			var sum evalSummary
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s on %s: returns %.1f, mean length %.0f", f.Name, f.Env, sum.Returns, sum.LengthMean)
			if sum.Episodes != 2 || len(sum.Returns) != 2 || sum.LengthMean < 1 || sum.LengthMean > 1000 ||
				slices.ContainsFunc(sum.Returns, func(r float64) bool { return math.IsNaN(r) || math.IsInf(r, 0) }) {
				t.Fatalf("summary %s", stdout.String())
			}
			if f.Env == "HalfCheetah-v4" && sum.LengthMean != 1000 {
				t.Fatalf("HalfCheetah episodes of %.1f steps on average, want 1000", sum.LengthMean)
			}
		})
	}
}

// TestMujocoSACScale: on InvertedPendulum-v4, whose force is bounded by ±3, SAC's tanh output is
// mapped onto [−3, 3] with no flag; --action-scale none passes it as it is (a third of the
// force), and the same deterministic episodes then end differently.
func TestMujocoSACScale(t *testing.T) {
	const policy = mujocoDir + "sb3_sac_invertedpendulum.onnx"
	eval := func(scale string) evalSummary {
		var stdout bytes.Buffer
		o := options{policy: policy, env: "InvertedPendulum-v4", episodes: 4, seed: 3}
		o.flags.Device = "cpu"
		o.flags.ActionScale = scale
		if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
			t.Fatal(err)
		}
		var sum evalSummary
		if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		return sum
	}
	def, env, none := eval(""), eval("env"), eval("none")
	t.Logf("returns: no flag %v, --action-scale env %v, --action-scale none %v", def.Returns, env.Returns, none.Returns)
	if !slices.Equal(def.Returns, env.Returns) {
		t.Errorf("no flag gives %v, --action-scale env %v", def.Returns, env.Returns)
	}
	if slices.Equal(def.Returns, none.Returns) {
		t.Errorf("--action-scale none gives the returns of the scaled actions, %v", none.Returns)
	}
}

// TestGIFMujoco: --gif films a MuJoCo env offscreen: a random InvertedPendulum episode (it
// falls within a few dozen steps) is a 480×480 GIF of one frame every 4 steps (0.16 s each, as
// the env's dt of 0.04 s makes them play in real time) and the end, whose return is the
// evaluation's first.
func TestGIFMujoco(t *testing.T) {
	sum, g := evalGIF(t, options{policy: "random", env: "InvertedPendulum-v4", episodes: 1, seed: 1})
	s := sum.GIF
	if s == nil || s.Width != 480 || s.Height != 480 || s.Every != 4 || s.FPS != 6 || s.Frames != (s.Length+3)/4+1 {
		t.Fatalf("gif summary %+v", s)
	}
	if len(g.Image) != s.Frames || g.Config.Width != 480 || g.Config.Height != 480 || g.Delay[0] != 16 {
		t.Errorf("GIF of %d frames, %d×%d, delay %d", len(g.Image), g.Config.Width, g.Config.Height, g.Delay[0])
	}
	if s.Return != sum.Returns[0] {
		t.Errorf("the GIF's episode returned %v, the evaluation's first %v", s.Return, sum.Returns[0])
	}
}

//go:build mujoco && cgo

package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/towerrl/towerrl/internal/npy"
)

// mujocoDir holds the MuJoCo exports of scripts/gen_fixtures_mujoco.py (see its README.md):
// SB3 PPO (with and without VecNormalize baked in) and SAC, CleanRL's continuous PPO, with
// PyTorch's values on 16 observations recorded from towerrl's own envs.
const mujocoDir = "../../testdata/foreign/mujoco/"

// mujocoFixture is the part of a MuJoCo fixture's NAME.json these tests read.
type mujocoFixture struct {
	Name      string
	Env       string            `json:"env"`
	Head      string            `json:"head"`
	InputFile string            `json:"input_file"`
	Reference map[string]string `json:"reference"`
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

// TestMujocoForeignPolicies collects with each MuJoCo export and no binding flag, and checks
// what towerrl did against PyTorch. The fixture's 16 observations are the first ones of 16
// envs after a reset with seed 7, so a deterministic one-step run with the same flags sees them
// again (checked to 1e-6); on them the shard's actions (the env's: the mean clipped to the
// bounds, SAC's tanh(mu) mapped onto them), values and log-probabilities (the Gaussian's
// density at its mean: the log_std) must be PyTorch's within 1e-5 × max(1, |PyTorch's|). A
// sampled run with no flag at all must collect too.
func TestMujocoForeignPolicies(t *testing.T) {
	for _, f := range mujocoFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			out := filepath.Join(t.TempDir(), "data")
			var stdout bytes.Buffer
			o := options{policy: mujocoDir + f.Name + ".onnx", env: f.Env, envs: 16, workers: 1, steps: 16, rollout: 1,
				seed: 7, out: out, deterministic: true}
			o.flags.Device = "cpu"
			if err := run(context.Background(), &stdout, io.Discard, zap.New(core), o); err != nil {
				t.Fatal(err)
			}
			for _, e := range logs.All() {
				t.Errorf("warning: %s %v", e.Message, e.ContextMap())
			}
			shard := readShard(t, filepath.Join(out, "shard-000000.npz"))
			in, err := npy.ReadFile(mujocoDir + f.InputFile)
			if err != nil {
				t.Fatal(err)
			}
			obs := shard["observations"].F32
			if len(obs) != len(in.F32) {
				t.Fatalf("the run's first observations hold %d values, the fixture's %d", len(obs), len(in.F32))
			}
			for k, x := range in.F32 {
				if math.Abs(float64(obs[k]-x)) > 1e-6*math.Max(1, math.Abs(float64(x))) {
					t.Fatalf("observation value %d is %v, the fixture's %v: the env's resets changed; re-record the "+
						"fixtures' observations with scripts/gen_fixtures_mujoco.py --record", k, obs[k], x)
				}
			}
			ref := func(key string) []float32 {
				name, ok := f.Reference[key]
				if !ok {
					return nil
				}
				a, err := npy.ReadFile(mujocoDir + name)
				if err != nil {
					t.Fatal(err)
				}
				return a.F32
			}
			values := ref("value")
			if values == nil { // SAC's actor: no value output, values recorded as 0
				values = make([]float32, len(shard["values"].F32))
			}
			for _, c := range []struct {
				key       string
				got, want []float32
			}{
				{"actions", shard["actions"].F32, ref("env_actions")},
				{"values", shard["values"].F32, values},
				{"logp", shard["logp"].F32, ref("logp_mode")},
			} {
				if len(c.got) != len(c.want) || len(c.got) == 0 {
					t.Fatalf("%s: %d values, PyTorch %d", c.key, len(c.got), len(c.want))
				}
				worst := 0.0
				for k, w := range c.want {
					d := math.Abs(float64(c.got[k]-w)) / math.Max(1, math.Abs(float64(w)))
					worst = math.Max(worst, d)
					if d > 1e-5 {
						t.Errorf("%s[%d] = %v, PyTorch %v", c.key, k, c.got[k], w)
					}
				}
				t.Logf("%s: %d values, largest difference %.2g (relative to max(1, |PyTorch's|))", c.key, len(c.want), worst)
			}
		})
		t.Run(f.Name+"/sampled", func(t *testing.T) {
			var stdout bytes.Buffer
			o := options{policy: mujocoDir + f.Name + ".onnx", env: f.Env, envs: 8, workers: 2, steps: 256, rollout: 16,
				out: filepath.Join(t.TempDir(), "data"), seed: 1}
			o.flags.Device = "cpu"
			if err := run(context.Background(), &stdout, io.Discard, zap.NewNop(), o); err != nil {
				t.Fatal(err)
			}
			var sum struct {
				Steps  int64    `json:"steps"`
				Shards []string `json:"shards"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.Steps != 256 || len(sum.Shards) != 1 {
				t.Fatalf("summary %s", stdout.String())
			}
		})
	}
}

// readShard reads every array of a .npz shard, by key.
func readShard(t *testing.T, path string) map[string]*npy.Array {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	out := map[string]*npy.Array{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		a, err := npy.Read(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out[strings.TrimSuffix(f.Name, ".npy")] = a
	}
	return out
}

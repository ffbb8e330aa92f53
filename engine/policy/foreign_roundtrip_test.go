package policy

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// TestForeignExportRoundTrip imports each feed-forward fixture for fine-tuning and, before any
// training, checks that both the model the batchers run (the export) and policy.onnx (the
// artifact) compute the original's outputs on the fixture's observations: the import, the
// batch rewrite, a new critic and the write-back change no weight.
func TestForeignExportRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"sb3_ppo_cartpole", "sb3_ppo_cartpole_old", "sb3_ppo_pendulum", "cleanrl_pendulum",
		"sb3_sac_pendulum", "vecnorm_cartpole", "rllib_cartpole_mlp", "layernorm_opset17_cartpole"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "foreign")
			var fx foreignFixture
			if err := json.Unmarshal(readFile(t, filepath.Join(dir, name+".json")), &fx); err != nil {
				t.Fatal(err)
			}
			data := readFile(t, filepath.Join(dir, name+".onnx"))
			env, err := envs.Lookup(fx.Env)
			if err != nil {
				t.Fatal(err)
			}
			hs := head.Spec{EnvID: fx.Env, ObsShape: env.Observation.Shape}
			if err := hs.ParseActionSpace(env.Action.String()); err != nil {
				t.Fatal(err)
			}
			f, err := loadForeign(ctx, data, hs, layout.Overrides{}, onnx.Config{}, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			exported, err := f.Export(0)
			if err != nil {
				t.Fatal(err)
			}
			art, err := f.Artifact(exported, 0)
			if err != nil {
				t.Fatal(err)
			}
			in, err := npy.ReadFile(filepath.Join(dir, name+".input.npy"))
			if err != nil {
				t.Fatal(err)
			}
			obs := in.F32
			rowLen := len(obs) / in.Shape[0]
			want := outputsRowByRow(t, data, obs, rowLen)
			for what, model := range map[string][]byte{"export": exported, "policy.onnx": art} {
				got := outputsRowByRow(t, model, obs, rowLen)
				for k, w := range want {
					g, ok := got[k]
					if !ok {
						t.Errorf("%s lacks output %q", what, k)
						continue
					}
					for i := range w {
						if d := math.Abs(float64(g[i] - w[i])); d > 1e-5*math.Max(1, math.Abs(float64(w[i]))) {
							t.Errorf("%s: output %q[%d] = %v, the original %v", what, k, i, g[i], w[i])
							break
						}
					}
				}
			}
		})
	}
}

// outputsRowByRow runs model on each row of obs (batch 1, which every fixture accepts) and
// returns its float32 outputs by name, rows concatenated. Other inputs are fed zeros.
func outputsRowByRow(t *testing.T, model []byte, obs []float32, rowLen int) map[string][]float32 {
	t.Helper()
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string][]float32{}
	for r := range len(obs) / rowLen {
		buf, err := onnx.Input[float32](s, 0)
		if err != nil {
			t.Fatal(err)
		}
		copy(buf, obs[r*rowLen:(r+1)*rowLen])
		if err := s.Run(1); err != nil {
			t.Fatal(err)
		}
		for i, o := range s.Outputs() {
			if o.DType != onnx.Float32 {
				continue
			}
			v, err := onnx.Output[float32](s, i)
			if err != nil {
				t.Fatal(err)
			}
			out[o.Name] = append(out[o.Name], v[:o.RowSize()]...)
		}
	}
	return out
}

// foreignFixture is the part of testdata/foreign/NAME.json these tests read.
type foreignFixture struct {
	Env           string `json:"env"`
	WeakOf        string `json:"weak_of"`
	PytorchReturn struct {
		Mean float64 `json:"mean"`
	} `json:"pytorch_return"`
}

package engine

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
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
			dir := filepath.Join("..", "testdata", "foreign")
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
			exported, err := f.export(0)
			if err != nil {
				t.Fatal(err)
			}
			art, err := f.artifact(exported, 0)
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

// checkSameInterface compares the graph inputs and outputs (names, element types, dims) and
// the opset of two models, and opens the second in ONNX Runtime.
func checkSameInterface(t *testing.T, origPath, gotPath string) {
	t.Helper()
	load := func(path string) *onnxpb.ModelProto {
		var m onnxpb.ModelProto
		if err := proto.Unmarshal(readFile(t, path), &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	a, b := load(origPath), load(gotPath)
	sig := func(vs []*onnxpb.ValueInfoProto) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.GetName()+" "+prototext.Format(v.GetType()))
		}
		return out
	}
	if !slices.Equal(sig(a.GetGraph().GetInput()), sig(b.GetGraph().GetInput())) {
		t.Errorf("inputs changed:\n%v\n%v", sig(a.GetGraph().GetInput()), sig(b.GetGraph().GetInput()))
	}
	if !slices.Equal(sig(a.GetGraph().GetOutput()), sig(b.GetGraph().GetOutput())) {
		t.Errorf("outputs changed:\n%v\n%v", sig(a.GetGraph().GetOutput()), sig(b.GetGraph().GetOutput()))
	}
	if prototext.Format(a.GetOpsetImport()[0]) != prototext.Format(b.GetOpsetImport()[0]) {
		t.Errorf("opset changed: %v → %v", a.GetOpsetImport(), b.GetOpsetImport())
	}
	s, err := onnx.Open(context.Background(), gotPath, onnx.Config{MaxBatch: 1})
	if err != nil {
		t.Fatalf("the written policy does not load in ONNX Runtime: %v", err)
	}
	s.Close()
}

// foreignFixture is the part of testdata/foreign/NAME.json these tests read.
type foreignFixture struct {
	Env           string `json:"env"`
	WeakOf        string `json:"weak_of"`
	PytorchReturn struct {
		Mean float64 `json:"mean"`
	} `json:"pytorch_return"`
}

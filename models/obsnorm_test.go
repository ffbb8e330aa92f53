package models

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/engine/normalize"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// TestObsNormMatchesGo runs the normaliser PrependObsNorm writes through ONNX Runtime and
// compares, bit for bit, its output (ObsNormOut, exposed as a graph output) with
// normalize.Frozen.Apply on the same observations, and the policy's outputs with those of
// the plain export fed the Go-normalised observations; at opset 17 (Clip's bounds as inputs)
// and opset 10 (as attributes). Some observations lie beyond the clip.
func TestObsNormMatchesGo(t *testing.T) {
	for _, op := range []int64{Opset, 10} {
		rng := rand.New(rand.NewPCG(11, uint64(op)))
		cfg := Config{Spec: head.Spec{Head: head.GaussianKind, Low: []float32{-1, -1}, High: []float32{1, 1}, ObsShape: []int{3}}}
		params, err := NewParams(cfg, rng)
		if err != nil {
			t.Fatal(err)
		}
		perturb(params, rng)
		plain, err := ExportModel(params, 1)
		if err != nil {
			t.Fatal(err)
		}
		plain.OpsetImport[0].Version = proto.Int64(op)
		frozen := normalize.Frozen{Mean: []float32{0.3, -12.5, 1e3}, Scale: []float32{0.7, 3.1, 1e-3}, Clip: 5}
		normed := proto.Clone(plain).(*onnxpb.ModelProto)
		if err := PrependObsNorm(normed, InputObs, ObsNorm{Mean: frozen.Mean, Scale: frozen.Scale, Clip: frozen.Clip}); err != nil {
			t.Fatal(err)
		}
		normed.Graph.Output = append(normed.Graph.Output, valueInfo(ObsNormOut, nil))
		const batch = 64
		obs := make([]float32, batch*3)
		for i := range obs {
			obs[i] = float32(rng.NormFloat64()*4) + frozen.Mean[i%3]
		}
		obs[0], obs[4] = 1e6, -1e6 // clipped
		goNormed := make([]float32, len(obs))
		if err := frozen.Apply(goNormed, obs); err != nil {
			t.Fatal(err)
		}
		got := runModel(t, normed, obs, batch)
		want := runModel(t, plain, goNormed, batch)
		for i, v := range got[ObsNormOut] {
			if math.Float32bits(v) != math.Float32bits(goNormed[i]) {
				t.Fatalf("opset %d: value %d normalised to %v by ONNX Runtime, %v in Go", op, i, v, goNormed[i])
			}
		}
		if got[ObsNormOut][0] != 5 || got[ObsNormOut][4] != -5 {
			t.Fatalf("opset %d: the clip: %v", op, got[ObsNormOut][:6])
		}
		for _, name := range []string{OutputMean, OutputLogStd, OutputValue} {
			for i, v := range want[name] {
				if math.Float32bits(v) != math.Float32bits(got[name][i]) {
					t.Fatalf("opset %d: %s[%d] %v with the graph's normaliser, %v fed Go-normalised observations", op, name, i, got[name][i], v)
				}
			}
		}
		meta := map[string]string{}
		for _, p := range normed.GetMetadataProps() {
			meta[p.GetKey()] = p.GetValue()
		}
		if meta[KeyObsNorm] != "clip:5" {
			t.Fatalf("metadata %v", meta)
		}
	}
}

// runModel runs m at batch on obs and returns its outputs by name.
func runModel(t *testing.T, m *onnxpb.ModelProto, obs []float32, batch int) map[string][]float32 {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	s, err := onnx.New(context.Background(), b, onnx.Config{MaxBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := onnx.Feed(s, 0, []int64{int64(batch), int64(len(obs) / batch)}, obs); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(batch); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for i, info := range s.Outputs() {
		v, err := onnx.Output[float32](s, i)
		if err != nil {
			t.Fatal(err)
		}
		out[info.Name] = append([]float32(nil), v[:batch*info.RowSize()]...)
	}
	return out
}

func TestObsNormRefusals(t *testing.T) {
	params, err := NewParams(Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	ok := ObsNorm{Mean: make([]float32, 4), Scale: []float32{1, 1, 1, 1}, Clip: 10}
	for name, c := range map[string]struct {
		input string
		n     ObsNorm
	}{
		"no such input": {"observations", ok},
		"wrong size":    {InputObs, ObsNorm{Mean: make([]float32, 3), Scale: []float32{1, 1, 1}, Clip: 10}},
		"no clip":       {InputObs, ObsNorm{Mean: ok.Mean, Scale: ok.Scale}},
	} {
		m, _ := ExportModel(params, 0)
		if err := PrependObsNorm(m, c.input, c.n); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	m, _ := ExportModel(params, 0)
	if err := PrependObsNorm(m, InputObs, ok); err != nil {
		t.Fatal(err)
	}
	if err := PrependObsNorm(m, InputObs, ok); !errors.Is(err, ErrConfig) {
		t.Errorf("a second normaliser: %v", err)
	}
}

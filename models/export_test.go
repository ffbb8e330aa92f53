package models

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// arches are the architectures every export and gradient test runs.
var arches = []struct {
	name  string
	cfg   Config
	heavy bool // skipped at batch 257 with -short
}{
	{"mlp_categorical_separate_tanh", Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}, EnvID: "CartPole-v1"}}, false},
	{"mlp_categorical_shared_relu", Config{Spec: head.Spec{Head: head.CategoricalKind, N: 5, ObsShape: []int{8}},
		Hidden: []int{32, 16, 8}, Activation: ReLU, Shared: true}, false},
	{"mlp_gaussian_separate_tanh", Config{Spec: head.Spec{Head: head.GaussianKind, Low: []float32{-2}, High: []float32{2}, ObsShape: []int{3}},
		LogStdInit: -0.5}, false},
	{"mlp_gaussian_shared_relu_2d_obs", Config{Spec: head.Spec{Head: head.GaussianKind, Low: []float32{-1, -1, -1}, High: []float32{1, 1, 1}, ObsShape: []int{2, 3}},
		Hidden: []int{16}, Activation: ReLU, Shared: true, LogStdInit: 0.3}, false},
	{"nature_cnn_categorical", Config{Arch: NatureCNN, Spec: head.Spec{Head: head.CategoricalKind, N: 6, ObsShape: []int{4, 84, 84}}}, true},
	{"nature_cnn_gaussian", Config{Arch: NatureCNN, Spec: head.Spec{Head: head.GaussianKind, Low: []float32{-1, -1}, High: []float32{1, 1}, ObsShape: []int{1, 84, 84}},
		Hidden: []int{64}}, true},
}

// randomObs fills obs with standard normals, or integers 0..255 for image observations.
func randomObs(rng *rand.Rand, obs []float32, image bool) {
	for i := range obs {
		if image {
			obs[i] = float32(rng.IntN(256))
		} else {
			obs[i] = float32(rng.NormFloat64())
		}
	}
}

// perturb moves the parameters away from their initial values, whose zero biases and 0.01-gain
// policy outputs would make parity trivial: biases get N(0, 0.1²) noise, every weight
// N(0, 0.5²/fan_in), the log_std N(0, 0.1²). The outputs stay of order 1, as a trained
// policy's do.
func perturb(p *Params, rng *rand.Rand) {
	for i := range p.Len() {
		data, shape, _ := p.Tensor(p.names[i])
		sd := 0.1
		switch {
		case len(shape) == 2 && p.names[i] != "actor_logstd": // linear [in, out]
			sd = 0.5 / math.Sqrt(float64(shape[0]))
		case len(shape) == 4: // conv [out, in, k, k]
			sd = 0.5 / math.Sqrt(float64(shape[1]*shape[2]*shape[3]))
		}
		for j := range data {
			data[j] += float32(rng.NormFloat64() * sd)
		}
	}
}

func forward(t testing.TB, params *Params, obs []float32, batch int) (*Policy, map[string][]float32) {
	t.Helper()
	pol, err := Build(G.NewGraph(), params, batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	if err := pol.Compile(); err != nil {
		t.Fatal(err)
	}
	if err := pol.Forward(obs); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for name, n := range map[string]*G.Node{OutputLogits: pol.Logits, OutputMean: pol.Mean, OutputLogStd: pol.LogStd, OutputValue: pol.Value} {
		if n == nil {
			continue
		}
		v, err := pol.Read(n)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = v
	}
	return pol, out
}

// TestExportParity: ONNX Runtime on the exported model and the gorgonia forward agree to 1e-5
// on random inputs at batch 1 and 257, for every architecture.
func TestExportParity(t *testing.T) {
	const tol = 1e-5
	for ai, a := range arches {
		t.Run(a.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ai), 7))
			params, err := NewParams(a.cfg, rng)
			if err != nil {
				t.Fatal(err)
			}
			perturb(params, rng)
			model, err := Export(params, 3)
			if err != nil {
				t.Fatal(err)
			}
			s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: 257})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			spec, ok, err := head.FromMetadata(s.Metadata())
			if err != nil || !ok || spec.Version != 3 || spec.ActionSpace() != a.cfg.Spec.ActionSpace() {
				t.Fatalf("metadata %v: spec %+v ok %v err %v", s.Metadata(), spec, ok, err)
			}
			outs, err := head.Bind(spec, bind.HeadTensors(s.Outputs()), head.Names{})
			if err != nil {
				t.Fatal(err)
			}
			if outs.Value < 0 || (spec.Head == head.GaussianKind) != (outs.LogStd >= 0) {
				t.Fatalf("bound outputs %+v", outs)
			}
			for _, batch := range []int{1, 257} {
				if batch > 1 && a.heavy && testing.Short() {
					continue
				}
				row := product(a.cfg.Spec.ObsShape)
				obs := make([]float32, batch*row)
				randomObs(rng, obs, a.cfg.Arch == NatureCNN)
				_, want := forward(t, params, obs, batch)
				shape := append([]int64{int64(batch)}, shape64(a.cfg.Spec.ObsShape)...)
				if _, err := onnx.Feed(s, 0, shape, obs); err != nil {
					t.Fatal(err)
				}
				if err := s.Run(batch); err != nil {
					t.Fatal(err)
				}
				for name, w := range want {
					i, err := s.OutputIndex(name)
					if err != nil {
						t.Fatal(err)
					}
					got, _ := onnx.Output[float32](s, i)
					worst := maxAbs(got[:len(w)], w)
					t.Logf("batch %d %s: max abs error %.3g (max |output| %.3g)", batch, name, worst, maxAbs(w, make([]float32, len(w))))
					if !(worst <= tol) {
						t.Errorf("batch %d output %q: max abs error %.3g > %g", batch, name, worst, tol)
					}
				}
			}
		})
	}
}

func maxAbs(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	worst := 0.0
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = math.Max(worst, d)
	}
	return worst
}

func shape64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

var _ = fmt.Sprint

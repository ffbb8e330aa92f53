package policy

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// denseCase is a fixture ImportDense takes: a SAC actor (testdata/foreign) or a Q-network
// (testdata/dqn), with PyTorch's outputs on its recorded observations.
type denseCase struct {
	dir, name, env string
	input, want    string // the observations, and PyTorch's outputs of the graph's first output
	argmax         bool   // the graph outputs the greedy action, want holds int64 indices
}

var denseCases = []denseCase{
	{"foreign", "sb3_sac_pendulum", "Pendulum-v1", "sb3_sac_pendulum.input.npy", "sb3_sac_pendulum.31.npy", false},
	{"foreign", "sb3_sac_pendulum_dynbatch", "Pendulum-v1", "sb3_sac_pendulum_dynbatch.input.npy", "sb3_sac_pendulum_dynbatch.32.npy", false},
	{"foreign", "sb3_sac_pendulum_scaled", "Pendulum-v1", "sb3_sac_pendulum_scaled.input.npy", "sb3_sac_pendulum_scaled.40.npy", false},
	{"foreign", "sb3_sac_pendulum_scaled_dynbatch", "Pendulum-v1", "sb3_sac_pendulum_scaled_dynbatch.input.npy", "sb3_sac_pendulum_scaled_dynbatch.41.npy", false},
	{"dqn", "sb3_dqn_cartpole_qnet", "CartPole-v1", "sb3_dqn.input.npy", "sb3_dqn.qvalues.npy", false},
	{"dqn", "cleanrl_dqn_cartpole", "CartPole-v1", "sb3_dqn.input.npy", "sb3_dqn.qvalues.npy", false},
	{"dqn", "sb3_dqn_cartpole", "CartPole-v1", "sb3_dqn.input.npy", "sb3_dqn.actions.npy", true},
}

// envHead is the head an off-policy fine-tune binds a fixture with on env: the env's action
// space, nothing named.
func envHead(t *testing.T, env string) Head {
	t.Helper()
	e, err := envs.Lookup(env)
	if err != nil {
		t.Fatal(err)
	}
	hs := head.Spec{EnvID: env, ObsShape: e.Observation.Shape}
	if err := hs.ParseActionSpace(e.Action.String()); err != nil {
		t.Fatal(err)
	}
	return Head{Spec: hs}
}

// nativeOutputs runs d's network on obs with params p and returns what the graph's first
// output holds: the Q-values (or their argmax, as float32), or the squashed mean tanh(μ),
// mapped onto the env's bounds when the graph maps it.
func nativeOutputs(d *Dense, p, obs []float32, spec head.Spec, argmax bool) []float32 {
	rows := len(obs) / d.Net.In
	w := d.Net.NewWork(rows)
	copy(w.In(), obs)
	d.Net.Forward(p, w)
	out, o := w.Out(), d.Net.Out()
	var got []float32
	for r := range rows {
		row := out[r*o : (r+1)*o]
		switch {
		case d.Binding.Head == head.QValuesKind && argmax:
			best := 0
			for k, v := range row {
				if v > row[best] {
					best = k
				}
			}
			got = append(got, float32(best))
		case d.Binding.Head == head.QValuesKind:
			got = append(got, row...)
		default:
			for j := range len(spec.Low) {
				a := math.Tanh(float64(row[j]))
				if d.Binding.ActionsScaled {
					lo, hi := float64(spec.Low[j]), float64(spec.High[j])
					a = lo + (a+1)*(hi-lo)/2
				}
				got = append(got, float32(a))
			}
		}
	}
	return got
}

func npyFloats(t *testing.T, path string) []float32 {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if a.F32 != nil {
		return a.F32
	}
	var out []float32
	for _, v := range a.I64 {
		out = append(out, float32(v))
	}
	return out
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestImportDenseMatchesGraph: the native network ImportDense reads from each SAC actor and
// Q-network fixture computes PyTorch's outputs on the fixture's observations (the .npy files
// the exporter recorded), and ONNX Runtime's on the graph itself.
func TestImportDenseMatchesGraph(t *testing.T) {
	for _, c := range denseCases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", c.dir)
			data := readFile(t, filepath.Join(dir, c.name+".onnx"))
			h := envHead(t, c.env)
			d, err := ImportDense(data, h)
			if err != nil {
				t.Fatal(err)
			}
			obs := npyFloats(t, filepath.Join(dir, c.input))
			got := nativeOutputs(d, d.Params, obs, h.Spec, c.argmax)
			closeTo(t, "native vs PyTorch", got, npyFloats(t, filepath.Join(dir, c.want)), 1e-5)
			if !c.argmax {
				ort := outputsRowByRow(t, data, obs, d.Net.In)
				closeTo(t, "native vs ONNX Runtime", got, ort[graphOutput(t, data)], 1e-5)
			}
			if d.Binding.Head == head.TanhGaussianKind && (d.FreshLogStd || d.LogStdMin != -20 || d.LogStdMax != 2) {
				t.Errorf("log std: fresh %v, clipped to [%v, %v]; want the graph's own, clipped to SB3's [-20, 2]", d.FreshLogStd, d.LogStdMin, d.LogStdMax)
			}
		})
	}
}

func graphOutput(t *testing.T, data []byte) string {
	t.Helper()
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	return mp.GetGraph().GetOutput()[0].GetName()
}

// perturb returns p with every value moved, as training would.
func perturb(p []float32) []float32 {
	q := append([]float32(nil), p...)
	for i := range q {
		q[i] = q[i]*1.1 + 0.01*float32(i%7-3)
	}
	return q
}

// withoutWeights is mp with its initializers' values cleared, for comparing two graphs'
// structure, names, opset and shapes.
func withoutWeights(t *testing.T, data []byte) *onnxpb.ModelProto {
	t.Helper()
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	for _, init := range mp.GetGraph().GetInitializer() {
		init.RawData, init.FloatData = nil, nil
	}
	return &mp
}

// TestDenseWriteBack: the original graph written back with changed parameters keeps every
// name, the opset, the inputs and outputs with their batch, and computes (in ONNX Runtime)
// what the native network computes with those parameters.
func TestDenseWriteBack(t *testing.T) {
	for _, c := range denseCases {
		if c.argmax {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", c.dir)
			data := readFile(t, filepath.Join(dir, c.name+".onnx"))
			h := envHead(t, c.env)
			d, err := ImportDense(data, h)
			if err != nil {
				t.Fatal(err)
			}
			p := perturb(d.Params)
			back, err := d.WriteBack(p)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(withoutWeights(t, back), withoutWeights(t, data)) {
				t.Fatal("the written-back graph differs from the original beyond its initializers' values")
			}
			obs := npyFloats(t, filepath.Join(dir, c.input))
			ort := outputsRowByRow(t, back, obs, d.Net.In)
			closeTo(t, "written back (ONNX Runtime) vs native", ort[graphOutput(t, back)], nativeOutputs(d, p, obs, h.Spec, false), 1e-5)
			again, err := ImportDense(back, h)
			if err != nil {
				t.Fatal(err)
			}
			closeTo(t, "re-imported parameters", again.Params, p, 0)
		})
	}
}

// meanOnly is the SB3 SAC fixture cut down to tanh(μ): an actor exported without its log std
// (CleanRL's deterministic action, SB3 1.x's), the log-std layer's nodes and initializers gone.
func meanOnly(t *testing.T) []byte {
	t.Helper()
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(readFile(t, filepath.Join("..", "..", "testdata", "foreign", "sb3_sac_pendulum.onnx")), &mp); err != nil {
		t.Fatal(err)
	}
	g := mp.GetGraph()
	var nodes []*onnxpb.NodeProto
	for _, n := range g.GetNode() {
		if n.GetOpType() == "Gemm" && strings.Contains(n.GetInput()[1], "log_std") {
			break // the nodes before it are the mean's
		}
		nodes = append(nodes, n)
	}
	out := g.GetOutput()[0].GetName()
	nodes = append(nodes, &onnxpb.NodeProto{OpType: proto.String("Tanh"), Input: []string{nodes[len(nodes)-1].GetOutput()[0]}, Output: []string{out}})
	g.Node = nodes
	var inits []*onnxpb.TensorProto
	for _, init := range g.GetInitializer() {
		if !strings.Contains(init.GetName(), "log_std") {
			inits = append(inits, init)
		}
	}
	g.Initializer = inits
	data, err := proto.Marshal(&mp)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestDenseFreshLogStd: an actor exported without its log std gets a new log-std layer
// (weights 0, bias InitLogStd, clipped to SAC's [-20, 2]); the mean is the graph's, and the
// written-back graph has only the mean's layers, with the trained values.
func TestDenseFreshLogStd(t *testing.T) {
	data := meanOnly(t)
	h := envHead(t, "Pendulum-v1")
	d, err := ImportDense(data, h)
	if err != nil {
		t.Fatal(err)
	}
	if !d.FreshLogStd || d.Net.Out() != 2 || d.LogStdMin != -20 || d.LogStdMax != 2 {
		t.Fatalf("fresh %v, %d outputs, log std in [%v, %v]; want a new log std beside the mean, in [-20, 2]", d.FreshLogStd, d.Net.Out(), d.LogStdMin, d.LogStdMax)
	}
	last := len(d.Net.Sizes) - 1
	w, b := d.Net.Layer(last)
	for i := w + 1; i < b; i += 2 {
		if d.Params[i] != 0 {
			t.Fatalf("a log-std weight is %v, want 0", d.Params[i])
		}
	}
	if got := d.Params[b+1]; got != float32(InitLogStd) {
		t.Fatalf("log-std bias %v, want %v", got, InitLogStd)
	}
	dir := filepath.Join("..", "..", "testdata", "foreign")
	obs := npyFloats(t, filepath.Join(dir, "sb3_sac_pendulum.input.npy"))
	closeTo(t, "native vs PyTorch", nativeOutputs(d, d.Params, obs, h.Spec, false), npyFloats(t, filepath.Join(dir, "sb3_sac_pendulum.31.npy")), 1e-5)
	p := perturb(d.Params)
	back, err := d.WriteBack(p)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(withoutWeights(t, back), withoutWeights(t, data)) {
		t.Fatal("the written-back graph differs from the original beyond its initializers' values")
	}
	ort := outputsRowByRow(t, back, obs, d.Net.In)
	closeTo(t, "written back vs native", ort[graphOutput(t, back)], nativeOutputs(d, p, obs, h.Spec, false), 1e-5)
}

// TestImportDenseRefuses: a policy of another head, a Gaussian with a parameter log std, and
// a graph that is not a plain MLP are refused, saying what was found and what to do.
func TestImportDenseRefuses(t *testing.T) {
	foreign := filepath.Join("..", "..", "testdata", "foreign")
	normalised := func() []byte { // the Q-network with a Neg where Flatten was: not an MLP on the observations
		var mp onnxpb.ModelProto
		if err := proto.Unmarshal(readFile(t, filepath.Join("..", "..", "testdata", "dqn", "sb3_dqn_cartpole_qnet.onnx")), &mp); err != nil {
			t.Fatal(err)
		}
		mp.GetGraph().GetNode()[0].OpType, mp.GetGraph().GetNode()[0].Attribute = proto.String("Neg"), nil
		data, err := proto.Marshal(&mp)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	qvalues := envHead(t, "CartPole-v1")
	qvalues.Kind = head.QValuesKind
	for _, c := range []struct {
		name string
		data []byte
		h    Head
		want []string
	}{
		{"categorical policy for dqn", readFile(t, filepath.Join(foreign, "sb3_ppo_cartpole.onnx")), envHead(t, "CartPole-v1"), []string{"categorical", "--algo ppo", "--head qvalues"}},
		{"gaussian policy for sac", readFile(t, filepath.Join(foreign, "sb3_ppo_pendulum.onnx")), envHead(t, "Pendulum-v1"), []string{"gaussian", "--algo ppo"}},
		{"layer norm bound as Q-values", readFile(t, filepath.Join(foreign, "layernorm_opset17_cartpole.onnx")), qvalues, []string{"LayerNormalization", "--algo ppo"}},
		{"input not the observations", normalised(), envHead(t, "CartPole-v1"), []string{"Neg", "--algo ppo"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ImportDense(c.data, c.h)
			if !errors.Is(err, ErrFineTune) {
				t.Fatalf("ImportDense = %v, want an error wrapping ErrFineTune", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
		})
	}
}

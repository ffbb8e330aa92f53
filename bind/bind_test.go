package bind

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/bind/bindtest"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// load reads the policy file at path and binds it to env.
func load(t testing.TB, path, env string, cfg Config) (*Policy, error) {
	t.Helper()
	spec, err := envs.Lookup(env)
	if err != nil {
		t.Fatal(err)
	}
	return Load(context.Background(), path, spec, cfg)
}

// observed returns a Config whose session logger records into the returned logs.
func observed() (Config, *observer.ObservedLogs) {
	var cfg Config
	var logs *observer.ObservedLogs
	cfg.Session.Logger, logs = bindtest.Observed()
	return cfg, logs
}

// newTestAgent makes p's Runner for n envs, env i sampling from stream (seed, i).
func newTestAgent(t testing.TB, p *Policy, n int, seed uint64, deterministic bool) *Runner {
	t.Helper()
	rngs := make([]*rand.Rand, n)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	a, err := p.NewRunner(context.Background(), n, rngs, deterministic)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runAgent steps once on the rows of obs with a fresh Runner of p (zero recurrent state) and
// returns what it wrote.
func runAgent(t testing.TB, p *Policy, obs []float32, n int, deterministic bool) (acts, envActs, logp, value []float32) {
	t.Helper()
	a := newTestAgent(t, p, n, 1, deterministic)
	defer a.Close()
	ad := p.Spec().ActionDim()
	if p.Spec().Head == head.CategoricalKind {
		ad = 1
	}
	acts, envActs, logp, value = make([]float32, n*ad), make([]float32, n*ad), make([]float32, n), make([]float32, n)
	var state, next [][]float32
	for _, st := range p.States() {
		size := n
		for _, d := range st.Row {
			size *= d
		}
		state, next = append(state, make([]float32, size)), append(next, make([]float32, size))
	}
	if err := a.Step(n, obs, state, nil, acts, envActs, logp, value, next); err != nil {
		t.Fatal(err)
	}
	return acts, envActs, logp, value
}

func TestPolicyDoesNotFit(t *testing.T) {
	ctx := context.Background()
	model, _ := os.ReadFile("../testdata/mlp_tanh.onnx")
	gauss, _ := os.ReadFile("../testdata/gaussian_relu.onnx")
	pend, _ := envs.Lookup("Pendulum-v1")
	acro, _ := envs.Lookup("Acrobot-v1")
	cart, _ := envs.Lookup("CartPole-v1")
	for _, tc := range []struct {
		name  string
		model []byte
		env   envs.Spec
		cfg   Config
		want  []string
	}{
		{"obs shape", model, pend, Config{}, []string{"[4]", "[3]", "Pendulum-v1"}},
		{"action space", model, acro, Config{Spec: &head.Spec{Head: head.CategoricalKind, N: 2}}, []string{"[4]", "[6]"}},
		{"head vs env", gauss, cart, Config{}, []string{"[3]", "[4]"}},
		{"foreign head size", gauss, pend, Config{Spec: &head.Spec{Head: head.GaussianKind, Low: []float32{-2, -2}, High: []float32{2, 2}}},
			[]string{"box:2:-2:2", "box:1:-2:2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(ctx, tc.model, 0, tc.env, tc.cfg)
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("error %v, want ErrPolicy", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
	// The metadata says CartPole's discrete:2; Acrobot has 3 actions.
	_, err := New(ctx, model, 0, acro, Config{})
	if err == nil {
		t.Fatal("CartPole policy accepted for Acrobot")
	}
}

// TestUnrecognisedGraph: a graph whose outputs fit no head returns layout's error as it is,
// with the candidate tensors and their shapes and the flags to pass.
func TestUnrecognisedGraph(t *testing.T) {
	model := bindtest.Marshal(t, &onnxpb.GraphProto{
		Name:        proto.String("features"),
		Input:       []*onnxpb.ValueInfoProto{bindtest.ValueInfo("obs", "batch", 4)},
		Output:      []*onnxpb.ValueInfoProto{bindtest.ValueInfo("features", "batch", 3)},
		Node:        []*onnxpb.NodeProto{bindtest.Node("Gemm", []string{"obs", "w", "b"}, []string{"features"})},
		Initializer: []*onnxpb.TensorProto{bindtest.FloatTensor("w", []int64{4, 3}, make([]float32, 12)), bindtest.FloatTensor("b", []int64{3}, make([]float32, 3))},
	})
	path := filepath.Join(t.TempDir(), "features.onnx")
	if err := os.WriteFile(path, model, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := load(t, path, "CartPole-v1", Config{})
	var ue *layout.UnrecognisedError
	if !errors.As(err, &ue) {
		t.Fatalf("error %v, want a *layout.UnrecognisedError", err)
	}
	for _, want := range []string{ue.Error(), "features float32[?,3]", "--logits-output NAME", "--actions-output NAME", "--deterministic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestTanhGaussianConvention: SAC's squashed Gaussian, sampled. Actions hold the Gaussian draw
// u before tanh, LogP its Gaussian log-density without the tanh correction (recomputed here
// from the policy's mean and log_std), and EnvActions tanh(u) mapped onto Pendulum's [−2, 2].
func TestTanhGaussianConvention(t *testing.T) {
	for _, name := range []string{"sb3_sac_pendulum", "sb3_sac_pendulum_scaled"} {
		t.Run(name, func(t *testing.T) {
			p, err := load(t, filepath.Join(bindtest.ForeignDir, name+".onnx"), "Pendulum-v1", Config{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec().Head != head.TanhGaussianKind || p.Spec().Scale == head.ScaleNone {
				t.Fatalf("head %s scale %q", p.Spec().Head, p.Spec().Scale)
			}
			obs := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, name+".input.npy")).F32
			n := len(obs) / 3
			a := newTestAgent(t, p, n, 2, false)
			defer a.Close()
			u, env, logp, value := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			if err := a.Step(n, obs, nil, nil, u, env, logp, value, nil); err != nil {
				t.Fatal(err)
			}
			moved := 0
			for i := range n {
				mean, ls := float64(a.params.dst[i]), float64(a.logStdRow(i, 1)[0])
				z := (float64(u[i]) - mean) / math.Exp(ls)
				want := -0.5*z*z - ls - 0.5*math.Log(2*math.Pi)
				if math.Abs(float64(logp[i])-want) > 1e-4 {
					t.Errorf("row %d: logp %v, Gaussian log-density of u = %v is %v", i, logp[i], u[i], want)
				}
				if w := 2 * math.Tanh(float64(u[i])); math.Abs(float64(env[i])-w) > 1e-5 {
					t.Errorf("row %d: env action %v, want 2·tanh(%v) = %v", i, env[i], u[i], w)
				}
				if u[i] != float32(mean) {
					moved++
				}
			}
			if moved == 0 {
				t.Error("no draw moved from the mean: not sampled")
			}
		})
	}
}

// TestBindingLogged: what the policy was bound to (every note of the binding) and how its graph
// was rewritten reach the session's logger at info level.
func TestBindingLogged(t *testing.T) {
	cfg, logs := observed()
	p, err := load(t, filepath.Join(bindtest.ForeignDir, "sb3c_recurrentppo_cartpole.onnx"), "CartPoleNoVel-v1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	notes := p.Binding().Notes
	if len(notes) == 0 {
		t.Fatal("the binding has no notes")
	}
	for _, want := range append(notes, "made it dynamic", "batch rewrite:", "exposed inner tensors", "batch-first") {
		if !bindtest.Logged(logs, want) {
			t.Errorf("the log does not say %q", want)
		}
	}
	for _, e := range logs.All() {
		if e.Level < zap.InfoLevel {
			t.Errorf("logged below info: %s", e.Message)
		}
	}
}

// TestWithModelUntiedWeights: onnx/graph's write-back turns a weight an Identity node copies
// into an initializer of its own and drops the node; WithModel takes such a re-export into the
// edited graph (a fixed batch freed at load) and computes with the new weight.
func TestWithModelUntiedWeights(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	graph := func(untied []float32) []byte {
		g := &onnxpb.GraphProto{
			Name:   proto.String("tied"),
			Input:  []*onnxpb.ValueInfoProto{bindtest.ValueInfo("obs", 1, 4)},
			Output: []*onnxpb.ValueInfoProto{bindtest.ValueInfo("logits", 1, 2), bindtest.ValueInfo("value", 1, 1)},
			Node: []*onnxpb.NodeProto{
				bindtest.Node("Identity", []string{"w"}, []string{"w_copy"}),
				bindtest.Node("Gemm", []string{"obs", "w_copy", "b"}, []string{"logits"}), bindtest.Node("Gemm", []string{"obs", "wv", "bv"}, []string{"value"}),
			},
			Initializer: bindtest.LinearInits(),
		}
		if untied != nil {
			g.Node = g.Node[1:]
			g.Initializer = append(g.Initializer, bindtest.FloatTensor("w_copy", []int64{4, 2}, untied))
		}
		return bindtest.Marshal(t, g)
	}
	p, err := New(ctx, graph(nil), 0, spec, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.reweigh == nil {
		t.Fatal("the fixed batch was not freed")
	}
	negated := make([]float32, len(bindtest.CartPoleW))
	for i, w := range bindtest.CartPoleW {
		negated[i] = -w
	}
	rewritten := graph(negated)
	fresh, err := New(ctx, rewritten, 1, spec, Config{})
	if err != nil {
		t.Fatal(err)
	}
	obs := []float32{0, 0, 0.1, 0.5, 0, 0, -0.1, -0.5, 0.2, 1, 0.05, 0.3}
	old, _, _, _ := runAgent(t, p, obs, 3, true)
	got, _, gotLogp, _ := runAgent(t, p.WithModel(rewritten, 1), obs, 3, true)
	want, _, wantLogp, _ := runAgent(t, fresh, obs, 3, true)
	for i := range 3 {
		if got[i] != want[i] || gotLogp[i] != wantLogp[i] || got[i] == old[i] {
			t.Errorf("row %d: WithModel acts %v (logp %v), bound from scratch %v (%v), before %v", i, got[i], gotLogp[i], want[i], wantLogp[i], old[i])
		}
	}
}

// TestNamesAsRecognised: naming the tensors the recogniser binds by itself gives the same
// policy. SB3's documented export of a Gaussian PPO returns its deterministic actions, the
// mean, as output "53", so --logits-output 53 --actions-output 53 (what Binding.Names says)
// name one tensor for two roles; the mean must stay bound (not the log-probability output
// "51"). Checked on the fixture and on its batch freed by edit.DynamicBatch: the binding,
// and one step against PyTorch's outputs
// (the action is the mean "53", its log-density at the mean the log_prob "51").
func TestNamesAsRecognised(t *testing.T) {
	ctx := context.Background()
	const name = "sb3_ppo_pendulum"
	fixed, err := os.ReadFile(filepath.Join(bindtest.ForeignDir, name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	freed, _, err := edit.DynamicBatch(ctx, fixed, edit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := envs.Lookup("Pendulum-v1")
	obs := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, name+".input.npy")).F32
	mean := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, name+".53.npy")).F32
	logProb := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, name+".51.npy")).F32
	named := head.Names{Params: "53", LogStd: "policy.log_std", Value: "24", Actions: "53"}
	for _, tc := range []struct {
		name  string
		model []byte
	}{{"fixed batch", fixed}, {"edit.DynamicBatch", freed}} {
		t.Run(tc.name, func(t *testing.T) {
			bare, err := New(ctx, tc.model, 0, spec, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(named, bare.Binding().Names()); diff != "" {
				t.Fatalf("recognised names (-want +got):\n%s", diff)
			}
			p, err := New(ctx, tc.model, 0, spec, Config{Names: named})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(bare.outs, p.outs); diff != "" {
				t.Errorf("outputs bound with the names (-without +with):\n%s", diff)
			}
			if b := p.Binding(); b.Params != "53" || b.Actions != "53" || b.DeterministicOnly {
				t.Errorf("binding with the names: params %q actions %q deterministic only %v", b.Params, b.Actions, b.DeterministicOnly)
			}
			n := len(obs) / 3
			_, envActs, logp, _ := runAgent(t, p, obs, n, true)
			for i := range n {
				if want := min(max(mean[i], -2), 2); math.Abs(float64(envActs[i]-want)) > 1e-5 {
					t.Errorf("row %d: action %v, PyTorch's mean clipped to [-2, 2] is %v", i, envActs[i], want)
				}
				if math.Abs(float64(logp[i]-logProb[i])) > 1e-4 {
					t.Errorf("row %d: logp %v, PyTorch's log_prob %v", i, logp[i], logProb[i])
				}
			}
		})
	}
}

// TestBindOutputs: the session's outputs are bound to the binding's tensors and to nothing
// else. Outputs as SB3's documented Gaussian export has them (actions = mean "53", value
// "24", log_prob "51" of one value a row, the exposed log_std); a binding without a mean
// leaves the policy deterministic-only on its actions rather than taking the log-probability,
// which has the mean's size, for the mean.
func TestBindOutputs(t *testing.T) {
	f := func(name string, batched bool, row ...int64) onnx.TensorInfo {
		decl := row
		if batched {
			decl = append([]int64{-1}, row...)
		}
		return onnx.TensorInfo{Name: name, DType: onnx.Float32, Declared: decl, Batched: batched, Row: row}
	}
	const logStd = "policy.log_std" + layout.ExposedSuffix
	outs := []onnx.TensorInfo{f("53", true, 1), f("24", true, 1), f("51", true), f(logStd, false, 1)}
	spec := head.Spec{Head: head.GaussianKind, ObsShape: []int{3}, Low: []float32{-2}, High: []float32{2}}
	none := head.Outputs{Params: -1, LogStd: -1, Value: -1, Actions: -1}
	for _, tc := range []struct {
		name    string
		binding layout.Binding
		want    head.Outputs
		err     string
	}{
		{name: "all roles", binding: layout.Binding{Params: "53", LogStd: logStd, Value: "24", Actions: "53"},
			want: head.Outputs{Params: 0, LogStd: 3, Value: 1, Actions: 0}},
		{name: "no mean", binding: layout.Binding{LogStd: logStd, Value: "24", Actions: "53"},
			want: head.Outputs{Params: -1, LogStd: -1, Value: 1, Actions: 0, DeterministicOnly: true}},
		{name: "no log_std", binding: layout.Binding{Params: "53"},
			want: head.Outputs{Params: 0, LogStd: -1, Value: -1, Actions: -1, DeterministicOnly: true}},
		{name: "no value", binding: layout.Binding{Params: "53", LogStd: logStd},
			want: head.Outputs{Params: 0, LogStd: 3, Value: -1, Actions: -1}},
		{name: "log-probability named", binding: layout.Binding{Params: "51", LogStd: logStd},
			want: head.Outputs{Params: 2, LogStd: 3, Value: -1, Actions: -1}},
		{name: "missing output", binding: layout.Binding{Params: "53", Value: "value"}, want: none,
			err: `no output named "value" for the value; outputs are 53`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bindOutputs(spec, outs, tc.binding)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), logStd) {
					t.Fatalf("error %v, want one saying %q and listing every output", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("outputs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBindFixtures: head.Bind over the outputs ONNX Runtime reports for the PyTorch
// fixtures, converted by HeadTensors, finds their logits, mean, log_std and value; and every
// element type a session reads converts to package head's name for it.
func TestBindFixtures(t *testing.T) {
	ctx := context.Background()
	mlp, err := onnx.Open(ctx, "../testdata/mlp_tanh.onnx", onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer mlp.Close()
	spec, ok, err := head.FromMetadata(mlp.Metadata())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	mlpOuts := HeadTensors(mlp.Outputs())
	o, err := head.Bind(spec, mlpOuts, head.Names{})
	if err != nil || o != (head.Outputs{Params: 0, LogStd: -1, Value: 1, Actions: -1}) {
		t.Fatalf("mlp: %+v %v", o, err)
	}
	if got, want := mlpOuts[0].String(), mlp.Outputs()[0].String(); got != want {
		t.Errorf("head.Tensor prints %q, onnx.TensorInfo %q", got, want)
	}
	g, err := onnx.Open(ctx, "../testdata/gaussian_relu.onnx", onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	pend := head.Spec{Head: head.GaussianKind, Low: []float32{-2}, High: []float32{2}}
	if o, err = head.Bind(pend, HeadTensors(g.Outputs()), head.Names{}); err != nil || o != (head.Outputs{Params: 0, LogStd: 1, Value: -1, Actions: -1}) {
		t.Fatalf("gaussian: %+v %v", o, err)
	}
	if _, err := head.Bind(head.Spec{Head: head.CategoricalKind, N: 3}, mlpOuts, head.Names{}); err == nil || !strings.Contains(err.Error(), `"logits"`) {
		t.Errorf("3 actions on a 2-logit model: %v", err)
	}
	if _, err := head.Bind(spec, mlpOuts, head.Names{Value: "critic"}); err == nil || !strings.Contains(err.Error(), `"critic"`) {
		t.Errorf("unknown name: %v", err)
	}
	for dt, want := range map[onnx.DType]head.DType{onnx.Float32: head.Float32, onnx.Float64: head.Float64,
		onnx.Int32: head.Int32, onnx.Int64: head.Int64, onnx.Uint8: head.Uint8} {
		if got := HeadTensor(onnx.TensorInfo{DType: dt}).DType; got != want {
			t.Errorf("onnx %v converts to head %q, want %q", dt, got, want)
		}
	}
}

// TestWithModelNewWeights hot-swaps a re-export of SB3's documented export (fixed batch,
// logits inside the graph) with the action head's weights negated: WithModel applies the batch
// rewrite and the exposed logits to the new bytes without re-recognising, so the actions flip
// and equal those of a policy bound from the new bytes from scratch, and the binding stays.
func TestWithModelNewWeights(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	model, err := os.ReadFile(filepath.Join(bindtest.ForeignDir, "sb3_ppo_cartpole.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, model, 1, spec, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.reweigh == nil {
		t.Fatal("the fixed-batch export was used unedited")
	}
	flipped := bindtest.NegateInitializers(t, model, "policy.action_net.weight", "policy.action_net.bias")
	q := p.WithModel(flipped, 2)
	if q.Version() != 2 || p.Version() != 1 {
		t.Fatalf("versions %d, %d", p.Version(), q.Version())
	}
	if d := cmp.Diff(p.Binding(), q.Binding()); d != "" {
		t.Errorf("binding changed (-old +new):\n%s", d)
	}
	fresh, err := New(ctx, flipped, 2, spec, Config{})
	if err != nil {
		t.Fatal(err)
	}
	obs := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, "sb3_ppo_cartpole.input.npy")).F32
	n := len(obs) / 4
	old, _, _, _ := runAgent(t, p, obs, n, true)
	acts, _, logp, value := runAgent(t, q, obs, n, true)
	want, _, wantLogp, wantValue := runAgent(t, fresh, obs, n, true)
	flips := 0
	for i := range n {
		if acts[i] != old[i] {
			flips++
		}
		if acts[i] != want[i] || logp[i] != wantLogp[i] || value[i] != wantValue[i] {
			t.Errorf("row %d: WithModel acts %v logp %v value %v; bound from scratch %v %v %v", i, acts[i], logp[i], value[i], want[i], wantLogp[i], wantValue[i])
		}
	}
	if flips < n/2 {
		t.Errorf("negating the action head flipped %d of %d actions", flips, n)
	}
	// A re-export of another graph is refused when Runners are made from it.
	broken := bindtest.NegateInitializers(t, model, "policy.action_net.bias")
	m := bindtest.Parse(t, broken)
	m.Graph.Initializer = m.Graph.Initializer[1:]
	broken, _ = proto.Marshal(m)
	if _, err := p.WithModel(broken, 3).NewRunner(ctx, 4, nil, true); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "initializer") {
		t.Errorf("a Runner of a model missing a weight: %v", err)
	}
}

// TestBareMeanSaysWhatIsAssumed: a Box policy whose only action output is a mean (SB3's old
// PPO recipe; SB3 1.x SAC exports the same shape with its mean before tanh) is still bound and
// run, and the log says it is taken as a Gaussian mean clipped to the bounds and names
// --head tanh-gaussian; policies with a log_std or a tanh in the graph get no such note.
func TestBareMeanSaysWhatIsAssumed(t *testing.T) {
	for _, tc := range []struct {
		name string
		note bool
	}{{"sb3_ppo_pendulum_old", true}, {"sb3_ppo_pendulum", false}, {"sb3_sac_pendulum", false}, {"cleanrl_pendulum", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, logs := observed()
			p, err := load(t, filepath.Join(bindtest.ForeignDir, tc.name+".onnx"), "Pendulum-v1", cfg)
			if err != nil {
				t.Fatal(err)
			}
			said := bindtest.Logged(logs, "taken as a Gaussian mean clipped to the bounds [-2] to [2]") &&
				bindtest.Logged(logs, "--head tanh-gaussian")
			if said != tc.note {
				t.Fatalf("note logged %v, want %v; log %v", said, tc.note, logs.All())
			}
			if tc.note {
				obs := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, tc.name+".input.npy")).F32
				_, env, logp, _ := runAgent(t, p, obs, len(obs)/3, true)
				for i := range env {
					if env[i] < -2 || env[i] > 2 || logp[i] != 0 {
						t.Fatalf("row %d: action %v logp %v, want a mean clipped to [-2, 2] and 0", i, env[i], logp[i])
					}
				}
			}
		})
	}
}

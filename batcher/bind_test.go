package batcher

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
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// dim is a graph input or output dimension: an int64 size or a string symbol.
type dim any

func valueInfo(name string, dims ...dim) *onnxpb.ValueInfoProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case string:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		case int:
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		}
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: sh}}}}
}

func floatTensor(name string, dims []int64, vals []float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: vals}
}

func node(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Input: ins, Output: outs, Name: proto.String(outs[0]), Attribute: attrs}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func marshalModel(t testing.TB, g *onnxpb.GraphProto) []byte {
	t.Helper()
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(13)}}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cartPoleWeights are a linear CartPole policy that balances: push the way the pole falls.
var (
	cartPoleW  = []float32{0, 0, 0, 0, -10, 10, -1, 1} // [4, 2]: logits from the angle and its velocity
	cartPoleB  = []float32{0, 0}
	cartPoleWv = []float32{1, 2, 3, 4}
	cartPoleBv = []float32{0.5}
)

func linearInits() []*onnxpb.TensorProto {
	return []*onnxpb.TensorProto{
		floatTensor("w", []int64{4, 2}, cartPoleW), floatTensor("b", []int64{2}, cartPoleB),
		floatTensor("wv", []int64{4, 1}, cartPoleWv), floatTensor("bv", []int64{1}, cartPoleBv),
	}
}

// linearPolicy is the linear CartPole policy with a dynamic batch.
func linearPolicy(t testing.TB) []byte {
	return marshalModel(t, &onnxpb.GraphProto{
		Name:        proto.String("linear"),
		Input:       []*onnxpb.ValueInfoProto{valueInfo("obs", "batch", 4)},
		Output:      []*onnxpb.ValueInfoProto{valueInfo("logits", "batch", 2), valueInfo("value", "batch", 1)},
		Node:        []*onnxpb.NodeProto{node("Gemm", []string{"obs", "w", "b"}, []string{"logits"}), node("Gemm", []string{"obs", "wv", "bv"}, []string{"value"})},
		Initializer: linearInits(),
	})
}

// foldedPolicy is the same policy with its batch fixed at 1 and folded into the features by
// Flatten(axis=0), which no rewrite can free: it runs one row per call.
func foldedPolicy(t testing.TB) []byte {
	return marshalModel(t, &onnxpb.GraphProto{
		Name:   proto.String("folded"),
		Input:  []*onnxpb.ValueInfoProto{valueInfo("obs", 1, 4)},
		Output: []*onnxpb.ValueInfoProto{valueInfo("logits", 1, 2), valueInfo("value", 1, 1)},
		Node: []*onnxpb.NodeProto{
			node("Flatten", []string{"obs"}, []string{"flat"}, intAttr("axis", 0)),
			node("Gemm", []string{"flat", "w", "b"}, []string{"logits"}), node("Gemm", []string{"flat", "wv", "bv"}, []string{"value"}),
		},
		Initializer: linearInits(),
	})
}

// observed returns a PolicyConfig whose session logger records into the returned logs.
func observed() (PolicyConfig, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	var cfg PolicyConfig
	cfg.Session.Logger = zap.New(core)
	return cfg, logs
}

func logged(logs *observer.ObservedLogs, text string) bool {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, text) {
			return true
		}
		for _, f := range e.Context {
			if strings.Contains(f.String, text) {
				return true
			}
		}
	}
	return false
}

// TestFixedBatchFallback: a fixed batch that cannot be freed is said in the log, and the
// workers run it one row per call with the same results as the dynamic-batch equivalent.
func TestFixedBatchFallback(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	cfg, logs := observed()
	folded, err := NewPolicy(ctx, foldedPolicy(t), 0, spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if folded.FixedBatch() != 1 {
		t.Fatalf("FixedBatch() = %d, want 1", folded.FixedBatch())
	}
	if !logged(logs, "one fixed batch per call") {
		t.Errorf("the fallback was not logged: %v", logs.All())
	}
	linear, err := NewPolicy(ctx, linearPolicy(t), 0, spec, PolicyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if linear.FixedBatch() != 0 {
		t.Fatalf("dynamic policy: FixedBatch() = %d", linear.FixedBatch())
	}
	collect := func(p *Policy) *Rollout {
		b := newBatcher(t, Config{Env: "CartPole-v1", EnvsPerWorker: 5, Steps: 40, Seed: 3}, p)
		r, err := b.Collect(ctx, 40)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := collect(folded), collect(linear)
	for k := range a.Actions {
		if a.Actions[k] != b.Actions[k] || math.Abs(float64(a.LogP[k]-b.LogP[k])) > 1e-5 || math.Abs(float64(a.Values[k]-b.Values[k])) > 1e-4 {
			t.Fatalf("row %d: one row per call acts %v logp %v value %v, all rows at once %v %v %v",
				k, a.Actions[k], a.LogP[k], a.Values[k], b.Actions[k], b.LogP[k], b.Values[k])
		}
	}
	for k := range a.LastValues {
		if math.Abs(float64(a.LastValues[k]-b.LastValues[k])) > 1e-4 {
			t.Fatalf("env %d: last value %v, all rows at once %v", k, a.LastValues[k], b.LastValues[k])
		}
	}
}

// TestUnrecognisedGraph: a graph whose outputs fit no head returns layout's error as it is,
// with the candidate tensors and their shapes and the flags to pass.
func TestUnrecognisedGraph(t *testing.T) {
	model := marshalModel(t, &onnxpb.GraphProto{
		Name:        proto.String("features"),
		Input:       []*onnxpb.ValueInfoProto{valueInfo("obs", "batch", 4)},
		Output:      []*onnxpb.ValueInfoProto{valueInfo("features", "batch", 3)},
		Node:        []*onnxpb.NodeProto{node("Gemm", []string{"obs", "w", "b"}, []string{"features"})},
		Initializer: []*onnxpb.TensorProto{floatTensor("w", []int64{4, 3}, make([]float32, 12)), floatTensor("b", []int64{3}, make([]float32, 3))},
	})
	path := filepath.Join(t.TempDir(), "features.onnx")
	if err := os.WriteFile(path, model, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadPolicy(context.Background(), path, "CartPole-v1", PolicyConfig{})
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

// runAgent acts once on the rows of obs with a fresh agent of p (zero recurrent state) and
// returns what it wrote.
func runAgent(t testing.TB, p *Policy, obs []float32, n int, deterministic bool) (acts, envActs, logp, value []float32) {
	t.Helper()
	a := newTestAgent(t, p, n, 1, deterministic)
	defer a.Close()
	ad := p.spec.ActionDim()
	if p.spec.Head == head.CategoricalKind {
		ad = 1
	}
	in, out := agentIO(t, a, obs, n, ad)
	if err := a.Act(in, out); err != nil {
		t.Fatal(err)
	}
	acts, _ = out.Actions.Host()
	envActs, _ = out.EnvActions.Host()
	logp, _ = out.LogP.Host()
	value, _ = out.Value.Host()
	return acts, envActs, logp, value
}

// newTestAgent makes p's agent for n envs, env i sampling from stream (seed, i).
func newTestAgent(t testing.TB, p *Policy, n int, seed uint64, deterministic bool) *onnxAgent {
	t.Helper()
	rngs := make([]*rand.Rand, n)
	for i := range rngs {
		rngs[i], _ = samplingStream(seed, i)
	}
	a, err := p.agent(context.Background(), n, rngs, deterministic)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// agentIO makes the input and output of one step of a over n rows of obs.
func agentIO(t testing.TB, a Agent, obs []float32, n, actDim int) (AgentInput, AgentOutput) {
	t.Helper()
	mk := func(name string, size int, shape ...int) *device.Tensor {
		x, err := device.CPU().Mirror(name, make([]float32, size), shape...)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	o, err := device.CPU().Mirror("obs", obs, n, len(obs)/n)
	if err != nil {
		t.Fatal(err)
	}
	in := AgentInput{N: n, Obs: o}
	out := AgentOutput{Actions: mk("a", n*actDim, n, actDim), EnvActions: mk("e", n*actDim, n, actDim), LogP: mk("l", n, n), Value: mk("v", n, n)}
	if in.State, err = a.Initial(n); err != nil {
		t.Fatal(err)
	}
	if out.State, err = a.Initial(n); err != nil {
		t.Fatal(err)
	}
	return in, out
}

func readNpy(t testing.TB, path string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// negateInitializers returns model with the named initializers' values negated.
func negateInitializers(t testing.TB, model []byte, names ...string) []byte {
	t.Helper()
	m, err := parseModel(model)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, init := range m.GetGraph().GetInitializer() {
		for _, name := range names {
			if init.GetName() != name {
				continue
			}
			vals, err := floatValues(init)
			if err != nil {
				t.Fatal(err)
			}
			for i := range vals {
				vals[i] = -vals[i]
			}
			init.RawData, init.FloatData = nil, vals
			done++
		}
	}
	if done != len(names) {
		t.Fatalf("negated %d of the initializers %v", done, names)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// floatValues decodes a float32 initializer.
func floatValues(init *onnxpb.TensorProto) ([]float32, error) {
	if raw := init.GetRawData(); len(raw) > 0 {
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
		}
		return out, nil
	}
	if init.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
		return nil, errors.New("not float32")
	}
	return append([]float32(nil), init.GetFloatData()...), nil
}

// TestWithModelNewWeights hot-swaps a re-export of SB3's documented export (fixed batch,
// logits inside the graph) with the action head's weights negated: WithModel applies the batch
// rewrite and the exposed logits to the new bytes without re-recognising, so the actions flip
// and equal those of a policy bound from the new bytes from scratch, and the binding stays.
func TestWithModelNewWeights(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	model, err := os.ReadFile(filepath.Join(foreignDir, "sb3_ppo_cartpole.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(ctx, model, 1, spec, PolicyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if p.reweigh == nil {
		t.Fatal("the fixed-batch export was used unedited")
	}
	flipped := negateInitializers(t, model, "policy.action_net.weight", "policy.action_net.bias")
	q := p.WithModel(flipped, 2)
	if q.Version() != 2 || p.Version() != 1 {
		t.Fatalf("versions %d, %d", p.Version(), q.Version())
	}
	if d := cmp.Diff(p.Binding(), q.Binding()); d != "" {
		t.Errorf("binding changed (-old +new):\n%s", d)
	}
	fresh, err := NewPolicy(ctx, flipped, 2, spec, PolicyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	obs := readNpy(t, filepath.Join(foreignDir, "sb3_ppo_cartpole.input.npy")).F32
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
	// A re-export of another graph is refused when agents are made from it.
	broken := negateInitializers(t, model, "policy.action_net.bias")
	m, _ := parseModel(broken)
	m.Graph.Initializer = m.Graph.Initializer[1:]
	broken, _ = proto.Marshal(m)
	b := newBatcher(t, Config{Env: "CartPole-v1", EnvsPerWorker: 4, Steps: 4, Deterministic: true}, p)
	if err := b.UpdatePolicy(ctx, p.WithModel(broken, 3)); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "initializer") {
		t.Errorf("UpdatePolicy with a model missing a weight: %v", err)
	}
	if err := b.UpdatePolicy(ctx, q); err != nil {
		t.Fatal(err)
	}
	r, err := b.Collect(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version[0] != 2 {
		t.Errorf("version %d collected after the swap", r.Version[0])
	}
}

// TestDeterministicOnlyNeedsDeterministic: the old SB3 recipe of a Gaussian policy exports the
// mean without its log_std; it runs deterministically, and asking it to sample is an error
// naming --deterministic.
func TestDeterministicOnlyNeedsDeterministic(t *testing.T) {
	p, err := LoadPolicy(context.Background(), filepath.Join(foreignDir, "sb3_ppo_pendulum_old.onnx"), "Pendulum-v1", PolicyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{Env: "Pendulum-v1", EnvsPerWorker: 2, Steps: 2}, p)
	if !errors.Is(err, head.ErrDeterministicOnly) || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "--deterministic") {
		t.Fatalf("sampling a deterministic-only policy: %v", err)
	}
	b := newBatcher(t, Config{Env: "Pendulum-v1", EnvsPerWorker: 2, Steps: 2, Deterministic: true}, p)
	r, err := b.Collect(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, lp := range r.LogP {
		if lp != 0 || r.EnvActions[i] < -2 || r.EnvActions[i] > 2 {
			t.Fatalf("row %d: logp %v env action %v", i, lp, r.EnvActions[i])
		}
	}
}

// TestTanhGaussianConvention: SAC's squashed Gaussian, sampled. Actions hold the Gaussian draw
// u before tanh, LogP its Gaussian log-density without the tanh correction (recomputed here
// from the policy's mean and log_std), and EnvActions tanh(u) mapped onto Pendulum's [−2, 2].
func TestTanhGaussianConvention(t *testing.T) {
	for _, name := range []string{"sb3_sac_pendulum", "sb3_sac_pendulum_scaled"} {
		t.Run(name, func(t *testing.T) {
			p, err := LoadPolicy(context.Background(), filepath.Join(foreignDir, name+".onnx"), "Pendulum-v1", PolicyConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec().Head != head.TanhGaussianKind || p.Spec().Scale == head.ScaleNone {
				t.Fatalf("head %s scale %q", p.Spec().Head, p.Spec().Scale)
			}
			obs := readNpy(t, filepath.Join(foreignDir, name+".input.npy")).F32
			n := len(obs) / 3
			a := newTestAgent(t, p, n, 2, false)
			defer a.Close()
			in, out := agentIO(t, a, obs, n, 1)
			if err := a.Act(in, out); err != nil {
				t.Fatal(err)
			}
			u, _ := out.Actions.Host()
			env, _ := out.EnvActions.Host()
			logp, _ := out.LogP.Host()
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

// TestRecurrentCollectAllocatesNothing: carrying recurrent states (swapped buffers, zeroed rows,
// episode starts fed) allocates nothing per rollout, nor does a batch freed at load.
func TestRecurrentCollectAllocatesNothing(t *testing.T) {
	for _, name := range []string{"sb3c_recurrentppo_cartpole", "rllib_cartpole_lstm"} {
		t.Run(name, func(t *testing.T) {
			p := loadPolicy(t, filepath.Join(foreignDir, name+".onnx"), "CartPoleNoVel-v1", PolicyConfig{})
			b := newBatcher(t, Config{Env: "CartPoleNoVel-v1", EnvsPerWorker: 8, Steps: 16, MaxEpisodeSteps: 20}, p)
			ctx := context.Background()
			for range 20 {
				if _, err := b.Collect(ctx, 16); err != nil {
					t.Fatal(err)
				}
			}
			if n := testing.AllocsPerRun(5, func() {
				if _, err := b.Collect(ctx, 16); err != nil {
					t.Fatal(err)
				}
			}); n > 0 {
				t.Errorf("%v allocations per Collect", n)
			}
		})
	}
}

// TestBindingLogged: what the policy was bound to (every note of the binding) and how its graph
// was rewritten reach the session's logger at info level.
func TestBindingLogged(t *testing.T) {
	cfg, logs := observed()
	p, err := LoadPolicy(context.Background(), filepath.Join(foreignDir, "sb3c_recurrentppo_cartpole.onnx"), "CartPoleNoVel-v1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	notes := p.Binding().Notes
	if len(notes) == 0 {
		t.Fatal("the binding has no notes")
	}
	for _, want := range append(notes, "made it dynamic", "batch rewrite:", "exposed inner tensors", "batch-first") {
		if !logged(logs, want) {
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
			Input:  []*onnxpb.ValueInfoProto{valueInfo("obs", 1, 4)},
			Output: []*onnxpb.ValueInfoProto{valueInfo("logits", 1, 2), valueInfo("value", 1, 1)},
			Node: []*onnxpb.NodeProto{
				node("Identity", []string{"w"}, []string{"w_copy"}),
				node("Gemm", []string{"obs", "w_copy", "b"}, []string{"logits"}), node("Gemm", []string{"obs", "wv", "bv"}, []string{"value"}),
			},
			Initializer: linearInits(),
		}
		if untied != nil {
			g.Node = g.Node[1:]
			g.Initializer = append(g.Initializer, floatTensor("w_copy", []int64{4, 2}, untied))
		}
		return marshalModel(t, g)
	}
	p, err := NewPolicy(ctx, graph(nil), 0, spec, PolicyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if p.reweigh == nil {
		t.Fatal("the fixed batch was not freed")
	}
	negated := make([]float32, len(cartPoleW))
	for i, w := range cartPoleW {
		negated[i] = -w
	}
	rewritten := graph(negated)
	fresh, err := NewPolicy(ctx, rewritten, 1, spec, PolicyConfig{})
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
// every episode's return deterministic and sampled, and one step against PyTorch's outputs
// (the action is the mean "53", its log-density at the mean the log_prob "51").
func TestNamesAsRecognised(t *testing.T) {
	ctx := context.Background()
	const name = "sb3_ppo_pendulum"
	fixed, err := os.ReadFile(filepath.Join(foreignDir, name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	freed, _, err := edit.DynamicBatch(ctx, fixed, edit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := envs.Lookup("Pendulum-v1")
	obs := readNpy(t, filepath.Join(foreignDir, name+".input.npy")).F32
	mean := readNpy(t, filepath.Join(foreignDir, name+".53.npy")).F32
	logProb := readNpy(t, filepath.Join(foreignDir, name+".51.npy")).F32
	named := head.Names{Params: "53", LogStd: "policy.log_std", Value: "24", Actions: "53"}
	for _, tc := range []struct {
		name  string
		model []byte
	}{{"fixed batch", fixed}, {"edit.DynamicBatch", freed}} {
		t.Run(tc.name, func(t *testing.T) {
			bare, err := NewPolicy(ctx, tc.model, 0, spec, PolicyConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(named, bare.Binding().Names()); diff != "" {
				t.Fatalf("recognised names (-want +got):\n%s", diff)
			}
			p, err := NewPolicy(ctx, tc.model, 0, spec, PolicyConfig{Names: named})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(bare.outs, p.outs); diff != "" {
				t.Errorf("outputs bound with the names (-without +with):\n%s", diff)
			}
			if b := p.Binding(); b.Params != "53" || b.Actions != "53" || b.DeterministicOnly {
				t.Errorf("binding with the names: params %q actions %q deterministic only %v", b.Params, b.Actions, b.DeterministicOnly)
			}
			for _, det := range []bool{true, false} {
				cfg := EvalConfig{Env: "Pendulum-v1", Episodes: 4, Envs: 2, Seed: 7, Deterministic: det}
				want, err := Evaluate(ctx, cfg, bare)
				if err != nil {
					t.Fatal(err)
				}
				got, err := Evaluate(ctx, cfg, p)
				if err != nil {
					t.Fatalf("deterministic %v: %v", det, err)
				}
				if diff := cmp.Diff(want.Returns, got.Returns); diff != "" {
					t.Errorf("deterministic %v: returns (-without names +with):\n%s", det, diff)
				}
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

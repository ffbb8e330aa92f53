package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// trainer is what the tests publish from, as the engine does: a model, the layout of its
// weights in one flat vector, that vector, and the export of the vector (the model today's
// hot swap builds sessions from). The weights are onnx/graph's parameters, in its order: the
// float initializers of rank ≥ 1 as the graph lists them, then each Identity over one,
// untied, in node order. The export is the model with the vector's values as initializers,
// each untied Identity replaced by an initializer of its name (onnx/graph's WriteBack).
type trainer struct {
	model  []byte
	layout []bind.Param
	flat   []float32
	export func(t testing.TB) []byte
}

func newTrainer(t testing.TB, path string) *trainer {
	t.Helper()
	model, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := bindtest.Parse(t, model)
	type weight struct {
		name string
		dims []int64
		vals []float32
	}
	var ws []weight
	byName := map[string]int{}
	for _, init := range m.GetGraph().GetInitializer() {
		if init.GetDataType() == int32(onnxpb.TensorProto_FLOAT) && len(init.GetDims()) > 0 {
			vals, err := bindtest.FloatValues(init)
			if err != nil {
				t.Fatal(err)
			}
			byName[init.GetName()] = len(ws)
			ws = append(ws, weight{init.GetName(), init.GetDims(), vals})
		}
	}
	untied := map[string]bool{}
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() != "Identity" || len(n.GetInput()) != 1 {
			continue
		}
		if k, ok := byName[n.GetInput()[0]]; ok {
			untied[n.GetOutput()[0]] = true
			ws = append(ws, weight{n.GetOutput()[0], ws[k].dims, ws[k].vals})
		}
	}
	tr := &trainer{model: model}
	var names []string
	var sizes []int
	for _, w := range ws {
		names, sizes = append(names, w.name), append(sizes, len(w.vals))
		tr.flat = append(tr.flat, w.vals...)
	}
	tr.layout = bind.ContiguousParams(names, sizes)
	tr.export = func(t testing.TB) []byte {
		out := proto.Clone(m).(*onnxpb.ModelProto)
		g := out.GetGraph()
		g.Node = slices.DeleteFunc(g.Node, func(n *onnxpb.NodeProto) bool { return untied[n.GetOutput()[0]] })
		for i, w := range ws {
			p := tr.layout[i]
			init := bindtest.FloatTensor(w.name, w.dims, tr.flat[p.Offset:p.Offset+p.Len])
			if k := slices.IndexFunc(g.Initializer, func(x *onnxpb.TensorProto) bool { return x.GetName() == w.name }); k >= 0 {
				g.Initializer[k] = init
			} else {
				g.Initializer = append(g.Initializer, init)
			}
		}
		data, err := proto.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	return tr
}

// perturb moves every weight by up to ±scale, as an optimiser step would.
func (tr *trainer) perturb(rng *rand.Rand, scale float32) {
	for i := range tr.flat {
		tr.flat[i] += scale * (2*rng.Float32() - 1)
	}
}

// compareOutputs runs the agents a (published in place) and ref (a fresh session of the
// export) on the same rows and compares every output of a with ref's output of that name.
func compareOutputs(t *testing.T, a, ref *onnxAgent, obs []float32, state [][]float32, starts []float32, n int) {
	t.Helper()
	for _, ag := range []*onnxAgent{a, ref} {
		if err := ag.r.Run(n, obs, state, starts); err != nil {
			t.Fatal(err)
		}
	}
	refOuts := ref.r.Outputs()
	for i, info := range a.r.Outputs() {
		j := slices.IndexFunc(refOuts, func(o onnx.TensorInfo) bool { return o.Name == info.Name })
		if j < 0 || info.DType != onnx.Float32 {
			continue
		}
		got, _ := a.r.Output(i)
		want, _ := ref.r.Output(j)
		rows := 1
		if info.Batched {
			rows = n
		}
		worst := 0.0
		for k := range rows * info.RowSize() {
			worst = math.Max(worst, math.Abs(float64(got[k]-want[k])))
		}
		if worst > 1e-6 {
			t.Errorf("output %q: max difference %g from a fresh session of the exported model", info.Name, worst)
		}
	}
}

// TestPublishMatchesExport publishes perturbed weights to a batcher mid-run and checks, for a
// torch-exported MLP (tied biases untied), CleanRL's MLP, a towerrl model, RLlib's LSTM and
// SB3's SAC (tanh-gaussian, fixed batch freed at load): every row of the next rollout carries
// the new version; its values and log-probabilities are those a fresh session of the model
// exported with the same weights computes on the rollout's observations (and recorded
// recurrent states); every output of a worker's session equals that session's to 1e-6; and
// recurrent states carry over the swap.
func TestPublishMatchesExport(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, env, path string }{
		{"mlp_tanh", "CartPole-v1", "../testdata/mlp_tanh.onnx"},
		{"cleanrl_cartpole", "CartPole-v1", filepath.Join(bindtest.ForeignDir, "cleanrl_cartpole.onnx")},
		{"cleanrl_pendulum", "Pendulum-v1", filepath.Join(bindtest.ForeignDir, "cleanrl_pendulum.onnx")},
		{"rllib_cartpole_lstm", "CartPole-v1", filepath.Join(bindtest.ForeignDir, "rllib_cartpole_lstm.onnx")},
		{"sb3_sac_pendulum", "Pendulum-v1", filepath.Join(bindtest.ForeignDir, "sb3_sac_pendulum.onnx")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTrainer(t, tc.path)
			spec, _ := envs.Lookup(tc.env)
			p, err := bind.New(ctx, tr.model, 0, spec, bind.Config{Publish: tr.layout})
			if err != nil {
				t.Fatal(err)
			}
			const workers, m, steps = 2, 8, 20
			b := newBatcher(t, Config{Env: envSpec(tc.env), Workers: workers, EnvsPerWorker: m, Steps: steps, Seed: 5}, p)
			r1, err := b.Collect(ctx, steps)
			if err != nil {
				t.Fatal(err)
			}
			n := r1.N
			// The state each env carries into the next rollout, by the old weights (zero where
			// the episode ended at the last step).
			var carried [][]float32
			if p.Recurrent() {
				old := newTestAgent(t, p.WithModel(tr.model, 0), n, 0, true)
				defer old.Close()
				last := steps - 1
				if err := old.r.Run(n, r1.Obs[last*n*r1.ObsDim:(last+1)*n*r1.ObsDim], stepStates(r1, last), r1.EpisodeStarts[last*n:(last+1)*n]); err != nil {
					t.Fatal(err)
				}
				for k := range old.states {
					size := old.size[k]
					c := slices.Clone(old.r.NextState(k)[:n*size])
					for i := range n {
						if r1.Terminated[last*n+i] != 0 || r1.Truncated[last*n+i] != 0 {
							clear(c[i*size : (i+1)*size])
						}
					}
					carried = append(carried, c)
				}
			}

			tr.perturb(rand.New(rand.NewPCG(7, 8)), 0.05)
			const version = 7
			if err := b.Publish(ctx, version, tr.flat); err != nil {
				t.Fatal(err)
			}
			r, err := b.Collect(ctx, steps)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range r.Version[:steps*n] {
				if v != version {
					t.Fatalf("row %d carries version %d, want %d", i, v, version)
				}
			}
			for k, c := range carried {
				if d := maxAbsDiff(r.States[k][:len(c)], c); d > 1e-6 {
					t.Errorf("state %d fed at the first step after the publish differs by %g from the one the old weights left", k, d)
				}
			}

			fresh, err := bind.New(ctx, tr.export(t), version, spec, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ref := newTestAgent(t, fresh, n, 0, true)
			defer ref.Close()
			od := r.ObsDim
			for step := range steps {
				checkRows(t, fresh, runRef(t, ref, r, step), r, step)
			}
			// Every output of each worker's session, on the last step's rows of its envs.
			last := steps - 1
			for w, wk := range b.workers {
				a := wk.agent.(*onnxAgent)
				rows := func(x []float32, size int) []float32 { return x[(last*n+w*m)*size : (last*n+w*m+m)*size] }
				var st [][]float32
				for k, s := range r.States {
					st = append(st, rows(s, a.size[k]))
				}
				one := newTestAgent(t, fresh, m, 0, true)
				compareOutputs(t, a, one, rows(r.Obs, od), st, rows(r.EpisodeStarts, 1), m)
				one.Close()
			}

			// Today's path still works on a published policy, and its agents take later
			// publishes: WithModel starts them from the export's weights.
			if err := b.UpdatePolicy(ctx, p.WithModel(tr.export(t), 8)); err != nil {
				t.Fatal(err)
			}
			if r, err = b.Collect(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if r.Version[0] != 8 {
				t.Fatalf("after UpdatePolicy: version %d, want 8", r.Version[0])
			}
			checkRows(t, fresh, runRef(t, ref, r, 0), r, 0)
			tr.perturb(rand.New(rand.NewPCG(9, 10)), 0.05)
			if err := b.Publish(ctx, 9, tr.flat); err != nil {
				t.Fatal(err)
			}
			if r, err = b.Collect(ctx, 1); err != nil {
				t.Fatal(err)
			}
			fresh9, err := bind.New(ctx, tr.export(t), 9, spec, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ref9 := newTestAgent(t, fresh9, n, 0, true)
			defer ref9.Close()
			if r.Version[0] != 9 {
				t.Fatalf("after UpdatePolicy and Publish: version %d, want 9", r.Version[0])
			}
			checkRows(t, fresh9, runRef(t, ref9, r, 0), r, 0)
		})
	}
}

// stepStates returns the recurrent states fed at step t of r, every env's (nil for none).
func stepStates(r *Rollout, t int) [][]float32 {
	var out [][]float32
	for _, s := range r.States {
		size := len(s) / len(r.Version) // both hold Config.Steps × N rows
		out = append(out, s[t*r.N*size:(t+1)*r.N*size])
	}
	return out
}

// runRef runs ref on the rows of step t of r: observations, recurrent states and episode
// starts as the batcher fed them. It returns ref.
func runRef(t *testing.T, ref *onnxAgent, r *Rollout, step int) *onnxAgent {
	t.Helper()
	n, od := r.N, r.ObsDim
	if err := ref.r.Run(n, r.Obs[step*n*od:(step+1)*n*od], stepStates(r, step), r.EpisodeStarts[step*n:(step+1)*n]); err != nil {
		t.Fatal(err)
	}
	return ref
}

// checkRows compares step t of r with what the reference agent computed on its rows: values,
// and the log-probability of the rollout's actions under the reference's distribution.
func checkRows(t *testing.T, p *bind.Policy, ref *onnxAgent, r *Rollout, step int) {
	t.Helper()
	n, ad := r.N, r.ActDim
	for i := range n {
		row := step*n + i
		if p.HasValue() {
			if d := math.Abs(float64(r.Values[row] - ref.r.Value(i))); d > 1e-6 {
				t.Fatalf("step %d env %d: value %v, the export's %v", step, i, r.Values[row], ref.r.Value(i))
			}
		}
		want := ref.r.LogProb(i, r.Actions[row*ad:(row+1)*ad])
		if d := math.Abs(float64(r.LogP[row]) - want); d > 1e-5*math.Max(1, math.Abs(want)) {
			t.Fatalf("step %d env %d: log-probability %v, %v under the export", step, i, r.LogP[row], want)
		}
	}
}

func maxAbsDiff(a, b []float32) float64 {
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
	}
	return worst
}

// constLayout lays out constPolicy's weights: the logits' weights and bias, the value's.
var constLayout = bind.ContiguousParams([]string{"w", "b", "wv", "bv"}, []int{8, 2, 4, 1})

// constWeights are bindtest.ConstPolicy(v)'s weights as a flat vector in constLayout: the action is
// v mod 2, the value v.
func constWeights(v int64) []float32 {
	flat := make([]float32, 15)
	copy(flat[8:10], []float32{10, -10})
	if v%2 == 1 {
		copy(flat[8:10], []float32{-10, 10})
	}
	flat[14] = float32(v)
	return flat
}

// TestPublishNeverMixesVersions publishes versions as fast as it can while rollouts are
// collected: within each worker's step every row carries one version and the action and value
// that version's weights give, and versions never go back.
func TestPublishNeverMixesVersions(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	p, err := bind.New(ctx, bindtest.ConstPolicy(t, 0), 0, spec, bind.Config{Publish: constLayout})
	if err != nil {
		t.Fatal(err)
	}
	const workers, m = 2, 16
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: workers, EnvsPerWorker: m, Steps: 50, Deterministic: true}, p)
	flat := make([]float32, 15)
	stop := keepPublishing(t, func(v int64) error {
		copy(flat, constWeights(v))
		err := b.Publish(ctx, v, flat)
		clear(flat) // Publish has copied it: a trainer may write it at once
		return err
	})
	vc := newVersionChecker(workers, m)
	for round := 0; round < 40 || len(vc.seen) < 20; round++ {
		if round > 20000 {
			t.Fatalf("only versions %v were collected; the publishes did not reach the workers", vc.seen)
		}
		r, err := b.Collect(ctx, 50)
		if err != nil {
			t.Fatal(err)
		}
		vc.check(t, r)
	}
	stop()
}

// TestPublishAndUpdatePolicy: the later of Publish and UpdatePolicy wins, whether or not the
// worker has installed the earlier one; a policy from WithModel keeps the layout.
func TestPublishAndUpdatePolicy(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	p, err := bind.New(ctx, bindtest.ConstPolicy(t, 0), 0, spec, bind.Config{Publish: constLayout})
	if err != nil {
		t.Fatal(err)
	}
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 4, Steps: 5, Deterministic: true}, p)
	check := func(want int64) {
		t.Helper()
		r, err := b.Collect(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		for i := range r.T * r.N {
			if r.Version[i] != want || r.Values[i] != float32(want) || r.Actions[i] != float32(want%2) {
				t.Fatalf("row %d: version %d value %v action %v, want version %d", i, r.Version[i], r.Values[i], r.Actions[i], want)
			}
		}
	}
	for _, step := range []struct {
		publish []int64 // publishes, then an UpdatePolicy when update > 0, then publishes after
		update  int64
		after   []int64
		want    int64
	}{
		{publish: []int64{1}, want: 1},
		{publish: []int64{2}, update: 3, want: 3},
		{update: 4, after: []int64{5}, want: 5},
		{publish: []int64{6, 7}, update: 8, after: []int64{9, 10}, want: 10},
		{update: 11, want: 11},
	} {
		for _, v := range step.publish {
			if err := b.Publish(ctx, v, constWeights(v)); err != nil {
				t.Fatal(err)
			}
		}
		if step.update > 0 {
			if err := b.UpdatePolicy(ctx, p.WithModel(bindtest.ConstPolicy(t, step.update), step.update)); err != nil {
				t.Fatal(err)
			}
		}
		for _, v := range step.after {
			if err := b.Publish(ctx, v, constWeights(v)); err != nil {
				t.Fatal(err)
			}
		}
		check(step.want)
	}
}

// TestPublishErrors: layouts that do not fit the graph are refused by NewPolicy, and publishes
// that do not fit by Publish, leaving the workers as they were; nothing panics.
func TestPublishErrors(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	model := bindtest.ConstPolicy(t, 0)
	p, err := bind.New(ctx, model, 0, spec, bind.Config{Publish: constLayout})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(ctx, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 4, Steps: 3, Deterministic: true}, p)
	if err != nil {
		t.Fatal(err)
	}
	nan, inf := constWeights(3), constWeights(3)
	nan[9] = float32(math.NaN())
	inf[0] = float32(math.Inf(-1))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		flat []float32
		is   error
		want string
	}{
		{"short", ctx, constWeights(3)[:14], bind.ErrPublish, "a flat vector of 14 values; the layout (bind.Config.Publish) holds 15"},
		{"long", ctx, append(constWeights(3), 0), bind.ErrPublish, "16 values"},
		{"NaN", ctx, nan, bind.ErrPublish, `weight "b" value 1 is NaN`},
		{"infinity", ctx, inf, bind.ErrPublish, `weight "w" value 0 is -Inf`},
		{"canceled", canceled, constWeights(3), context.Canceled, "canceled"},
	} {
		if err := b.Publish(tc.ctx, 3, tc.flat); !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %v containing %q", tc.name, err, tc.is, tc.want)
		}
	}
	r, err := b.Collect(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version[0] != 0 || r.Values[0] != 0 {
		t.Errorf("after refused publishes: version %d value %v, want 0 and 0", r.Version[0], r.Values[0])
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, 4, constWeights(4)); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
	if err := b.UpdatePolicy(ctx, p); !errors.Is(err, ErrClosed) {
		t.Errorf("UpdatePolicy after Close: %v, want ErrClosed", err)
	}

	for name, pol := range map[string]*bind.Policy{"a policy without a layout": loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{}), "random actions": nil} {
		b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 2, Steps: 2}, pol)
		if err := b.Publish(ctx, 1, constWeights(1)); !errors.Is(err, bind.ErrPublish) || !strings.Contains(err.Error(), "not built with bind.Config.Publish") {
			t.Errorf("%s: Publish error %v", name, err)
		}
	}
}

// TestPublishConvWarns: publishing a convolution's weights is said in the log (ONNX Runtime
// runs fed convolutions without its constant-weight layout), and works.
func TestPublishConvWarns(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	shape := &onnxpb.TensorProto{Name: proto.String("shape"), Dims: []int64{4}, DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)),
		Int64Data: []int64{-1, 1, 4, 1}}
	model := bindtest.Marshal(t, &onnxpb.GraphProto{
		Name:   proto.String("conv"),
		Input:  []*onnxpb.ValueInfoProto{bindtest.ValueInfo("obs", "batch", 4)},
		Output: []*onnxpb.ValueInfoProto{bindtest.ValueInfo("logits", "batch", 2), bindtest.ValueInfo("value", "batch", 1)},
		Node: []*onnxpb.NodeProto{
			bindtest.Node("Reshape", []string{"obs", "shape"}, []string{"image"}),
			bindtest.Node("Conv", []string{"image", "cw", "cb"}, []string{"conv"}),
			bindtest.Node("Flatten", []string{"conv"}, []string{"features"}, bindtest.IntAttr("axis", 1)),
			bindtest.Node("Gemm", []string{"features", "w", "b"}, []string{"logits"}), bindtest.Node("Gemm", []string{"obs", "wv", "bv"}, []string{"value"}),
		},
		Initializer: append(bindtest.LinearInits(), shape, bindtest.FloatTensor("cw", []int64{1, 1, 1, 1}, []float32{1}), bindtest.FloatTensor("cb", []int64{1}, []float32{0})),
	})
	cfg, logs := observed()
	cfg.Publish = bind.ContiguousParams([]string{"cw", "cb", "w", "b", "wv", "bv"}, []int{1, 1, 8, 2, 4, 1})
	p, err := bind.New(ctx, model, 0, spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	warned := logs.FilterMessageSnippet("convolution weights").All()
	if len(warned) != 1 || fmt.Sprint(warned[0].ContextMap()["conv_weights"]) != "[cw]" {
		t.Errorf("no warning naming the published convolution weight cw: %v", warned)
	}
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 4, Steps: 2, Deterministic: true}, p)
	flat := slices.Concat([]float32{-1, 0}, bindtest.CartPoleW, bindtest.CartPoleB, make([]float32, 4), []float32{3})
	if err := b.Publish(ctx, 2, flat); err != nil {
		t.Fatal(err)
	}
	r, err := b.Collect(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.T * r.N {
		if r.Version[i] != 2 || r.Values[i] != 3 {
			t.Fatalf("row %d: version %d value %v, want 2 and 3", i, r.Version[i], r.Values[i])
		}
	}
	// The negated convolution flips the balancing policy's choice: each action is the
	// opposite of the model's own.
	want, _, _, _ := runAgent(t, p, r.Obs[:4*r.ObsDim], 4, true)
	for i := range 4 {
		if r.Actions[i] == want[i] {
			t.Errorf("env %d: action %v with the convolution negated, %v with the model's", i, r.Actions[i], want[i])
		}
	}
}

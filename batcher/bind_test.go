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
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/edit"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// TestFixedBatchFallback: a fixed batch that cannot be freed is said in the log, and the
// workers run it one row per call with the same results as the dynamic-batch equivalent.
func TestFixedBatchFallback(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	cfg, logs := observed()
	folded, err := bind.New(ctx, bindtest.FoldedPolicy(t), 0, spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if folded.FixedBatch() != 1 {
		t.Fatalf("FixedBatch() = %d, want 1", folded.FixedBatch())
	}
	if !bindtest.Logged(logs, "one fixed batch per call") {
		t.Errorf("the fallback was not logged: %v", logs.All())
	}
	linear, err := bind.New(ctx, bindtest.LinearPolicy(t), 0, spec, bind.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if linear.FixedBatch() != 0 {
		t.Fatalf("dynamic policy: FixedBatch() = %d", linear.FixedBatch())
	}
	collect := func(p *bind.Policy) *Rollout {
		b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 5, Steps: 40, Seed: 3}, p)
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

// runAgent acts once on the rows of obs with a fresh agent of p (zero recurrent state) and
// returns what it wrote.
func runAgent(t testing.TB, p *bind.Policy, obs []float32, n int, deterministic bool) (acts, envActs, logp, value []float32) {
	t.Helper()
	a := newTestAgent(t, p, n, 1, deterministic)
	defer a.Close()
	ad := p.Spec().ActionDim()
	if p.Spec().Head == head.CategoricalKind {
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
func newTestAgent(t testing.TB, p *bind.Policy, n int, seed uint64, deterministic bool) *onnxAgent {
	t.Helper()
	rngs := make([]*rand.Rand, n)
	for i := range rngs {
		rngs[i], _ = samplingStream(seed, i)
	}
	a, err := newAgent(context.Background(), p, n, rngs, deterministic)
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

// TestUpdatePolicyWithModel hot-swaps a re-export of SB3's documented export (fixed batch,
// logits inside the graph) with the action head's weights negated (package bind checks its
// actions): a re-export missing a weight is refused by UpdatePolicy, and the swap to the good
// one collects its version.
func TestUpdatePolicyWithModel(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	model, err := os.ReadFile(filepath.Join(bindtest.ForeignDir, "sb3_ppo_cartpole.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := bind.New(ctx, model, 1, spec, bind.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Edited() {
		t.Fatal("the fixed-batch export was used unedited")
	}
	q := p.WithModel(bindtest.NegateInitializers(t, model, "policy.action_net.weight", "policy.action_net.bias"), 2)
	broken := bindtest.NegateInitializers(t, model, "policy.action_net.bias")
	m := bindtest.Parse(t, broken)
	m.Graph.Initializer = m.Graph.Initializer[1:]
	broken, _ = proto.Marshal(m)
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 4, Steps: 4, Deterministic: true}, p)
	if err := b.UpdatePolicy(ctx, p.WithModel(broken, 3)); !errors.Is(err, bind.ErrPolicy) || !strings.Contains(err.Error(), "initializer") {
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
	p, err := loadFile(context.Background(), filepath.Join(bindtest.ForeignDir, "sb3_ppo_pendulum_old.onnx"), "Pendulum-v1", bind.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{Env: envSpec("Pendulum-v1"), EnvsPerWorker: 2, Steps: 2}, p)
	if !errors.Is(err, head.ErrDeterministicOnly) || !errors.Is(err, bind.ErrPolicy) || !strings.Contains(err.Error(), "--deterministic") {
		t.Fatalf("sampling a deterministic-only policy: %v", err)
	}
	b := newBatcher(t, Config{Env: envSpec("Pendulum-v1"), EnvsPerWorker: 2, Steps: 2, Deterministic: true}, p)
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

// TestRecurrentCollectAllocatesNothing: carrying recurrent states (swapped buffers, zeroed rows,
// episode starts fed) allocates nothing per rollout, nor does a batch freed at load.
func TestRecurrentCollectAllocatesNothing(t *testing.T) {
	for _, name := range []string{"sb3c_recurrentppo_cartpole", "rllib_cartpole_lstm"} {
		t.Run(name, func(t *testing.T) {
			p := loadPolicy(t, filepath.Join(bindtest.ForeignDir, name+".onnx"), "CartPoleNoVel-v1", bind.Config{})
			b := newBatcher(t, Config{Env: envSpec("CartPoleNoVel-v1"), EnvsPerWorker: 8, Steps: 16, MaxEpisodeSteps: 20}, p)
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

// TestNamesAsRecognisedReturns: naming the tensors the recogniser binds by itself (SB3's
// documented Gaussian export, whose mean "53" is also its deterministic actions) gives the
// same returns, deterministic and sampled, on the fixture and on its batch freed by
// edit.DynamicBatch. Package bind checks the binding and one step against PyTorch.
func TestNamesAsRecognisedReturns(t *testing.T) {
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
	named := head.Names{Params: "53", LogStd: "policy.log_std", Value: "24", Actions: "53"}
	for _, tc := range []struct {
		name  string
		model []byte
	}{{"fixed batch", fixed}, {"edit.DynamicBatch", freed}} {
		t.Run(tc.name, func(t *testing.T) {
			bare, err := bind.New(ctx, tc.model, 0, spec, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := bind.New(ctx, tc.model, 0, spec, bind.Config{Names: named})
			if err != nil {
				t.Fatal(err)
			}
			for _, det := range []bool{true, false} {
				cfg := EvalConfig{Env: envSpec("Pendulum-v1"), Episodes: 4, Envs: 2, Seed: 7, Deterministic: det}
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
		})
	}
}

package batcher

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest/observer"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func loadPolicy(t testing.TB, path string, env string, cfg bind.Config) *bind.Policy {
	t.Helper()
	model, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := envs.Lookup(env)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bind.New(context.Background(), model, 0, spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loadFile reads the policy file at path and binds it to env.
func loadFile(ctx context.Context, path, env string, cfg bind.Config) (*bind.Policy, error) {
	spec, err := envs.Lookup(env)
	if err != nil {
		return nil, err
	}
	return bind.Load(ctx, path, spec, cfg)
}

// observed returns a bind.Config whose session logger records into the returned logs.
func observed() (bind.Config, *observer.ObservedLogs) {
	var cfg bind.Config
	var logs *observer.ObservedLogs
	cfg.Session.Logger, logs = bindtest.Observed()
	return cfg, logs
}

func newBatcher(t testing.TB, cfg Config, p *bind.Policy) *Batcher {
	t.Helper()
	b, err := New(context.Background(), cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// TestRolloutMatchesSingleEnvReplay replays every env of a collected rollout through its own
// single Env with the recorded actions: observations, rewards, flags and final observations
// must be the same, so the columnar bookkeeping (rows t·N+i, worker slices) is right.
func TestRolloutMatchesSingleEnvReplay(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 3, Steps: 60, Seed: 11}, p)
	r, err := b.Collect(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	dones := 0
	for i := range r.N {
		vec, err := envs.Make("CartPole-v1", envs.Config{NumEnvs: 1, Seed: 11, Offset: i})
		if err != nil {
			t.Fatal(err)
		}
		if err := vec.Reset(); err != nil {
			t.Fatal(err)
		}
		buf := vec.Buffers()
		for step := range r.T {
			row := step*r.N + i
			obs := r.Obs[row*4 : row*4+4]
			for k := range 4 {
				if obs[k] != buf.Obs[k] {
					t.Fatalf("env %d step %d: recorded obs %v, replay %v", i, step, obs, buf.Obs)
				}
			}
			if err := vec.Step(envs.Actions{Discrete: []int{int(r.Actions[row])}}); err != nil {
				t.Fatal(err)
			}
			if r.Rewards[row] != buf.Rewards[0] || r.Terminated[row] != buf.Terminated[0] || r.Truncated[row] != buf.Truncated[0] {
				t.Fatalf("env %d step %d: reward/flags differ", i, step)
			}
			if buf.Terminated[0] != 0 {
				dones++
				next := r.NextObs(step, i)
				for k := range 4 {
					if next[k] != buf.FinalObs[k] {
						t.Fatalf("env %d step %d: final obs %v, replay %v", i, step, next, buf.FinalObs[:4])
					}
				}
			}
			if math.IsNaN(float64(r.LogP[row])) || r.LogP[row] > 0 || r.Version[row] != 0 {
				t.Fatalf("env %d step %d: logp %v version %d", i, step, r.LogP[row], r.Version[row])
			}
		}
		vec.Close()
	}
	if dones == 0 || len(r.Episodes) != dones {
		t.Fatalf("%d terminations replayed, %d episodes recorded", dones, len(r.Episodes))
	}
}

// TestSameTrajectoriesWhateverTheWorkers: 1×6 envs, 3×2 envs and 1×6 envs stepped in 3 env
// threads give the same rollout.
func TestSameTrajectoriesWhateverTheWorkers(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	collect := func(w, m, threads int) *Rollout {
		b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: w, EnvsPerWorker: m, EnvThreads: threads, Steps: 40, Seed: 5}, p)
		r, err := b.Collect(context.Background(), 40)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := collect(1, 6, 1)
	for _, b := range []*Rollout{collect(3, 2, 1), collect(1, 6, 3)} {
		sameRollout(t, a, b)
	}
}

func sameRollout(t *testing.T, a, b *Rollout) {
	t.Helper()
	for k := range a.Obs {
		if a.Obs[k] != b.Obs[k] {
			t.Fatalf("obs element %d: %v vs %v", k, a.Obs[k], b.Obs[k])
		}
	}
	for k := range a.Actions {
		if a.Actions[k] != b.Actions[k] || a.LogP[k] != b.LogP[k] {
			t.Fatalf("row %d: actions %v/%v logp %v/%v", k, a.Actions[k], b.Actions[k], a.LogP[k], b.LogP[k])
		}
	}
}

// TestHotSwapNeverMixesVersions swaps policies continuously while collecting; each policy's
// value output is its version and its action is version%2, so every env row of a worker step
// must agree with the version recorded for it, and versions only grow.
func TestHotSwapNeverMixesVersions(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	mk := func(v int64) *bind.Policy {
		p, err := bind.New(ctx, bindtest.ConstPolicy(t, v), v, spec, bind.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 16, Steps: 50, Deterministic: true}, mk(0))
	stop := keepPublishing(t, func(v int64) error { return b.UpdatePolicy(ctx, mk(v)) })
	vc := newVersionChecker(2, 16)
	// Collect until several versions have gone through (each swap builds sessions, which is
	// slower than a rollout of these constant policies); bounded so a broken swap fails.
	for round := 0; len(vc.seen) < 6 && round < 20000; round++ {
		r, err := b.Collect(ctx, 50)
		if err != nil {
			t.Fatal(err)
		}
		vc.check(t, r)
	}
	stop()
	if len(vc.seen) < 6 {
		t.Fatalf("only versions %v were collected; the swap did not happen during collection", vc.seen)
	}
}

// keepPublishing calls publish with versions 1, 2, … on its own goroutine until the
// returned stop is called, which waits for it. An error fails t and ends the goroutine.
func keepPublishing(t *testing.T, publish func(v int64) error) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := int64(1); ; v++ {
			select {
			case <-done:
				return
			default:
			}
			if err := publish(v); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// versionChecker checks rollouts of constPolicy versions, W workers of M envs, in the order
// they were collected: within each worker's step every row carries one version and the value
// and action that version's policy gives, and a worker's versions never go back.
type versionChecker struct {
	workers, m int
	last       []int64        // each worker's latest version
	seen       map[int64]bool // the versions seen
}

func newVersionChecker(workers, m int) *versionChecker {
	return &versionChecker{workers: workers, m: m, last: make([]int64, workers), seen: map[int64]bool{}}
}

func (c *versionChecker) check(t *testing.T, r *Rollout) {
	t.Helper()
	for step := range r.T {
		for w := range c.workers {
			first := step*r.N + w*c.m
			v := r.Version[first]
			if v < c.last[w] {
				t.Fatalf("worker %d went back from version %d to %d", w, c.last[w], v)
			}
			c.last[w] = v
			c.seen[v] = true
			for i := first; i < first+c.m; i++ {
				if r.Version[i] != v || r.Values[i] != float32(v) || r.Actions[i] != float32(v%2) {
					t.Fatalf("step %d env %d: version %d value %v action %v, worker step version %d",
						step, i-step*r.N, r.Version[i], r.Values[i], r.Actions[i], v)
				}
			}
		}
	}
}

func TestForeignGaussianOnPendulum(t *testing.T) {
	p := loadPolicy(t, "../testdata/gaussian_relu.onnx", "Pendulum-v1", bind.Config{})
	if p.Spec().Head != head.GaussianKind || p.Spec().ActionSpace() != "box:1:-2:2" {
		t.Fatalf("spec %+v", p.Spec())
	}
	b := newBatcher(t, Config{Env: envSpec("Pendulum-v1"), Workers: 1, EnvsPerWorker: 8, Steps: 200, Seed: 1}, p)
	r, err := b.Collect(context.Background(), 200)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Episodes) != 8 {
		t.Fatalf("%d episodes in 200 steps of 8 Pendulum envs", len(r.Episodes))
	}
	clipped := 0
	for k, a := range r.Actions {
		e := r.EnvActions[k]
		if e < -2 || e > 2 || (a >= -2 && a <= 2 && a != e) {
			t.Fatalf("row %d: raw %v env %v", k, a, e)
		}
		if a != e {
			clipped++
		}
	}
	t.Logf("%d of %d actions clipped", clipped, len(r.Actions))
}

func TestRandomPolicyAndErrors(t *testing.T) {
	b := newBatcher(t, Config{Env: envSpec("MountainCarContinuous-v0"), EnvsPerWorker: 4, Steps: 10}, nil)
	r, err := b.Collect(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Actions {
		if a < -1 || a > 1 {
			t.Fatalf("random action %v outside [-1, 1]", a)
		}
	}
	if _, err := b.Collect(context.Background(), 11); !errors.Is(err, ErrConfig) {
		t.Fatalf("11 steps of 10: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Collect(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if _, err := New(context.Background(), Config{}, nil); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Env is required") {
		t.Fatalf("no env: %v", err)
	}
	if _, err := New(context.Background(), Config{Env: envSpec("CartPole-v1"), Workers: -1}, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("Workers -1: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Collect(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestCheckDevice(t *testing.T) {
	cpu := device.CPU()
	obs, _ := cpu.Mirror("obs", make([]float32, 8), 2, 4)
	mk := func(name string) *device.Tensor { x, _ := cpu.Mirror(name, make([]float32, 2), 2, 1); return x }
	out := AgentOutput{Actions: mk("actions"), EnvActions: mk("env_actions"), LogP: mk("logp"), Value: mk("value")}
	r0, _ := samplingStream(0, 0)
	r1, _ := samplingStream(0, 1)
	rngs := []*rand.Rand{r0, r1}
	a := CheckDevice(&randomAgent{space: envs.Discrete{N: 2}, rngs: rngs}, cpu)
	if err := a.Act(AgentInput{N: 2, Obs: obs}, out); err != nil {
		t.Fatal(err)
	}
	// A tensor claimed by another device fails with its name.
	other := otherDevice{cpu}
	stray, _ := device.NewTensor(other, "value", make([]float32, 2), 2)
	out.Value = stray
	err := a.Act(AgentInput{N: 2, Obs: obs}, out)
	var pe *device.PlacementError
	if !errors.As(err, &pe) || pe.Tensor != "value" || !strings.Contains(err.Error(), `"value"`) {
		t.Fatalf("error %v, want a PlacementError naming value", err)
	}
}

// otherDevice is a second CPU ordinal, standing in for an accelerator.
type otherDevice struct{ device.Device }

func (otherDevice) Ordinal() int   { return 1 }
func (otherDevice) String() string { return "cpu:1" }

// TestBootstrapValues: LastValues and, at truncations, FinalValues are the policy's value output
// for LastObs and FinalObs, as a separate ONNX Runtime session computes them.
func TestBootstrapValues(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 4, Steps: 60, Seed: 4, MaxEpisodeSteps: 15}, p)
	r, err := b.Collect(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	s, err := onnx.Open(context.Background(), "../testdata/mlp_tanh.onnx", onnx.Config{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	value := func(obs []float32) float32 {
		if _, err := onnx.Feed(s, 0, []int64{1, 4}, obs); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(1); err != nil {
			t.Fatal(err)
		}
		v, _ := onnx.Output[float32](s, 1)
		return v[0]
	}
	near := func(a, b float32) bool { return math.Abs(float64(a-b)) <= 1e-6 }
	for i := range r.N {
		if want := value(r.LastObs[i*4 : i*4+4]); !near(r.LastValues[i], want) {
			t.Fatalf("env %d: last value %v, want %v", i, r.LastValues[i], want)
		}
	}
	truncated := 0
	for row := range r.T * r.N {
		if r.Truncated[row] != 0 && r.Terminated[row] == 0 {
			truncated++
			if want := value(r.FinalObs[row*4 : row*4+4]); !near(r.FinalValues[row], want) {
				t.Fatalf("row %d: final value %v, want %v", row, r.FinalValues[row], want)
			}
		}
	}
	if truncated == 0 {
		t.Fatal("no truncation in the rollout: the test checks nothing")
	}
}

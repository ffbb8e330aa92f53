package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/towerrl/towerrl/envs"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// streamCase is a policy the stream tests run, published in place (bind.Config.Publish).
type streamCase struct {
	name, path, env string
}

// streamCases: a feed-forward MLP and two recurrent foreign fixtures (RLlib's LSTM, two
// states; Sample Factory's GRU, fixed batch freed at load, no value output).
var streamCases = []streamCase{
	{"mlp_tanh", "../testdata/mlp_tanh.onnx", "CartPole-v1"},
	{"rllib_cartpole_lstm", bindtest.ForeignDir + "/rllib_cartpole_lstm.onnx", "CartPoleNoVel-v1"},
	{"sf_cartpole_gru", bindtest.ForeignDir + "/sf_cartpole_gru.onnx", "CartPoleNoVel-v1"},
}

// publishedPolicy loads c's policy with its weights published in place, and the trainer
// that publishes them.
func publishedPolicy(t testing.TB, c streamCase) (*bind.Policy, *trainer) {
	t.Helper()
	tr := newTrainer(t, c.path)
	spec, err := envs.Lookup(c.env)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bind.New(context.Background(), tr.model, 0, spec, bind.Config{Publish: tr.layout})
	if err != nil {
		t.Fatal(err)
	}
	return p, tr
}

func newStream(t testing.TB, b *Batcher, cfg StreamConfig) *Stream {
	t.Helper()
	s, err := b.Stream(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func next(t testing.TB, s *Stream) (int, *Rollout) {
	t.Helper()
	slot, r, err := s.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return slot, r
}

func release(t testing.TB, s *Stream, slots ...int) {
	t.Helper()
	for _, slot := range slots {
		if err := s.Release(slot); err != nil {
			t.Fatal(err)
		}
	}
}

// rows views steps [from, from+T) of a rollout: the rows a rollout of T steps holds.
type rows struct {
	r          *Rollout
	from, T, N int
}

func (v rows) row(t, i int) int { return (v.from+t)*v.N + i }

// sameRows compares every column of got, row by row, with want's rows at the same steps,
// exactly: both come from the same code on the same inputs. Final observations and values
// are compared where an episode ended (and was truncated), as elsewhere they are stale.
func sameRows(t *testing.T, what string, want, got rows) {
	t.Helper()
	w, g := want.r, got.r
	od, ad := w.ObsDim, w.ActDim
	f32 := func(name string, a, b []float32, wr, gr, size int) {
		t.Helper()
		for k := range size {
			if x, y := a[wr*size+k], b[gr*size+k]; math.Float32bits(x) != math.Float32bits(y) {
				t.Fatalf("%s: %s at step %d row %d element %d: %v, want %v", what, name, gr/got.N, gr%got.N, k, y, x)
			}
		}
	}
	for step := range got.T {
		for i := range got.N {
			wr, gr := want.row(step, i), got.row(step, i)
			f32("Obs", w.Obs, g.Obs, wr, gr, od)
			f32("Actions", w.Actions, g.Actions, wr, gr, ad)
			f32("EnvActions", w.EnvActions, g.EnvActions, wr, gr, ad)
			for _, c := range []struct {
				name string
				a, b []float32
			}{{"Rewards", w.Rewards, g.Rewards}, {"Terminated", w.Terminated, g.Terminated}, {"Truncated", w.Truncated, g.Truncated},
				{"LogP", w.LogP, g.LogP}, {"Values", w.Values, g.Values}, {"EpisodeStarts", w.EpisodeStarts, g.EpisodeStarts}} {
				f32(c.name, c.a, c.b, wr, gr, 1)
			}
			if w.Version[wr] != g.Version[gr] {
				t.Fatalf("%s: Version at step %d env %d: %d, want %d", what, step, i, g.Version[gr], w.Version[wr])
			}
			if w.Terminated[wr] != 0 || w.Truncated[wr] != 0 {
				f32("FinalObs", w.FinalObs, g.FinalObs, wr, gr, od)
			}
			if w.Truncated[wr] != 0 && w.Terminated[wr] == 0 {
				f32("FinalValues", w.FinalValues, g.FinalValues, wr, gr, 1)
			}
			for k := range w.States {
				size := len(w.States[k]) / len(w.Version)
				f32("States["+w.StateNames[k]+"]", w.States[k], g.States[k], wr, gr, size)
			}
		}
	}
}

// identicalRollout compares two rollouts of the same steps: their rows, initial states,
// bootstrap observations and values, and episodes.
func identicalRollout(t *testing.T, what string, want, got *Rollout) {
	t.Helper()
	if got.T != want.T || got.N != want.N {
		t.Fatalf("%s: %d steps × %d envs, want %d × %d", what, got.T, got.N, want.T, want.N)
	}
	sameRows(t, what, rows{want, 0, want.T, want.N}, rows{got, 0, got.T, got.N})
	opts := cmp.Comparer(func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) })
	if d := cmp.Diff(want.InitialState, got.InitialState, opts); d != "" {
		t.Fatalf("%s: InitialState (-Collect +Stream):\n%s", what, d)
	}
	if d := cmp.Diff(want.LastObs, got.LastObs, opts); d != "" {
		t.Fatalf("%s: LastObs (-Collect +Stream):\n%s", what, d)
	}
	if d := cmp.Diff(want.LastValues, got.LastValues, opts); d != "" {
		t.Fatalf("%s: LastValues (-Collect +Stream):\n%s", what, d)
	}
	if d := cmp.Diff(want.Episodes, got.Episodes); d != "" {
		t.Fatalf("%s: Episodes (-Collect +Stream):\n%s", what, d)
	}
}

// TestStreamMatchesCollect: a stream's rollouts are, one by one and bit for bit, the rollouts
// consecutive Collects of a second batcher with the same seed give, for a feed-forward and two
// recurrent policies, with new weights published between the second and third: rows,
// recurrent states, episode starts, bootstrap values and episodes.
func TestStreamMatchesCollect(t *testing.T) {
	ctx := context.Background()
	for _, c := range streamCases {
		t.Run(c.name, func(t *testing.T) {
			p, tr := publishedPolicy(t, c)
			cfg := Config{Env: envSpec(c.env), Workers: 2, EnvsPerWorker: 3, Steps: 20, Seed: 7, MaxEpisodeSteps: 15}
			ref, str := newBatcher(t, cfg, p), newBatcher(t, cfg, p)
			const steps, rollouts = 10, 6
			s := newStream(t, str, StreamConfig{Slots: 2, Steps: steps})
			collect := func() *Rollout {
				t.Helper()
				r, err := ref.Collect(ctx, steps)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			// Holding both slots, the workers wait for a free one, so weights published now
			// reach the first step of the third rollout, as they reach the third Collect.
			a, r0 := next(t, s)
			b, r1 := next(t, s)
			identicalRollout(t, "rollout 0", collect(), r0)
			identicalRollout(t, "rollout 1", collect(), r1)
			tr.perturb(rand.New(rand.NewPCG(3, 4)), 0.05)
			for _, bt := range []*Batcher{ref, str} {
				if err := bt.Publish(ctx, 1, tr.flat); err != nil {
					t.Fatal(err)
				}
			}
			release(t, s, a, b)
			episodes, truncations, starts := len(r0.Episodes)+len(r1.Episodes), 0, 0
			for k := 2; k < rollouts; k++ {
				slot, r := next(t, s)
				identicalRollout(t, fmt.Sprintf("rollout %d", k), collect(), r)
				for row := range r.T * r.N {
					if r.Version[row] != 1 {
						t.Fatalf("rollout %d row %d: version %d after the publish of 1", k, row, r.Version[row])
					}
					if r.Truncated[row] != 0 && r.Terminated[row] == 0 {
						truncations++
					}
					starts += int(r.EpisodeStarts[row])
				}
				episodes += len(r.Episodes)
				release(t, s, slot)
			}
			if episodes == 0 || truncations == 0 || starts == 0 {
				t.Fatalf("%d episodes, %d truncations, %d episode starts: the comparison proves little", episodes, truncations, starts)
			}
			st := s.Stats()
			if st.HandedOut != rollouts || st.Dropped != 0 || st.Filled < rollouts || st.Filled > rollouts+2 {
				t.Fatalf("stats %+v after %d rollouts through 2 slots", st, rollouts)
			}
		})
	}
}

// TestStreamConcatenates: three consecutive rollouts of 8 steps from a stream are one
// Collect of 24 steps cut in three: rows, and each rollout's initial states, last
// observations and values are the rows at its boundaries; the episodes are the same.
func TestStreamConcatenates(t *testing.T) {
	ctx := context.Background()
	for _, c := range streamCases[:2] {
		t.Run(c.name, func(t *testing.T) {
			p, _ := publishedPolicy(t, c)
			cfg := Config{Env: envSpec(c.env), Workers: 2, EnvsPerWorker: 4, Steps: 24, Seed: 3, MaxEpisodeSteps: 10}
			ref, str := newBatcher(t, cfg, p), newBatcher(t, cfg, p)
			want, err := ref.Collect(ctx, 24)
			if err != nil {
				t.Fatal(err)
			}
			s := newStream(t, str, StreamConfig{Slots: 3, Steps: 8})
			perEnv := func(eps []Episode) map[int][]Episode {
				m := map[int][]Episode{}
				for _, e := range eps {
					m[e.Env] = append(m[e.Env], e)
				}
				return m
			}
			var got []Episode
			n, od := want.N, want.ObsDim
			for k := range 3 {
				slot, r := next(t, s)
				sameRows(t, "rows", rows{want, 8 * k, 8, n}, rows{r, 0, 8, n})
				for j := range r.InitialState {
					size := len(r.InitialState[j]) / n
					from := want.States[j][8*k*n*size : (8*k+1)*n*size]
					if d := cmp.Diff(from, r.InitialState[j]); d != "" {
						t.Fatalf("rollout %d: InitialState[%d] is not the state at step %d (-Collect +Stream):\n%s", k, j, 8*k, d)
					}
				}
				last, lastV := want.LastObs, want.LastValues
				if k < 2 {
					last, lastV = want.Obs[8*(k+1)*n*od:(8*(k+1)+1)*n*od], want.Values[8*(k+1)*n:(8*(k+1)+1)*n]
				}
				if d := cmp.Diff(last, r.LastObs); d != "" {
					t.Fatalf("rollout %d: LastObs (-Collect +Stream):\n%s", k, d)
				}
				for i := range n {
					if d := math.Abs(float64(lastV[i] - r.LastValues[i])); d > 1e-6 {
						t.Fatalf("rollout %d env %d: LastValues %v, the value at the next step %v", k, i, r.LastValues[i], lastV[i])
					}
				}
				got = append(got, r.Episodes...)
				release(t, s, slot)
			}
			if len(want.Episodes) == 0 {
				t.Fatal("no episode ended: the test checks little")
			}
			if d := cmp.Diff(perEnv(want.Episodes), perEnv(got)); d != "" {
				t.Fatalf("episodes (-Collect +Stream):\n%s", d)
			}
		})
	}
}

// constBatcher is a batcher of constPolicy with its weights published in place
// (constWeights), deterministic: every row's value is its version.
func constBatcher(t testing.TB, workers, m, steps int) *Batcher {
	t.Helper()
	spec, _ := envs.Lookup("CartPole-v1")
	p, err := bind.New(context.Background(), bindtest.ConstPolicy(t, 0), 0, spec, bind.Config{Publish: constLayout})
	if err != nil {
		t.Fatal(err)
	}
	return newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: workers, EnvsPerWorker: m, Steps: steps, Deterministic: true}, p)
}

// waitFor polls cond until it holds, failing after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}

// TestStreamBackpressure: when the caller holds every slot the workers stop, nothing more is
// filled, and the time they wait is counted; with a slow consumer no more rollouts are ever
// filled than the slots hold, and the idle fraction shows it.
func TestStreamBackpressure(t *testing.T) {
	const workers = 2
	b := constBatcher(t, workers, 8, 20)
	s := newStream(t, b, StreamConfig{})
	a, _ := next(t, s)
	c, _ := next(t, s)
	// Every worker finished the second rollout before Next returned it, and has waited since.
	const hold = 150 * time.Millisecond
	time.Sleep(hold)
	st := s.Stats()
	if st.Filled != 2 || st.Held != 2 || st.Ready != 0 || st.Slots != 2 || st.Workers != workers {
		t.Fatalf("holding both slots: %+v", st)
	}
	if st.Blocked < workers*hold {
		t.Fatalf("blocked %v while the caller held every slot for %v, want >= %v", st.Blocked, hold, workers*hold)
	}
	if tm := b.Timings(); tm.Steps != 2*20*int64(b.NumEnvs()) {
		t.Fatalf("timings during the stream count %d steps, want the %d of the two rollouts", tm.Steps, 2*20*b.NumEnvs())
	}
	release(t, s, a, c)
	for range 20 {
		slot, _ := next(t, s)
		time.Sleep(5 * time.Millisecond) // a learner slower than the workers
		st := s.Stats()
		if inFlight := st.Filled - st.HandedOut - st.Dropped; inFlight > int64(st.Slots) || st.Ready+st.Held > st.Slots {
			t.Fatalf("%d rollouts filled and not handed out, %d ready, %d held, with %d slots", inFlight, st.Ready, st.Held, st.Slots)
		}
		release(t, s, slot)
	}
	st = s.Stats()
	if f := st.IdleFraction(); f <= 0 || f > 1 {
		t.Fatalf("idle fraction %v with a slow consumer (stats %+v)", f, st)
	}
	t.Logf("stats %+v, idle fraction %.2f", st, st.IdleFraction())
}

// TestStreamDropsLaggingRollouts fills the three slots with version 0, publishes versions 1
// and 2, and takes the next rollout: lag 2, handed out unless MaxPolicyLag is 1, in which case
// the three stale rollouts are dropped and the first one collected with version 2 comes out.
func TestStreamDropsLaggingRollouts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		maxLag, wantVersion, wantLag, wantDropped int64
	}{
		{maxLag: 0, wantVersion: 0, wantLag: 2},
		{maxLag: 2, wantVersion: 0, wantLag: 2},
		{maxLag: 1, wantVersion: 2, wantLag: 0, wantDropped: 3},
	} {
		b := constBatcher(t, 2, 4, 5)
		s := newStream(t, b, StreamConfig{Slots: 3, MaxPolicyLag: tc.maxLag})
		waitFor(t, "three filled rollouts", func() bool { return s.Stats().Ready == 3 })
		for v := int64(1); v <= 2; v++ {
			if err := b.Publish(ctx, v, constWeights(v)); err != nil {
				t.Fatal(err)
			}
		}
		slot, r := next(t, s)
		for row := range r.T * r.N {
			if r.Version[row] != tc.wantVersion || r.Values[row] != float32(tc.wantVersion) {
				t.Fatalf("MaxPolicyLag %d: row %d has version %d value %v, want version %d", tc.maxLag, row, r.Version[row], r.Values[row], tc.wantVersion)
			}
		}
		st := s.Stats()
		if st.Dropped != tc.wantDropped || st.HandedOut != 1 || st.MaxLag != tc.wantLag || st.MeanLag != float64(tc.wantLag) {
			t.Fatalf("MaxPolicyLag %d: stats %+v, want %d dropped and lag %d", tc.maxLag, st, tc.wantDropped, tc.wantLag)
		}
		release(t, s, slot)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamPublishNeverMixesVersions publishes versions as fast as it can while a stream
// runs: within each worker's step every row carries one version and the action and value
// that version's weights give, and versions never go back from one rollout to the next.
func TestStreamPublishNeverMixesVersions(t *testing.T) {
	ctx := context.Background()
	const workers, m = 2, 16
	b := constBatcher(t, workers, m, 50)
	s := newStream(t, b, StreamConfig{Slots: 3})
	stop := keepPublishing(t, func(v int64) error { return b.Publish(ctx, v, constWeights(v)) })
	vc := newVersionChecker(workers, m)
	for round := 0; round < 40 || len(vc.seen) < 20; round++ {
		if round > 20000 {
			t.Fatalf("only versions %v were collected; the publishes did not reach the workers", vc.seen)
		}
		slot, r := next(t, s)
		vc.check(t, r)
		release(t, s, slot)
	}
	stop()
	if st := s.Stats(); st.MaxLag < 1 || st.MeanLag <= 0 {
		t.Fatalf("publishing throughout, the stats show no lag: %+v", st)
	}
}

// TestStreamErrors: bad configs and releases are errors, never panics; Collect, Snapshot,
// Restore and a second stream are refused while one runs and work again after Close, which
// is idempotent.
func TestStreamErrors(t *testing.T) {
	ctx := context.Background()
	b := constBatcher(t, 2, 4, 10)
	for _, cfg := range []StreamConfig{{Slots: 1}, {Slots: -2}, {Steps: 11}, {Steps: -1}, {MaxPolicyLag: -1}} {
		if _, err := b.Stream(ctx, cfg); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v, want ErrConfig", cfg, err)
		}
	}
	// 2 slots × 10 steps × 8 envs × (4+4 observation + 1+1 action floats, seven 4-byte
	// columns, an int64 version) = 160 rows of 76 bytes.
	if err := b.checkStreamMemory(StreamConfig{Slots: 2, Steps: 10}, Memory{Available: 160*76 - 1, Source: "test"}); !errors.Is(err, ErrMemory) ||
		!strings.Contains(err.Error(), "2 slots × 10 steps × 8 envs") {
		t.Fatalf("a stream one byte too large: %v", err)
	}
	if err := b.checkStreamMemory(StreamConfig{Slots: 2, Steps: 10}, Memory{Available: 160 * 76, Source: "test"}); err != nil {
		t.Fatalf("a stream that just fits: %v", err)
	}
	s, err := b.Stream(ctx, StreamConfig{Steps: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Collect(ctx, 4); !errors.Is(err, ErrStreaming) {
		t.Fatalf("Collect during a stream: %v", err)
	}
	if _, err := b.Stream(ctx, StreamConfig{}); !errors.Is(err, ErrStreaming) {
		t.Fatalf("second stream: %v", err)
	}
	if _, err := b.Snapshot(); !errors.Is(err, ErrStreaming) {
		t.Fatalf("Snapshot during a stream: %v", err)
	}
	if err := b.Restore(nil); !errors.Is(err, ErrStreaming) {
		t.Fatalf("Restore during a stream: %v", err)
	}
	slot, r := next(t, s)
	if r.T != 4 {
		t.Fatalf("rollout of %d steps, want 4", r.T)
	}
	for _, bad := range []int{-1, 2, 99, 1 - slot} { // 1-slot: the other slot, not handed out
		if err := s.Release(bad); !errors.Is(err, ErrSlot) {
			t.Fatalf("Release(%d): %v, want ErrSlot", bad, err)
		}
	}
	release(t, s, slot)
	if err := s.Release(slot); !errors.Is(err, ErrSlot) {
		t.Fatalf("second Release(%d): %v, want ErrSlot", slot, err)
	}
	held, _ := next(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.Next(ctx); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := s.Release(held); err != nil {
		t.Fatalf("Release of a held slot after Close: %v", err)
	}
	if err := s.Release(held); !errors.Is(err, ErrSlot) {
		t.Fatalf("second Release after Close: %v", err)
	}
	if st := s.Stats(); st.Elapsed <= 0 || st.Elapsed != s.Stats().Elapsed {
		t.Fatalf("elapsed after Close %v, want fixed", st.Elapsed)
	}
	if _, err := b.Collect(ctx, 10); err != nil {
		t.Fatalf("Collect after Close: %v", err)
	}
	if _, err := b.Snapshot(); err != nil {
		t.Fatalf("Snapshot after Close: %v", err)
	}
	if tm := b.Timings(); tm.Steps == 0 || tm.Wall == 0 {
		t.Fatalf("timings %+v", tm)
	}
}

// TestStreamStops: the stream's context ending while the workers collect or wait, Close while
// Next waits, Next's own context, and Batcher.Close with a stream running all return promptly
// with the right error; nothing hangs, and the goroutine check of TestMain finds no leak.
func TestStreamStops(t *testing.T) {
	ctx := context.Background()
	t.Run("context while collecting", func(t *testing.T) {
		b := constBatcher(t, 2, 64, 200)
		sctx, cancel := context.WithCancel(ctx)
		s, err := b.Stream(sctx, StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		for {
			slot, _, err := s.Next(ctx)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Next after the stream's context ended: %v", err)
				}
				break
			}
			release(t, s, slot) // rollouts filled before the cancel reached the workers
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Collect(ctx, 10); err != nil {
			t.Fatalf("Collect after the stream stopped: %v", err)
		}
	})
	t.Run("context while blocked", func(t *testing.T) {
		b := constBatcher(t, 2, 4, 5)
		sctx, cancel := context.WithCancel(ctx)
		s, err := b.Stream(sctx, StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		next(t, s)
		next(t, s)
		cancel()
		if _, _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Next after the stream's context ended: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Close while Next waits", func(t *testing.T) {
		b := constBatcher(t, 2, 4, 5)
		s := newStream(t, b, StreamConfig{})
		next(t, s)
		next(t, s)
		errc := make(chan error)
		go func() {
			_, _, err := s.Next(ctx)
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("waiting Next after Close: %v", err)
		}
	})
	t.Run("Next's context", func(t *testing.T) {
		b := constBatcher(t, 2, 4, 5)
		s := newStream(t, b, StreamConfig{})
		a, _ := next(t, s)
		c, _ := next(t, s)
		nctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, _, err := s.Next(nctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Next with nothing filled: %v", err)
		}
		release(t, s, a, c)
		next(t, s) // the stream goes on
	})
	t.Run("Batcher.Close", func(t *testing.T) {
		spec, _ := envs.Lookup("CartPole-v1")
		p, err := bind.New(ctx, bindtest.ConstPolicy(t, 0), 0, spec, bind.Config{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(ctx, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 4, Steps: 5, Deterministic: true}, p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Stream(ctx, StreamConfig{})
		if err != nil {
			t.Fatal(err)
		}
		next(t, s)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Next(ctx); !errors.Is(err, ErrStreamClosed) {
			t.Fatalf("Next after Batcher.Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Stream(ctx, StreamConfig{}); !errors.Is(err, ErrClosed) {
			t.Fatalf("Stream after Batcher.Close: %v", err)
		}
	})
}

// TestStreamConcurrentConsumers: three goroutines take and release rollouts at once; every
// rollout is handed out once, no slot is held by two of them, and none waits forever.
func TestStreamConcurrentConsumers(t *testing.T) {
	b := constBatcher(t, 2, 4, 5)
	s := newStream(t, b, StreamConfig{Slots: 3})
	var mu sync.Mutex // guards holders
	holders := map[int]int{}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				slot, _, err := s.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if other, ok := holders[slot]; ok {
					t.Errorf("slot %d handed to consumer %d while consumer %d holds it", slot, g, other)
				}
				holders[slot] = g
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				delete(holders, slot)
				mu.Unlock()
				if err := s.Release(slot); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := s.Stats(); st.HandedOut != 60 || st.Held != 0 {
		t.Fatalf("stats %+v, want 60 handed out and none held", st)
	}
}

// TestStreamAllocatesNothing: after warm-up, taking and releasing a rollout allocates nothing
// anywhere in the process (the workers filling the ring included).
func TestStreamAllocatesNothing(t *testing.T) {
	p, _ := publishedPolicy(t, streamCases[0])
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 64, Steps: 32}, p)
	s := newStream(t, b, StreamConfig{Slots: 3})
	cycle := func() {
		slot, _ := next(t, s)
		release(t, s, slot)
	}
	for range 20 { // let episode lists reach their steady capacity
		cycle()
	}
	if a := testing.AllocsPerRun(20, cycle); a > 0 {
		t.Errorf("%v allocations per rollout of 32 steps × 128 envs", a)
	}
}

// BenchmarkStream collects CartPole-v1 with the 64×64 tanh MLP, two workers of 1024 envs,
// rollouts of 64 steps, by Collect and by Stream (2 slots), with a consumer that only takes
// the rollouts and with one that, like a learner on another device, spends as long as a
// Collect takes on each (a sleep, measured first). It reports env steps/s, allocations and the
// workers' idle fraction.
//
//	go test ./batcher -run '^$' -bench Stream -benchtime 50x
func BenchmarkStream(b *testing.B) {
	ctx := context.Background()
	const steps = 64
	p := loadPolicy(b, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	bt := newBatcher(b, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 1024, Steps: steps}, p)
	t0 := time.Now()
	for range 5 {
		if _, err := bt.Collect(ctx, steps); err != nil {
			b.Fatal(err)
		}
	}
	collectTime := time.Since(t0) / 5
	for _, learner := range []time.Duration{0, collectTime} {
		name := "learner=0"
		if learner > 0 {
			name = "learner=collect"
		}
		b.Run(name+"/collect", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bt.Collect(ctx, steps); err != nil {
					b.Fatal(err)
				}
				time.Sleep(learner)
			}
			b.ReportMetric(float64(b.N*steps*bt.NumEnvs())/b.Elapsed().Seconds(), "steps/s")
		})
		b.Run(name+"/stream", func(b *testing.B) {
			s, err := bt.Stream(ctx, StreamConfig{Steps: steps})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for range 4 { // warm-up: episode lists grow to their steady capacity
				slot, _ := next(b, s)
				release(b, s, slot)
			}
			before := s.Stats()
			b.ReportAllocs()
			for b.Loop() {
				slot, _ := next(b, s)
				time.Sleep(learner)
				release(b, s, slot)
			}
			st := s.Stats()
			b.ReportMetric(float64(b.N*steps*bt.NumEnvs())/b.Elapsed().Seconds(), "steps/s")
			b.ReportMetric((st.Blocked-before.Blocked).Seconds()/(2*b.Elapsed().Seconds()), "idle")
		})
	}
}

// TestWorkerWaitMonotonic: a wait's end is timed on the worker before it takes the lock, so
// a read in between, with a later time, sees the wait longer than it is then recorded; the
// count read afterwards must not go back (engine's batcher_idle came out -0.07 under load).
func TestWorkerWaitMonotonic(t *testing.T) {
	var w workerWait
	t0 := time.Unix(1000, 0)
	w.begin(t0)
	if got := w.read(t0.Add(100 * time.Millisecond)); got != 100*time.Millisecond {
		t.Fatalf("a wait in progress for 100ms reads %v", got)
	}
	w.end(t0.Add(50 * time.Millisecond)) // timed before the read above took its time
	if got := w.read(t0.Add(200 * time.Millisecond)); got != 100*time.Millisecond {
		t.Fatalf("after a read of 100ms the count reads %v, want it held at 100ms", got)
	}
	w.begin(t0.Add(300 * time.Millisecond))
	w.end(t0.Add(400 * time.Millisecond))
	if got := w.read(t0.Add(500 * time.Millisecond)); got != 150*time.Millisecond {
		t.Fatalf("two waits of 50ms and 100ms read %v, want 150ms", got)
	}
}

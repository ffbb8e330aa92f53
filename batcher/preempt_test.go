package batcher

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/towerrl/towerrl/bind"
)

// TestCollectPreemptible: a preempted rollout of T steps is exactly the first T steps a twin
// batcher collects with Collect(T) (every worker stopped at the same step, the bootstrap
// observations and values those after step T), and both batchers go on alike afterwards.
func TestCollectPreemptible(t *testing.T) {
	ctx := context.Background()
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	const steps, minSteps = 40, 10
	for _, tc := range []struct {
		name   string
		stop   func(polls int64) bool
		lo, hi int // the range T must fall in
	}{
		{"never", func(int64) bool { return false }, steps, steps},
		{"at once", func(int64) bool { return true }, minSteps, minSteps},
		{"after 15 polls", func(n int64) bool { return n > 15 }, minSteps + 7, steps - 1},
		{"nil stop", nil, steps, steps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 3, Steps: steps, Seed: 7}
			a, b := newBatcher(t, cfg, p), newBatcher(t, cfg, p)
			var polls atomic.Int64
			pre := Preempt{MinSteps: minSteps}
			if tc.stop != nil {
				pre.Stop = func() bool { return tc.stop(polls.Add(1)) }
			}
			ra, err := a.CollectPreemptible(ctx, steps, pre)
			if err != nil {
				t.Fatal(err)
			}
			if ra.T < tc.lo || ra.T > tc.hi {
				t.Fatalf("T = %d after %d polls, want %d..%d", ra.T, polls.Load(), tc.lo, tc.hi)
			}
			rb, err := b.Collect(ctx, ra.T)
			if err != nil {
				t.Fatal(err)
			}
			samePrefix(t, ra, rb)
			if ra, err = a.Collect(ctx, steps); err != nil {
				t.Fatal(err)
			}
			if rb, err = b.Collect(ctx, steps); err != nil {
				t.Fatal(err)
			}
			samePrefix(t, ra, rb)
		})
	}
}

// samePrefix checks that a and b hold the same T steps of the same envs, bit for bit.
func samePrefix(t *testing.T, a, b *Rollout) {
	t.Helper()
	if a.T != b.T || a.N != b.N {
		t.Fatalf("T×N %d×%d vs %d×%d", a.T, a.N, b.T, b.N)
	}
	rows := a.T * a.N
	for _, c := range []struct {
		name string
		x, y []float32
	}{
		{"obs", a.Obs[:rows*a.ObsDim], b.Obs[:rows*b.ObsDim]},
		{"actions", a.Actions[:rows*a.ActDim], b.Actions[:rows*b.ActDim]},
		{"rewards", a.Rewards[:rows], b.Rewards[:rows]},
		{"terminated", a.Terminated[:rows], b.Terminated[:rows]},
		{"truncated", a.Truncated[:rows], b.Truncated[:rows]},
		{"logp", a.LogP[:rows], b.LogP[:rows]},
		{"values", a.Values[:rows], b.Values[:rows]},
		{"episode starts", a.EpisodeStarts[:rows], b.EpisodeStarts[:rows]},
		{"last obs", a.LastObs, b.LastObs},
		{"last values", a.LastValues, b.LastValues},
	} {
		if !slices.Equal(c.x, c.y) {
			t.Fatalf("%s differ over %d steps", c.name, a.T)
		}
	}
	if !slices.Equal(a.Episodes, b.Episodes) {
		t.Fatalf("episodes %v vs %v", a.Episodes, b.Episodes)
	}
}

// TestCollectPreemptibleAllocatesNothing: preemptible or not, preempted or not, Collect
// allocates nothing in steady state.
func TestCollectPreemptibleAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 64, Steps: 32}, p)
	var n atomic.Int64
	for _, pre := range []Preempt{
		{MinSteps: 8, Stop: func() bool { return false }},
		{MinSteps: 8, Stop: func() bool { return n.Add(1)%7 == 0 }},
	} {
		for range 20 { // let episode lists reach their steady capacity
			if _, err := b.CollectPreemptible(ctx, 32, pre); err != nil {
				t.Fatal(err)
			}
		}
		if a := testing.AllocsPerRun(10, func() {
			if _, err := b.CollectPreemptible(ctx, 32, pre); err != nil {
				t.Fatal(err)
			}
		}); a > 0 {
			t.Errorf("%v allocations per preemptible Collect of 32 steps × 128 envs", a)
		}
	}
}

// TestCollectPreemptibleRefusals: the lengths Collect refuses, CollectPreemptible refuses.
func TestCollectPreemptibleRefusals(t *testing.T) {
	b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), Workers: 1, EnvsPerWorker: 2, Steps: 8}, nil)
	stop := Preempt{Stop: func() bool { return true }}
	for _, steps := range []int{0, 9} {
		if _, err := b.CollectPreemptible(context.Background(), steps, stop); !errors.Is(err, ErrConfig) {
			t.Errorf("%d steps: %v, want ErrConfig", steps, err)
		}
	}
	r, err := b.CollectPreemptible(context.Background(), 8, Preempt{MinSteps: 100, Stop: func() bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if r.T != 8 {
		t.Errorf("MinSteps beyond the rollout: T = %d, want the whole rollout of 8", r.T)
	}
}

// TestSlowdownPaces: the Slowdown hook sleeps (Slowdown−1) times each step's duration, in
// sleeps of a millisecond or more, carrying what it overslept.
func TestSlowdownPaces(t *testing.T) {
	var w worker
	begin := time.Now()
	for range 10 {
		w.pace(3, 2*time.Millisecond) // 4 ms owed per step
	}
	took := time.Since(begin)
	if owed := 40 * time.Millisecond; took+w.slowDebt < owed-time.Millisecond || took > 25*owed {
		t.Errorf("slept %v with %v still owed, for 40 ms owed", took, w.slowDebt)
	}
	w = worker{}
	w.pace(1.25, 2*time.Millisecond) // 0.5 ms: owed, not slept yet
	if w.slowDebt != 500*time.Microsecond {
		t.Errorf("debt %v after a short step, want 500µs", w.slowDebt)
	}
}

package envs

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSnapshotResumesExactly: a VecEnv restored from a snapshot taken mid-run steps exactly as
// the original does afterwards (observations, rewards, flags, resets), for every environment.
func TestSnapshotResumesExactly(t *testing.T) {
	for _, id := range IDs() {
		t.Run(id, func(t *testing.T) {
			const n = 6
			a, err := Make(id, Config{NumEnvs: n, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Make(id, Config{NumEnvs: n, Seed: 1234}) // different seed: everything must come from the snapshot
			a.Reset()
			rng := rand.New(rand.NewPCG(1, 1))
			act := func() Actions {
				switch s := a.Spec().Action.(type) {
				case Discrete:
					d := make([]int, n)
					for i := range d {
						d[i] = rng.IntN(s.N)
					}
					return Actions{Discrete: d}
				case Box:
					x := make([]float32, n*s.Dim())
					for i := range x {
						x[i] = s.Low[i%s.Dim()] + float32(rng.Float64())*(s.High[i%s.Dim()]-s.Low[i%s.Dim()])
					}
					return Actions{Box: x}
				}
				return Actions{}
			}
			for range 150 {
				if err := a.Step(act()); err != nil {
					t.Fatal(err)
				}
			}
			snap, err := a.(Snapshotter).Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if err := b.(Snapshotter).Restore(snap); err != nil {
				t.Fatal(err)
			}
			for step := range 400 {
				x := act()
				if err := a.Step(x); err != nil {
					t.Fatal(err)
				}
				if err := b.Step(x); err != nil {
					t.Fatal(err)
				}
				ba, bb := a.Buffers(), b.Buffers()
				if !slices.Equal(ba.Obs, bb.Obs) || !slices.Equal(ba.Rewards, bb.Rewards) ||
					!slices.Equal(ba.Terminated, bb.Terminated) || !slices.Equal(ba.Truncated, bb.Truncated) {
					t.Fatalf("step %d after restoring: the copies diverge", step)
				}
			}
		})
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	a, _ := Make("CartPole-v1", Config{NumEnvs: 3})
	a.Reset()
	snap, _ := a.(Snapshotter).Snapshot()
	other, _ := Make("Pendulum-v1", Config{NumEnvs: 3})
	fewer, _ := Make("CartPole-v1", Config{NumEnvs: 2})
	for name, tc := range map[string]struct {
		env  VecEnv
		data []byte
	}{
		"other env": {other, snap}, "other size": {fewer, snap}, "truncated": {a, snap[:len(snap)-5]},
		"garbage": {a, []byte("hello")}, "empty": {a, nil},
	} {
		if err := tc.env.(Snapshotter).Restore(tc.data); !errors.Is(err, ErrSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

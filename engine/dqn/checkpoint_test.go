package dqn

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/engine/internal/offpolicy/offpolicytest"
	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/models"
)

// fill adds n one-env steps of CartPole-like transitions drawn from data to buf.
func fill(t *testing.T, buf *replay.Buffer, data *rand.Rand, n int) {
	t.Helper()
	for k := range n {
		obs, next := make([]float32, 4), make([]float32, 4)
		for i := range obs {
			obs[i], next[i] = float32(data.NormFloat64()), float32(data.NormFloat64())
		}
		term := float32(0)
		if k%9 == 8 {
			term = 1
		}
		err := buf.Add(obs, []float32{float32(data.IntN(2))}, []float32{1}, []float32{term}, []float32{0}, next, next)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestResumeBitIdentical: DQN's state, the replay buffer's snapshot and the sampling RNG,
// through the checkpoint file format, resume a run (in a DQN built from another seed) that
// then goes on exactly as the uninterrupted one, the target's hard copies (every 2 updates) at
// the same updates.
func TestResumeBitIdentical(t *testing.T) {
	cfg := Config{Hidden: []int{8, 8}, Minibatch: 8, Towers: 2, TargetEvery: 2, NoSpin: true}
	ctx := context.Background()
	steps := func(d *DQN, buf *replay.Buffer, rng *rand.Rand, n int) {
		batch := replay.NewBatch(cfg.Minibatch, 4, 1)
		for range n {
			if err := buf.Sample(rng, batch); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Update(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := New(cfg, 4, 2, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bcfg := replay.Config{Capacity: 25, ObsDim: 4, ActDim: 1}
	bufA, _ := replay.New(bcfg)
	fill(t, bufA, rand.New(rand.NewPCG(5, 5)), 20)
	srcA := rand.NewPCG(9, 9)
	steps(a, bufA, rand.New(srcA), 3) // the target last moved at update 2

	var ck models.Checkpoint
	if err := a.Store(&ck); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := bufA.WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	rngState, _ := srcA.MarshalBinary()
	ck.Bytes = map[string][]byte{"replay": snap.Bytes(), "rng/replay": rngState}
	file, err := ck.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	fill(t, bufA, rand.New(rand.NewPCG(6, 6)), 10)
	steps(a, bufA, rand.New(srcA), 4)

	var back models.Checkpoint
	if err := back.UnmarshalBinary(file); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, 4, 2, rand.New(rand.NewPCG(77, 77)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bufB, _ := replay.New(bcfg)
	srcB := rand.NewPCG(0, 0)
	_, rerr := bufB.ReadFrom(bytes.NewReader(back.Bytes["replay"]))
	if err := errors.Join(b.Load(&back), rerr, srcB.UnmarshalBinary(back.Bytes["rng/replay"])); err != nil {
		t.Fatal(err)
	}
	fill(t, bufB, rand.New(rand.NewPCG(6, 6)), 10)
	steps(b, bufB, rand.New(srcB), 4)

	for _, c := range [][2][]float32{{a.Params(), b.Params()}, {a.Target(), b.Target()},
		{a.Optimizer().State()["adam.m"], b.Optimizer().State()["adam.m"]}, {a.Optimizer().State()["adam.v"], b.Optimizer().State()["adam.v"]}} {
		if !slices.Equal(offpolicytest.Bits(c[0]), offpolicytest.Bits(c[1])) {
			t.Fatal("the resumed run differs from the uninterrupted one")
		}
	}
	if a.Updates() != 7 || b.Updates() != 7 || b.Optimizer().Steps() != 7 {
		t.Errorf("updates %d and %d, Adam steps %d; want 7", a.Updates(), b.Updates(), b.Optimizer().Steps())
	}
}

func TestLoadRefuses(t *testing.T) {
	a, _ := New(Config{Hidden: []int{8}, Minibatch: 4}, 4, 2, rand.New(rand.NewPCG(1, 1)))
	defer a.Close()
	b, _ := New(Config{Hidden: []int{8}, Minibatch: 4}, 4, 3, rand.New(rand.NewPCG(2, 2)))
	defer b.Close()
	var ck models.Checkpoint
	if err := a.Store(&ck); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(b.Params())
	if err := b.Load(&ck); err == nil || !strings.Contains(err.Error(), `"dqn.q" holds`) {
		t.Errorf("another network's checkpoint: %v", err)
	}
	if !slices.Equal(before, b.Params()) {
		t.Error("a refused Load wrote the parameters")
	}
	delete(ck.Ints, "dqn.updates")
	if err := a.Load(&ck); err == nil {
		t.Error("a checkpoint without its update count accepted")
	}
}

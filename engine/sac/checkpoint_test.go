package sac

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

// addTransitions adds n one-env steps drawn from data to buf (every fifth truncated, every
// seventh terminated).
func addTransitions(t *testing.T, buf *replay.Buffer, data *rand.Rand, n int) {
	t.Helper()
	c := buf.Config()
	for k := range n {
		obs, next, act := make([]float32, c.ObsDim), make([]float32, c.ObsDim), make([]float32, c.ActDim)
		for i := range obs {
			obs[i], next[i] = float32(data.NormFloat64()), float32(data.NormFloat64())
		}
		for i := range act {
			act[i] = float32(2*data.Float64() - 1)
		}
		term, trunc := float32(0), float32(0)
		if k%7 == 6 {
			term = 1
		}
		if k%5 == 4 {
			trunc = 1
		}
		if err := buf.Add(obs, act, []float32{float32(data.NormFloat64())}, []float32{term}, []float32{trunc}, next, next); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResumeBitIdentical: a run checkpointed after three updates (SAC's state, the replay
// buffer's snapshot and the sampling RNG, through the checkpoint file format) and resumed in a
// SAC built from another seed goes on exactly as the run never stopped: after three more
// updates, with more transitions added, every tensor and count has the same bits. With gSDE
// too, the acting W drawn before each update as the loop draws it at each collection.
func TestResumeBitIdentical(t *testing.T) {
	for _, sde := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gSDE"}[sde], func(t *testing.T) {
			resumeBitIdentical(t, Config{Hidden: []int{8, 8}, Minibatch: 8, Towers: 2, NoSpin: true, UseSDE: sde})
		})
	}
}

func resumeBitIdentical(t *testing.T, cfg Config) {
	bcfg := replay.Config{Capacity: 30, ObsDim: 3, ActDim: 2}
	ctx := context.Background()
	steps := func(s *SAC, buf *replay.Buffer, rng *rand.Rand, n int) {
		batch := replay.NewBatch(cfg.Minibatch, 3, 2)
		for range n {
			s.ResampleActingNoise(rng)
			if err := buf.Sample(rng, batch); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Update(ctx, batch, rng); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, err := New(cfg, 3, 2, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bufA, _ := replay.New(bcfg)
	addTransitions(t, bufA, rand.New(rand.NewPCG(5, 5)), 20)
	srcA := rand.NewPCG(9, 9)
	steps(a, bufA, rand.New(srcA), 3)

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

	// The run goes on.
	more := rand.New(rand.NewPCG(6, 6))
	addTransitions(t, bufA, more, 15) // wraps the ring
	steps(a, bufA, rand.New(srcA), 3)

	// The resumed one.
	var back models.Checkpoint
	if err := back.UnmarshalBinary(file); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, 3, 2, rand.New(rand.NewPCG(77, 77)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Load(&back); err != nil {
		t.Fatal(err)
	}
	bufB, _ := replay.New(bcfg)
	if _, err := bufB.ReadFrom(bytes.NewReader(back.Bytes["replay"])); err != nil {
		t.Fatal(err)
	}
	srcB := rand.NewPCG(0, 0)
	if err := srcB.UnmarshalBinary(back.Bytes["rng/replay"]); err != nil {
		t.Fatal(err)
	}
	addTransitions(t, bufB, rand.New(rand.NewPCG(6, 6)), 15)
	steps(b, bufB, rand.New(srcB), 3)

	var endA, endB models.Checkpoint
	if err := errors.Join(a.Store(&endA), b.Store(&endB)); err != nil {
		t.Fatal(err)
	}
	for i, ta := range endA.Tensors {
		tb := endB.Tensors[i]
		if ta.Name != tb.Name || !slices.Equal(offpolicytest.Bits(ta.Data), offpolicytest.Bits(tb.Data)) {
			t.Errorf("%s differs between the run and its resumed twin", ta.Name)
		}
	}
	for k, v := range endA.Ints {
		if endB.Ints[k] != v {
			t.Errorf("%s: %d, resumed %d", k, v, endB.Ints[k])
		}
	}
	if endA.Ints["sac.updates"] != 6 || endA.Ints["sac.critic.adam_steps"] != 6 {
		t.Errorf("counts %v, want 6 updates", endA.Ints)
	}
	if _, ok := endA.Tensor("sac.sde_acting_w"); ok != cfg.UseSDE {
		t.Errorf("the checkpoint holds gSDE's acting W: %v, with gSDE %v", ok, cfg.UseSDE)
	}
}

func TestLoadRefuses(t *testing.T) {
	a, _ := New(Config{Hidden: []int{8}, Minibatch: 4}, 3, 2, rand.New(rand.NewPCG(1, 1)))
	defer a.Close()
	b, _ := New(Config{Hidden: []int{9}, Minibatch: 4}, 3, 2, rand.New(rand.NewPCG(2, 2)))
	defer b.Close()
	var ck models.Checkpoint
	if err := a.Store(&ck); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(b.ActorParams())
	if err := b.Load(&ck); err == nil || !strings.Contains(err.Error(), `"sac.actor" holds`) {
		t.Errorf("another network's checkpoint: %v", err)
	}
	if !slices.Equal(before, b.ActorParams()) {
		t.Error("a refused Load wrote the actor")
	}
	delete(ck.Ints, "sac.updates")
	if err := a.Load(&ck); err == nil {
		t.Error("a checkpoint without its update count accepted")
	}
}

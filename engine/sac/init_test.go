package sac

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/engine/replay"
)

// TestWarmUpdate: StartActor sets the actor (and refuses another size); WarmUpdate moves the
// critics and their targets, counts an update, holds the actor, log α and the actor's
// optimiser, and draws as much noise as Update, so the stream after it is the same; with gSDE
// it is refused.
func TestWarmUpdate(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Hidden: []int{8, 8}, Minibatch: 4}
	s, err := New(cfg, 3, 2, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := make([]float32, len(s.ActorParams()))
	for i := range start {
		start[i] = float32(i%11)/10 - 0.5
	}
	if err := s.StartActor(start[1:]); !errors.Is(err, ErrConfig) {
		t.Fatalf("StartActor of one value too few: %v", err)
	}
	if err := s.StartActor(start); err != nil || !slices.Equal(s.ActorParams(), start) {
		t.Fatalf("StartActor: %v", err)
	}
	buf, _ := replay.New(replay.Config{Capacity: 30, ObsDim: 3, ActDim: 2})
	addTransitions(t, buf, rand.New(rand.NewPCG(5, 5)), 20)
	b := replay.NewBatch(cfg.Minibatch, 3, 2)
	if err := buf.Sample(rand.New(rand.NewPCG(2, 2)), b); err != nil {
		t.Fatal(err)
	}
	critic, alpha := slices.Clone(s.CriticParams()), s.LogAlpha()[0]
	warm, plain := rand.New(rand.NewPCG(3, 3)), rand.New(rand.NewPCG(3, 3))
	for k := range 3 {
		if _, err := s.WarmUpdate(ctx, b, warm); err != nil {
			t.Fatal(err)
		}
		for range 2 * cfg.Minibatch * 2 { // ε′ and ε, as Update draws them
			plain.NormFloat64()
		}
		if s.Updates() != int64(k+1) {
			t.Fatalf("%d updates after %d warm-up updates", s.Updates(), k+1)
		}
	}
	actorOpt, _, _ := s.Optimizers()
	if !slices.Equal(s.ActorParams(), start) || s.LogAlpha()[0] != alpha || actorOpt.Steps() != 0 {
		t.Fatal("the warm-up moved the actor, α or the actor's optimiser")
	}
	if slices.Equal(s.CriticParams(), critic) {
		t.Fatal("the warm-up did not move the critics")
	}
	if warm.Uint64() != plain.Uint64() {
		t.Fatal("the warm-up drew another amount of noise than Update")
	}
	g, err := New(Config{Hidden: []int{8, 8}, Minibatch: 4, UseSDE: true}, 3, 2, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.WarmUpdate(ctx, b, warm); !errors.Is(err, ErrConfig) {
		t.Fatalf("WarmUpdate with gSDE: %v", err)
	}
}

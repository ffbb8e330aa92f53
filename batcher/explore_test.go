package batcher

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/sac"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
)

// TestPublishExplore: an exploration rate published with the weights replaces the policy's
// own — a greedy Q-network (ε = 0 in its metadata) acts uniformly at ε = 1 (every
// log-probability log(1/3)) and greedily again at ε = 0; a SAC actor at ε = 1 takes actions
// uniform over Pendulum's [−2, 2] (mean 0, standard deviation 4/√12 within sampling error),
// each raw action the atanh of the squashed one; a rate outside [0, 1] is refused.
func TestPublishExplore(t *testing.T) {
	ctx := context.Background()
	acro, d := acrobotDQN(t)
	model, err := d.Export(head.Spec{EnvID: acro.ID, ObsShape: []int{6}, N: 3}, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	layout := d.Net().PublishLayout("q")
	p, err := bind.New(ctx, model, 1, acro, bind.Config{Publish: layout})
	if err != nil {
		t.Fatal(err)
	}
	const n, steps = 8, 50
	b := newBatcher(t, Config{Env: acro, EnvsPerWorker: n, Steps: steps, Seed: 3}, p)
	if err := b.PublishExplore(ctx, 2, d.Params(), 1); err != nil {
		t.Fatal(err)
	}
	r, err := b.Collect(ctx, steps)
	if err != nil {
		t.Fatal(err)
	}
	var count [3]int
	for i, a := range r.Actions {
		count[int(a)]++
		if math.Abs(float64(r.LogP[i])-math.Log(1.0/3)) > 1e-6 || r.Version[i] != 2 {
			t.Fatalf("ε = 1, row %d: log-probability %v, version %d; want log(1/3), 2", i, r.LogP[i], r.Version[i])
		}
	}
	for k, c := range count { // 400 draws: each action 133 ± 5·9.4
		if c < 86 || c > 180 {
			t.Fatalf("ε = 1: action %d drawn %d times of 400", k, c)
		}
	}
	if err := b.PublishExplore(ctx, 3, d.Params(), 0); err != nil {
		t.Fatal(err)
	}
	if r, err = b.Collect(ctx, steps); err != nil {
		t.Fatal(err)
	}
	for i := range r.LogP {
		if r.LogP[i] != 0 {
			t.Fatalf("ε = 0, row %d: log-probability %v, want 0 (greedy)", i, r.LogP[i])
		}
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if err := b.PublishExplore(ctx, 4, d.Params(), bad); err == nil {
			t.Fatalf("ε = %v was accepted", bad)
		}
	}

	pend, err := envs.Lookup("Pendulum-v1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sac.New(sac.Config{Hidden: []int{16}, Minibatch: 4}, 3, 1, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	actor, err := s.ExportActor(head.Spec{EnvID: pend.ID, ObsShape: []int{3}, Low: []float32{-2}, High: []float32{2}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := bind.New(ctx, actor, 1, pend, bind.Config{Publish: s.Actor().PublishLayout("actor")})
	if err != nil {
		t.Fatal(err)
	}
	sb := newBatcher(t, Config{Env: pend, EnvsPerWorker: n, Steps: steps, Seed: 3}, ps)
	if err := sb.PublishExplore(ctx, 2, s.ActorParams(), 1); err != nil {
		t.Fatal(err)
	}
	if r, err = sb.Collect(ctx, steps); err != nil {
		t.Fatal(err)
	}
	var sum, sq float64
	for i, x := range r.EnvActions {
		if x < -2 || x > 2 || math.Abs(2*math.Tanh(float64(r.Actions[i]))-float64(x)) > 1e-4 {
			t.Fatalf("row %d: env action %v from raw %v, want 2·tanh(raw) within [−2, 2]", i, x, r.Actions[i])
		}
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	m := sum / float64(len(r.EnvActions))
	sd := math.Sqrt(sq/float64(len(r.EnvActions)) - m*m)
	if want := 4 / math.Sqrt(12); math.Abs(m) > 0.25 || math.Abs(sd-want) > 0.15 {
		t.Fatalf("ε = 1: env actions of mean %.3f and standard deviation %.3f, want 0 and %.3f (uniform on [−2, 2])", m, sd, want)
	}
}

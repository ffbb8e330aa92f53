package batcher

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/dqn"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
)

// TestQValuesPolicy: a DQN's exported Q-network (the qvalues head) is bound with no flags; the
// batcher acts ε-greedily with the ε in its metadata — with ε = 0 every action is the greedy
// one of the recorded observation's Q-values (worked out in Go) with log-probability 0, with
// ε = 1 the actions are uniform and every log-probability is log(1/N) — and Evaluate plays it
// greedily whatever its ε.
func TestQValuesPolicy(t *testing.T) {
	ctx := context.Background()
	env, d := acrobotDQN(t)
	spec := head.Spec{EnvID: env.ID, ObsShape: []int{6}, N: 3}
	load := func(eps float64) *bind.Policy {
		model, err := d.Export(spec, eps, 1)
		if err != nil {
			t.Fatal(err)
		}
		p, err := bind.New(ctx, model, 1, env, bind.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec().Head != head.QValuesKind || p.Spec().Epsilon != eps {
			t.Fatalf("bound %+v", p.Spec())
		}
		return p
	}
	const n, steps = 8, 50
	greedy := newBatcher(t, Config{Env: env, EnvsPerWorker: n, Steps: steps, Seed: 3}, load(0))
	r, err := greedy.Collect(ctx, steps)
	if err != nil {
		t.Fatal(err)
	}
	w := d.Net().NewWork(steps * n)
	copy(w.In(), r.Obs)
	d.Net().Forward(d.Params(), w)
	for i := range steps * n {
		q := w.Out()[i*3 : i*3+3]
		best := 0
		for k := range q {
			if q[k] > q[best] {
				best = k
			}
		}
		if int(r.Actions[i]) != best || r.LogP[i] != 0 {
			t.Fatalf("ε = 0, row %d: action %v (log-probability %v), the greedy action of Q-values %v is %d", i, r.Actions[i], r.LogP[i], q, best)
		}
	}

	uniform := newBatcher(t, Config{Env: env, EnvsPerWorker: n, Steps: steps, Seed: 3}, load(1))
	if r, err = uniform.Collect(ctx, steps); err != nil {
		t.Fatal(err)
	}
	var count [3]int
	for i, a := range r.Actions {
		count[int(a)]++
		if math.Abs(float64(r.LogP[i])-math.Log(1.0/3)) > 1e-6 {
			t.Fatalf("ε = 1, row %d: log-probability %v, want log(1/3)", i, r.LogP[i])
		}
	}
	for k, c := range count { // 400 draws: each action 133 ± 5·9.4
		if c < 86 || c > 180 {
			t.Errorf("ε = 1: action %d drawn %d times of 400", k, c)
		}
	}

	a, err := Evaluate(ctx, EvalConfig{Env: env, Episodes: 2, Seed: 9, Deterministic: true}, load(1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Evaluate(ctx, EvalConfig{Env: env, Episodes: 2, Seed: 9, Deterministic: true}, load(0))
	if err != nil {
		t.Fatal(err)
	}
	if a.ReturnMean != b.ReturnMean || a.LengthMean != b.LengthMean {
		t.Errorf("greedy evaluation with ε = 1 in the metadata: %v over %v steps, with ε = 0: %v over %v", a.ReturnMean, a.LengthMean, b.ReturnMean, b.LengthMean)
	}
}

// acrobotDQN is Acrobot-v1's spec and a DQN of one hidden layer of 16 for it (6 observations,
// 3 actions), closed when t ends.
func acrobotDQN(t *testing.T) (envs.Spec, *dqn.DQN) {
	t.Helper()
	env, err := envs.Lookup("Acrobot-v1")
	if err != nil {
		t.Fatal(err)
	}
	d, err := dqn.New(dqn.Config{Hidden: []int{16}, Minibatch: 4}, 6, 3, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return env, d
}

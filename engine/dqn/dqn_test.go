package dqn

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/internal/offpolicy/offpolicytest"
	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/learner"
)

// fixture is a case of scripts/gen_fixtures_offpolicy.py: PyTorch's DQN updates in float64.
type fixture struct {
	ObsDim      int       `json:"obs_dim"`
	Actions     int       `json:"actions"`
	Hidden      []int     `json:"hidden"`
	Act         string    `json:"act"`
	Batch       int       `json:"batch"`
	Gamma       float64   `json:"gamma"`
	LR          float64   `json:"lr"`
	MaxGradNorm float64   `json:"max_grad_norm"`
	TargetEvery int       `json:"target_every"`
	Tau         float64   `json:"tau"`
	Vanilla     bool      `json:"vanilla"`
	Params      []float32 `json:"params"`
	Updates     []struct {
		Obs, NextObs, Actions, Rewards, Terminated []float32
		Loss, Q, GradNorm                          float64
		Grad, Params, Target                       []float64
	} `json:"updates"`
}

func (f *fixture) UnmarshalJSON(b []byte) error {
	type plain fixture
	var raw struct {
		plain
		Updates []map[string]json.RawMessage `json:"updates"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*f = fixture(raw.plain)
	f.Updates = make([]struct {
		Obs, NextObs, Actions, Rewards, Terminated []float32
		Loss, Q, GradNorm                          float64
		Grad, Params, Target                       []float64
	}, len(raw.Updates))
	for i, u := range raw.Updates {
		d := &f.Updates[i]
		for key, dst := range map[string]any{"obs": &d.Obs, "next_obs": &d.NextObs, "actions": &d.Actions, "rewards": &d.Rewards,
			"terminated": &d.Terminated, "loss": &d.Loss, "q": &d.Q, "grad_norm": &d.GradNorm, "grad": &d.Grad,
			"params": &d.Params, "target": &d.Target} {
			if err := json.Unmarshal(u[key], dst); err != nil {
				return fmt.Errorf("update %d's %s: %w", i, key, err)
			}
		}
	}
	return nil
}

// TestAgainstPyTorch runs each fixture's updates on one and two towers: every update's loss,
// mean Q, gradient (one tower over the whole minibatch, before clipping) and gradient norm,
// the parameters after clipping and Adam's step, and the target network after its update
// (hard every 2 updates; Polyak τ = 0.1 every update) match PyTorch's within 1e-5 of the
// largest value.
func TestAgainstPyTorch(t *testing.T) {
	for _, name := range []string{"dqn_double", "dqn_vanilla"} {
		f := &fixture{}
		offpolicytest.Load(t, name, f)
		for _, towers := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d towers", name, towers), func(t *testing.T) {
				act := kernels.ReLU
				if f.Act == "tanh" {
					act = kernels.Tanh
				}
				d, err := New(Config{Hidden: f.Hidden, Act: act, Gamma: f.Gamma, LR: f.LR, MaxGradNorm: f.MaxGradNorm,
					TargetEvery: f.TargetEvery, Tau: f.Tau, Vanilla: f.Vanilla, Minibatch: f.Batch, Towers: towers, NoSpin: true},
					f.ObsDim, f.Actions, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				copy(d.Params(), f.Params)
				copy(d.Target(), f.Params)
				// One tower over the whole minibatch, for the gradient before clipping.
				whole, err := d.tower(0, device.CPU(), f.Batch, d.Params())
				if err != nil {
					t.Fatal(err)
				}
				grad, stats := make([]float32, len(d.Params())), make([]float64, len(StatNames))
				var worst float64
				for k, u := range f.Updates {
					b := &replay.Batch{ObsDim: f.ObsDim, ActDim: 1, Obs: u.Obs, NextObs: u.NextObs, Actions: u.Actions,
						Rewards: u.Rewards, Terminated: u.Terminated, Truncated: make([]float32, f.Batch)}
					pack(d.mb, b)
					if err := whole.Grad(d.mb, grad, stats); err != nil {
						t.Fatal(err)
					}
					worst = max(worst, offpolicytest.Near(t, fmt.Sprintf("update %d: gradient", k), grad, u.Grad, 1e-5))
					offpolicytest.NearScalar(t, fmt.Sprintf("update %d: loss", k), stats[0], u.Loss, 1e-5)
					st, err := d.Update(context.Background(), b)
					if err != nil {
						t.Fatal(err)
					}
					offpolicytest.NearScalar(t, fmt.Sprintf("update %d: loss", k), st.Loss, u.Loss, 1e-5)
					offpolicytest.NearScalar(t, fmt.Sprintf("update %d: mean Q", k), st.Q, u.Q, 1e-5)
					offpolicytest.NearScalar(t, fmt.Sprintf("update %d: gradient norm", k), st.GradNorm, u.GradNorm, 1e-5)
					worst = max(worst, offpolicytest.Near(t, fmt.Sprintf("update %d: parameters", k), d.Params(), u.Params, 1e-5))
					worst = max(worst, offpolicytest.Near(t, fmt.Sprintf("update %d: target", k), d.Target(), u.Target, 1e-5))
					if want := (k+1)%f.TargetEvery == 0; st.TargetUpdated != want {
						t.Errorf("update %d: target updated %v, want %v", k, st.TargetUpdated, want)
					}
				}
				t.Logf("largest difference from PyTorch: %.2g of the largest value", worst)
			})
		}
	}
}

// TestHuberHandWorked: a Q-network of no hidden layer and zero weights but the biases
// (Q(s, ·) = b = [1, −2]), γ = 0.5, and two rows: action 0, reward 0.2, not terminated,
// so y = 0.2 + 0.5·Q_target(s′, argmax Q(s′)) = 0.2 + 0.5·1 = 0.7, d = 1 − 0.7 = 0.3 in the
// quadratic part (0.045, slope 0.3); action 1, reward 3, terminated, so y = 3, d = −5 in the
// linear part (4.5, slope −1). Loss (0.045 + 4.5)/2 = 2.2725; ∂loss/∂b = [0.15, −0.5].
func TestHuberHandWorked(t *testing.T) {
	d, err := New(Config{Hidden: []int{}, Gamma: 0.5, Minibatch: 2}, 1, 2, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := d.Params() // W [1, 2], b [2]
	copy(p, []float32{0, 0, 1, -2})
	copy(d.Target(), p)
	tw, _ := d.tower(0, device.CPU(), 2, p)
	b := &replay.Batch{ObsDim: 1, ActDim: 1, Obs: []float32{0, 0}, NextObs: []float32{0, 0}, Actions: []float32{0, 1},
		Rewards: []float32{0.2, 3}, Terminated: []float32{0, 1}, Truncated: []float32{0, 0}}
	pack(d.mb, b)
	grad, stats := make([]float32, 4), make([]float64, 2)
	if err := tw.Grad(d.mb, grad, stats); err != nil {
		t.Fatal(err)
	}
	offpolicytest.NearScalar(t, "loss", stats[0], 2.2725, 1e-7)
	offpolicytest.NearScalar(t, "mean Q", stats[1], -0.5, 1e-7)
	offpolicytest.Near(t, "gradient", grad, []float64{0, 0, 0.15, -0.5}, 1e-7)
}

func TestRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []Config{{Gamma: 2}, {LR: -1}, {Tau: 1.5}, {TargetEvery: -1}, {Minibatch: 10, Towers: 3}, {Hidden: []int{0}}, {Hidden: []int{1 << 30, 1 << 30}}, {Minibatch: 1 << 40}} {
		if d, err := New(c, 4, 2, rng); err == nil {
			d.Close()
			t.Errorf("%+v accepted", c)
		}
	}
	d, err := New(Config{Minibatch: 2}, 1, 2, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := replay.NewBatch(2, 1, 1)
	b.Actions[1] = 2 // of two actions
	if _, err := d.Update(context.Background(), b); err == nil {
		t.Error("an action out of range accepted")
	}
	b.Actions[1] = 0.5
	if _, err := d.Update(context.Background(), b); err == nil {
		t.Error("a fractional action accepted")
	}
	b.Actions[1], b.Rewards[0] = 1, float32(math.Inf(1))
	if _, err := d.Update(context.Background(), b); err == nil {
		t.Error("an infinite reward accepted")
	}
	if _, err := d.Update(context.Background(), replay.NewBatch(3, 1, 1)); err == nil {
		t.Error("a batch of 3 rows for a minibatch of 2 accepted")
	}
	if d.Updates() != 0 {
		t.Errorf("%d updates counted after refusals", d.Updates())
	}
}

var _ learner.Tower = (*tower)(nil)

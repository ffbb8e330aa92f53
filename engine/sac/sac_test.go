package sac

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/internal/offpolicy/offpolicytest"
	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/internal/kernels"
)

// fixture is a case of scripts/gen_fixtures_offpolicy.py: PyTorch's SAC updates in float64.
type fixture struct {
	ObsDim      int       `json:"obs_dim"`
	ActDim      int       `json:"act_dim"`
	Hidden      []int     `json:"hidden"`
	Act         string    `json:"act"`
	Batch       int       `json:"batch"`
	Gamma       float64   `json:"gamma"`
	LR          float64   `json:"lr"`
	Tau         float64   `json:"tau"`
	TargetEvery int       `json:"target_every"`
	LogStd      string    `json:"log_std"`
	LogStdMin   float64   `json:"log_std_min"`
	LogStdMax   float64   `json:"log_std_max"`
	InitAlpha   float64   `json:"init_alpha"`
	SDE         bool      `json:"sde"` // gSDE (sac_sde)
	LogStdInit  float64   `json:"log_std_init"`
	ClipMean    float64   `json:"clip_mean"`
	Actor       []float32 `json:"actor"`
	Critic      []float32 `json:"critic"`
	Updates     []update  `json:"updates"`
}

type update struct {
	Obs        []float32 `json:"obs"`
	NextObs    []float32 `json:"next_obs"`
	Actions    []float32 `json:"actions"`
	Rewards    []float32 `json:"rewards"`
	Terminated []float32 `json:"terminated"`
	Eps        []float32 `json:"eps"`
	EpsNext    []float32 `json:"eps_next"`
	EpsW       []float32 `json:"eps_w"` // gSDE's ε_W, features × actions

	Alpha      float64   `json:"alpha"`
	CriticLoss float64   `json:"critic_loss"`
	Q1         float64   `json:"q1"`
	Q2         float64   `json:"q2"`
	CriticGrad []float64 `json:"critic_grad"`
	Critic     []float64 `json:"critic"`
	Target     []float64 `json:"target"`
	ActorLoss  float64   `json:"actor_loss"`
	LogP       float64   `json:"logp"`
	ActorGrad  []float64 `json:"actor_grad"`
	ActorP     []float64 `json:"actor"`
	AlphaLoss  float64   `json:"alpha_loss"`
	LogAlpha   float64   `json:"log_alpha"`
}

func (f *fixture) config(towers int) Config {
	c := Config{Hidden: f.Hidden, Act: kernels.ReLU, Gamma: f.Gamma, Tau: f.Tau, TargetEvery: f.TargetEvery, LR: f.LR,
		LogStdMin: f.LogStdMin, LogStdMax: f.LogStdMax, InitAlpha: f.InitAlpha, Minibatch: f.Batch, Towers: towers, NoSpin: true}
	if f.Act == "tanh" {
		c.Act = kernels.Tanh
	}
	if f.LogStd == "tanh" {
		c.LogStd = Tanh
	}
	if f.SDE {
		c.UseSDE, c.LogStdInit, c.ClipMean, c.LogStdMin, c.LogStdMax = true, f.LogStdInit, f.ClipMean, 0, 0
	}
	return c
}

// fill writes u's minibatch and noise into s's towers' batch and returns the minibatch.
func fill(s *SAC, f *fixture, u *update) *replay.Batch {
	a := f.ActDim
	for k, e := range u.EpsW {
		s.sde.eps[k] = float64(e)
	}
	for i := 0; u.Eps != nil && i < f.Batch; i++ {
		copy(s.mb.Actions[i*3*a+a:i*3*a+2*a], u.Eps[i*a:(i+1)*a])
		copy(s.mb.Actions[i*3*a+2*a:(i+1)*3*a], u.EpsNext[i*a:(i+1)*a])
	}
	return &replay.Batch{ObsDim: f.ObsDim, ActDim: a, Obs: u.Obs, NextObs: u.NextObs, Actions: u.Actions,
		Rewards: u.Rewards, Terminated: u.Terminated, Truncated: make([]float32, f.Batch)}
}

// TestAgainstPyTorch runs each fixture's three updates (SB3's SAC step, the log std clamped
// to [−0.3, 0.2] so that the clamp bites, or squashed by tanh into CleanRL's [−5, 2]; or with
// gSDE, its log σ matrix from −1 and the mean clipped at ±0.15) with PyTorch's noise, step by step on one tower and through update on two: the critics' loss,
// mean Q-values and gradient, the actor's loss, mean log π and gradient (through the updated
// critics), α's loss, the three Adam steps and the critics' targets (Polyak every update with
// τ = 0.1, every second with τ = 0.5) match PyTorch's within 1e-5 of the largest value.
func TestAgainstPyTorch(t *testing.T) {
	for _, name := range []string{"sac_clamp", "sac_tanh", "sac_sde"} {
		f := &fixture{}
		offpolicytest.Load(t, name, f)
		for _, towers := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/%d towers", name, towers), func(t *testing.T) {
				s, err := New(f.config(towers), f.ObsDim, f.ActDim, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				copy(s.ActorParams(), f.Actor)
				copy(s.CriticParams(), f.Critic)
				copy(s.TargetParams(), f.Critic)
				critic, err := s.criticTower(0, device.CPU(), f.Batch, s.CriticParams())
				if err != nil {
					t.Fatal(err)
				}
				actor, err := s.actorTower(0, device.CPU(), f.Batch, s.ActorParams())
				if err != nil {
					t.Fatal(err)
				}
				cg, ag := make([]float32, len(s.CriticParams())), make([]float32, len(s.ActorParams()))
				cst, ast := make([]float64, len(CriticStatNames)), make([]float64, len(ActorStatNames))
				var worst float64
				for k := range f.Updates {
					u := &f.Updates[k]
					at := func(what string) string { return fmt.Sprintf("update %d: %s", k, what) }
					b := fill(s, f, u)
					var st Stats
					if towers == 1 {
						// Step by step, with each step's gradient on one tower of the whole
						// minibatch: the critics' before their step, the actor's after it.
						ctx := context.Background()
						s.pack(b)
						if err := critic.Grad(s.mb, cg, cst); err != nil {
							t.Fatal(err)
						}
						worst = max(worst, offpolicytest.Near(t, at("critics' gradient"), cg, u.CriticGrad, 1e-5))
						if err := s.criticStep(ctx, &st); err != nil {
							t.Fatal(err)
						}
						if err := actor.Grad(s.mb, ag, ast); err != nil {
							t.Fatal(err)
						}
						worst = max(worst, offpolicytest.Near(t, at("actor's gradient"), ag, u.ActorGrad, 1e-5))
						if err := errors.Join(s.actorStep(ctx, &st), s.alphaStep(&st)); err != nil {
							t.Fatal(err)
						}
						s.targetStep(&st)
					} else if st, err = s.update(context.Background(), b); err != nil {
						t.Fatal(err)
					}
					offpolicytest.NearScalar(t, at("α"), st.Alpha, u.Alpha, 1e-6)
					offpolicytest.NearScalar(t, at("critic loss"), st.CriticLoss, u.CriticLoss, 1e-5)
					offpolicytest.NearScalar(t, at("mean Q1"), st.Q1, u.Q1, 1e-5)
					offpolicytest.NearScalar(t, at("mean Q2"), st.Q2, u.Q2, 1e-5)
					// The critics' loss is ½(MSE₁ + MSE₂), CleanRL's qf_loss of its qf1_loss and qf2_loss.
					offpolicytest.NearScalar(t, at("½(Q1 loss + Q2 loss)"), (st.Q1Loss+st.Q2Loss)/2, u.CriticLoss, 1e-5)
					if !(st.Q1Loss > 0 && st.Q2Loss > 0) || st.Q1Loss == st.Q2Loss {
						t.Errorf("update %d: the critics' errors %v and %v, want two different positive values", k, st.Q1Loss, st.Q2Loss)
					}
					offpolicytest.NearScalar(t, at("actor loss"), st.ActorLoss, u.ActorLoss, 1e-5)
					offpolicytest.NearScalar(t, at("mean log π"), st.LogP, u.LogP, 1e-5)
					offpolicytest.NearScalar(t, at("α's loss"), st.AlphaLoss, u.AlphaLoss, 1e-5)
					offpolicytest.NearScalar(t, at("log α"), float64(s.LogAlpha()[0]), u.LogAlpha, 1e-5)
					worst = max(worst, offpolicytest.Near(t, at("critics"), s.CriticParams(), u.Critic, 1e-5))
					worst = max(worst, offpolicytest.Near(t, at("targets"), s.TargetParams(), u.Target, 1e-5))
					worst = max(worst, offpolicytest.Near(t, at("actor"), s.ActorParams(), u.ActorP, 1e-5))
					if want := (k+1)%f.TargetEvery == 0; st.TargetUpdated != want {
						t.Errorf("update %d: targets updated %v, want %v", k, st.TargetUpdated, want)
					}
				}
				t.Logf("largest difference from PyTorch: %.2g of the largest value", worst)
			})
		}
	}
}

// TestHeadHandWorked: one action dimension, μ = 0.5, raw log std ln 2 (σ = 2, inside the
// clamp), ε = −0.25: u = 0.5 − 0.5 = 0, a = tanh 0 = 0, log π = −ε²/2 − ln σ − ½ln 2π −
// ln(1 + 10⁻⁶). With ∂loss/∂a = 3 and ∂loss/∂log π = 0.5: ∂/∂u = 3·(1 − 0) + 0.5·0 = 3,
// ∂/∂μ = 3, ∂/∂raw = 3·σε − 0.5 = −1.5 − 0.5 = −2. Past the clamp (raw 3 > 2) no gradient
// reaches raw, and log σ is 2.
func TestHeadHandWorked(t *testing.T) {
	h := newHead(&Config{LogStd: Clamp, LogStdMin: -20, LogStdMax: 2}, 1, 1)
	a := make([]float32, 1)
	logp := h.sample(0, []float32{0.5, float32(math.Log(2))}, []float32{-0.25}, a)
	want := -0.25*0.25/2 - math.Log(2) - 0.5*math.Log(2*math.Pi) - math.Log(1+1e-6)
	if math.Abs(float64(a[0])) > 1e-8 || math.Abs(logp-want) > 1e-7 {
		t.Errorf("a = %v, log π = %v; want 0, %v", a[0], logp, want)
	}
	d := make([]float32, 2)
	h.backward(0, 0.5, []float64{3}, d)
	if math.Abs(float64(d[0])-3) > 1e-6 || math.Abs(float64(d[1])+2) > 1e-6 {
		t.Errorf("∂/∂(μ, raw) = %v, want [3 −2]", d)
	}
	logp = h.sample(0, []float32{0.5, 3}, []float32{0}, a)
	if want := -2 - 0.5*math.Log(2*math.Pi) - math.Log(1-math.Pow(math.Tanh(0.5), 2)+1e-6); math.Abs(logp-want) > 1e-7 {
		t.Errorf("clamped: log π = %v, want %v", logp, want)
	}
	h.backward(0, 0.5, []float64{3}, d)
	if d[1] != 0 {
		t.Errorf("clamped: ∂/∂raw = %v, want 0", d[1])
	}
}

// TestUpdateDeterministic: two SACs from one seed, fed the same batches and noise seeds, hold
// the same bits after three updates (two towers each); α moves, and the targets follow.
func TestUpdateDeterministic(t *testing.T) {
	run := func() *SAC {
		s, err := New(Config{Hidden: []int{8, 8}, Minibatch: 8, Towers: 2, NoSpin: true}, 3, 2, rand.New(rand.NewPCG(7, 7)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		data, noise := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(3, 4))
		b := replay.NewBatch(8, 3, 2)
		for range 3 {
			for _, col := range [][]float32{b.Obs, b.NextObs, b.Actions, b.Rewards} {
				for i := range col {
					col[i] = float32(data.NormFloat64())
				}
			}
			if _, err := s.Update(context.Background(), b, noise); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	a, b := run(), run()
	for _, c := range [][2][]float32{{a.ActorParams(), b.ActorParams()}, {a.CriticParams(), b.CriticParams()},
		{a.TargetParams(), b.TargetParams()}, {a.LogAlpha(), b.LogAlpha()}} {
		if !slices.Equal(c[0], c[1]) {
			t.Fatal("two runs from the same seeds differ")
		}
	}
	if a.LogAlpha()[0] == 0 || slices.Equal(a.TargetParams(), a.CriticParams()) {
		t.Errorf("log α %v after three updates; targets equal to the critics: %v", a.LogAlpha()[0], slices.Equal(a.TargetParams(), a.CriticParams()))
	}
}

func TestRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []Config{{Gamma: -1}, {Tau: 2}, {LR: -1}, {LogStd: 7}, {LogStdMin: 3}, {InitAlpha: -1},
		{TargetEntropy: math.NaN()}, {Minibatch: 10, Towers: 4}, {Hidden: []int{-1}}, {Hidden: []int{1 << 30, 1 << 30}},
		{Minibatch: 1 << 40}} {
		if s, err := New(c, 3, 2, rng); err == nil {
			s.Close()
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := New(Config{}, 3, 0, rng); err == nil {
		t.Error("no action dimensions accepted")
	}
	s, err := New(Config{Hidden: []int{4}, Minibatch: 2}, 3, 2, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Update(context.Background(), replay.NewBatch(3, 3, 2), rng); err == nil {
		t.Error("a batch of 3 rows for a minibatch of 2 accepted")
	}
	if _, err := s.Update(context.Background(), replay.NewBatch(2, 3, 1), rng); err == nil {
		t.Error("a batch of one action value for two accepted")
	}
	b := replay.NewBatch(2, 3, 2)
	b.Rewards[1] = float32(math.NaN())
	if _, err := s.Update(context.Background(), b, rng); err == nil {
		t.Error("a NaN reward accepted")
	}
	if s.Updates() != 0 {
		t.Errorf("%d updates counted after refusals", s.Updates())
	}
}

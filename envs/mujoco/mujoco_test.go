//go:build mujoco && cgo

package mujoco

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

func TestConformance(t *testing.T) {
	for _, id := range IDs {
		t.Run(id, func(t *testing.T) { envtest.RunWith(t, id, envtest.Options{Light: true}) })
	}
}

// The v4 specs: observation sizes, action bounds against the compiled model's ctrlrange,
// time limits (gymnasium/envs/__init__.py) and dt = timestep × frame_skip.
func TestSpecs(t *testing.T) {
	want := map[string]struct {
		obs, act, limit int
		bound, dt       float64
	}{
		"HalfCheetah-v4":            {17, 6, 1000, 1, 0.05},
		"Hopper-v4":                 {11, 3, 1000, 1, 0.008},
		"Walker2d-v4":               {17, 6, 1000, 1, 0.008},
		"Ant-v4":                    {27, 8, 1000, 1, 0.05},
		"Humanoid-v4":               {376, 17, 1000, 0.4, 0.015},
		"HumanoidStandup-v4":        {376, 17, 1000, 0.4, 0.015},
		"Swimmer-v4":                {8, 2, 1000, 1, 0.04},
		"InvertedPendulum-v4":       {4, 1, 1000, 3, 0.04},
		"InvertedDoublePendulum-v4": {11, 1, 1000, 1, 0.05},
		"Reacher-v4":                {11, 2, 50, 1, 0.02},
		"Pusher-v4":                 {23, 7, 100, 2, 0.05},
	}
	if len(want) != len(IDs) {
		t.Fatalf("%d ids, %d expectations", len(IDs), len(want))
	}
	for _, id := range IDs {
		w := want[id]
		spec, err := envs.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		box := spec.Action.(envs.Box)
		if spec.Observation.Dim() != w.obs || box.Dim() != w.act || spec.MaxEpisodeSteps != w.limit {
			t.Errorf("%s: obs %d, act %d, limit %d; want %d, %d, %d", id, spec.Observation.Dim(), box.Dim(), spec.MaxEpisodeSteps, w.obs, w.act, w.limit)
		}
		md, err := defs(id).model()
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(md.dt-w.dt) > 1e-12 {
			t.Errorf("%s: dt %v, want %v", id, md.dt, w.dt)
		}
		for j := range md.nu {
			if !md.ctrlLimited[j] || float32(md.ctrlRange[2*j]) != box.Low[j] || float32(md.ctrlRange[2*j+1]) != box.High[j] {
				t.Errorf("%s: actuator %d: ctrlrange %v (limited %v), action space [%v, %v]", id, j,
					md.ctrlRange[2*j:2*j+2], md.ctrlLimited[j], box.Low[j], box.High[j])
			}
		}
	}
}

// Snapshots restore every env bit for bit: the continuation of a restored VecEnv is the
// original's, for each env (contacts, the PGS solver's warm start and the derived arrays the
// observations read included).
func TestSnapshotExact(t *testing.T) {
	for _, id := range IDs {
		t.Run(id, func(t *testing.T) {
			const n = 3
			spec, _ := envs.Lookup(id)
			acts := envtest.RandomActions(spec.Action, n, 80, 4)
			a, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.Reset()
			for _, x := range acts[:40] {
				a.Step(x)
			}
			snap, err := a.(envs.Snapshotter).Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			b, err := envs.Make(id, envs.Config{NumEnvs: n, Seed: 123})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.Reset()
			b.Step(acts[0])
			if err := b.(envs.Snapshotter).Restore(snap); err != nil {
				t.Fatal(err)
			}
			for s, x := range acts[40:] {
				a.Step(x)
				b.Step(x)
				ba, bb := a.Buffers(), b.Buffers()
				if !slices.Equal(ba.Obs, bb.Obs) || !slices.Equal(ba.Rewards, bb.Rewards) || !slices.Equal(ba.Terminated, bb.Terminated) {
					t.Fatalf("step %d after the restore: the restored VecEnv diverged", s)
				}
			}
			if err := b.(envs.Snapshotter).Restore(snap[:len(snap)-8]); err == nil {
				t.Error("a truncated snapshot was restored")
			}
		})
	}
}

// One step from a state set through SetState, against the C library called directly (the
// same state set on a fresh mjData, ctrl written, mj_step × frame_skip, mj_rnePostConstraint)
// and Gymnasium v4's formulas for the observation, reward and termination worked here from
// the reference's arrays. An out-of-range action moves the bodies as the clipped one does
// (MuJoCo clamps ctrl to ctrlrange) while the control cost charges the action as given.
func TestStepAgainstLibrary(t *testing.T) {
	for _, id := range IDs {
		t.Run(id, func(t *testing.T) {
			df := defs(id)
			md, err := df.model()
			if err != nil {
				t.Fatal(err)
			}
			dyn, err := newSim(df, 1)
			if err != nil {
				t.Fatal(err)
			}
			sm := dyn.(*sim)
			defer sm.Close()
			obs := make([]float32, df.obsDim)
			rew, termBuf := make([]float32, 1), make([]float32, 1)
			sm.Reset(0, rand.New(rand.NewPCG(1, 1)), obs)
			rng := rand.New(rand.NewPCG(7, 7))
			qpos, qvel := make([]float64, md.nq), make([]float64, md.nv)
			for trial := range 6 {
				// A state near the model's initial one (a larger spread on velocities).
				for i := range qpos {
					qpos[i] = md.qpos0[i] + 0.05*rng.NormFloat64()
				}
				for i := range qvel {
					qvel[i] = 0.5 * rng.NormFloat64()
				}
				if err := sm.SetState(0, qpos, qvel); err != nil {
					t.Fatal(err)
				}
				a := make([]float32, md.nu)
				for j := range a {
					hi := md.ctrlRange[2*j+1]
					a[j] = float32(hi * (2*rng.Float64() - 1))
					if trial%2 == 1 {
						a[j] *= 3 // out of range: clamped by MuJoCo
					}
				}
				ref, err := newData(md)
				if err != nil {
					t.Fatal(err)
				}
				defer ref.free()
				if err := md.setState(ref, qpos, qvel); err != nil {
					t.Fatal(err)
				}
				// The solver starts from the env's warm start, as Gymnasium's data would.
				warm := slices.Clone(sm.ds[0].qaccWarmstart)
				copy(ref.qaccWarmstart, warm)
				pre := gymPre(id, md, ref)
				for j, x := range a {
					ref.ctrl[j] = float64(x)
				}
				md.bareSteps(ref, df.frameSkip)
				if df.rne {
					md.rnePostConstraint(ref)
				}
				wantObs := gymObs(id, ref)
				wantR, wantTerm := gymReward(id, md, ref, pre, a)

				sm.Step(envs.Actions{Box: a}, obs, rew, termBuf)
				r, term := rew[0], termBuf[0] == 1
				if len(wantObs) != len(obs) {
					t.Fatalf("observation of %d values, want %d", len(obs), len(wantObs))
				}
				for k := range obs {
					if obs[k] != float32(wantObs[k]) {
						t.Fatalf("trial %d: obs[%d] = %v, want %v", trial, k, obs[k], float32(wantObs[k]))
					}
				}
				if math.Abs(float64(r)-wantR) > 1e-5*max(1, math.Abs(wantR)) || term != wantTerm {
					t.Fatalf("trial %d: reward %v terminated %v, want %v %v", trial, r, term, wantR, wantTerm)
				}
				// The clamped action moves the bodies exactly as the action clipped by hand.
				if trial%2 == 1 {
					clipped, err := newData(md)
					if err != nil {
						t.Fatal(err)
					}
					defer clipped.free()
					md.setState(clipped, qpos, qvel)
					copy(clipped.qaccWarmstart, warm)
					for j, x := range a {
						clipped.ctrl[j] = min(max(float64(x), md.ctrlRange[2*j]), md.ctrlRange[2*j+1])
					}
					md.bareSteps(clipped, df.frameSkip)
					if !slices.Equal(clipped.qpos, ref.qpos) || !slices.Equal(clipped.qvel, ref.qvel) {
						t.Errorf("trial %d: an out-of-range action moved the bodies unlike the clipped one", trial)
					}
				}
			}
		})
	}
}

// gymPre is what v4's step reads before do_simulation (a position, or Reacher's and Pusher's
// whole reward terms, which they compute from the state before the step).
func gymPre(id string, md *model, d *data) []float64 {
	body := func(name string) []float64 {
		b, err := md.bodyID(name)
		if err != nil {
			panic(err)
		}
		return slices.Clone(d.xpos[3*b : 3*b+3])
	}
	switch id {
	case "HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Swimmer-v4":
		return []float64{d.qpos[0]}
	case "Ant-v4":
		return body("torso")
	case "Humanoid-v4":
		return []float64{massCenter(md, d)}
	case "Reacher-v4":
		f, g := body("fingertip"), body("target")
		return []float64{-norm(f[0]-g[0], f[1]-g[1], f[2]-g[2])}
	case "Pusher-v4":
		tip, obj, goal := body("tips_arm"), body("object"), body("goal")
		near := -norm(obj[0]-tip[0], obj[1]-tip[1], obj[2]-tip[2])
		dist := -norm(obj[0]-goal[0], obj[1]-goal[1], obj[2]-goal[2])
		return []float64{near, dist}
	}
	return nil
}

func norm(x ...float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

// massCenter is v4's mass_center(model, data)[0]: (Σ_b mass_b · xipos_b) / Σ mass.
func massCenter(md *model, d *data) float64 {
	var mx, m float64
	for b := range md.nbody {
		mx += md.bodyMass[b] * d.xipos[3*b]
		m += md.bodyMass[b]
	}
	return mx / m
}

func clip(x []float64, c float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Max(-c, math.Min(c, v))
	}
	return out
}

func cat(parts ...[]float64) []float64 { return slices.Concat(parts...) }

func mapf(x []float64, f func(float64) float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = f(v)
	}
	return out
}

// gymObs is v4's _get_obs on the reference data.
func gymObs(id string, d *data) []float64 {
	md, _ := defs(id).model()
	body := func(name string) []float64 {
		b, _ := md.bodyID(name)
		return d.xpos[3*b : 3*b+3]
	}
	switch id {
	case "HalfCheetah-v4":
		return cat(d.qpos[1:], d.qvel)
	case "Hopper-v4", "Walker2d-v4":
		return cat(d.qpos[1:], clip(d.qvel, 10))
	case "Ant-v4", "Swimmer-v4":
		return cat(d.qpos[2:], d.qvel)
	case "Humanoid-v4", "HumanoidStandup-v4":
		return cat(d.qpos[2:], d.qvel, d.cinert, d.cvel, d.qfrcActuator, d.cfrcExt)
	case "InvertedPendulum-v4":
		return cat(d.qpos, d.qvel)
	case "InvertedDoublePendulum-v4":
		return cat(d.qpos[:1], mapf(d.qpos[1:], math.Sin), mapf(d.qpos[1:], math.Cos), clip(d.qvel, 10), clip(d.qfrcConstraint, 10))
	case "Reacher-v4":
		f, g := body("fingertip"), body("target")
		return cat(mapf(d.qpos[:2], math.Cos), mapf(d.qpos[:2], math.Sin), d.qpos[2:], d.qvel[:2],
			[]float64{f[0] - g[0], f[1] - g[1], f[2] - g[2]})
	case "Pusher-v4":
		return cat(d.qpos[:7], d.qvel[:7], body("tips_arm"), body("object"), body("goal"))
	}
	panic("no reference observation for " + id)
}

// gymReward is v4's reward and terminated for the step from pre's state with action a.
func gymReward(id string, md *model, d *data, pre []float64, a []float32) (float64, bool) {
	ctrl := 0.0
	for _, x := range a {
		ctrl += float64(x) * float64(x)
	}
	switch id {
	case "HalfCheetah-v4":
		return (d.qpos[0]-pre[0])/0.05 - 0.1*ctrl, false
	case "Swimmer-v4":
		return (d.qpos[0]-pre[0])/0.04 - 1e-4*ctrl, false
	case "Hopper-v4":
		healthy := 0.7 < d.qpos[1] && -0.2 < d.qpos[2] && d.qpos[2] < 0.2
		for _, x := range cat(d.qpos[2:], d.qvel) {
			healthy = healthy && -100 < x && x < 100
		}
		return (d.qpos[0]-pre[0])/0.008 + 1 - 1e-3*ctrl, !healthy
	case "Walker2d-v4":
		healthy := 0.8 < d.qpos[1] && d.qpos[1] < 2 && -1 < d.qpos[2] && d.qpos[2] < 1
		return (d.qpos[0]-pre[0])/0.008 + 1 - 1e-3*ctrl, !healthy
	case "Ant-v4":
		b, _ := md.bodyID("torso")
		healthy := 0.2 <= d.qpos[2] && d.qpos[2] <= 1
		return (d.xpos[3*b]-pre[0])/0.05 + 1 - 0.5*ctrl, !healthy
	case "Humanoid-v4":
		healthy := 1 < d.qpos[2] && d.qpos[2] < 2
		return 1.25*(massCenter(md, d)-pre[0])/0.015 + 5 - 0.1*ctrl, !healthy
	case "HumanoidStandup-v4":
		impact := 0.0
		for _, f := range d.cfrcExt {
			impact += f * f
		}
		return d.qpos[2]/0.003 - 0.1*ctrl - math.Min(0.5e-6*impact, 10) + 1, false
	case "InvertedPendulum-v4":
		return 1, math.Abs(d.qpos[1]) > 0.2
	case "InvertedDoublePendulum-v4":
		x, y := d.siteXpos[0], d.siteXpos[2]
		return 10 - 0.01*x*x - (y-2)*(y-2) - 1e-3*d.qvel[1]*d.qvel[1] - 5e-3*d.qvel[2]*d.qvel[2], y <= 1
	case "Reacher-v4":
		return pre[0] - ctrl, false
	case "Pusher-v4":
		return pre[1] + 0.1*(-ctrl) + 0.5*pre[0], false
	}
	panic("no reference reward for " + id)
}

func TestSetStateErrors(t *testing.T) {
	v, err := envs.Make("Hopper-v4", envs.Config{NumEnvs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	v.Reset()
	ph, _ := envs.PhysicsOf(v)
	before := slices.Clone(v.Buffers().Obs)
	for _, c := range []struct {
		i          int
		qpos, qvel []float64
	}{
		{0, make([]float64, 5), make([]float64, 6)},
		{1, make([]float64, 6), make([]float64, 7)},
		{2, make([]float64, 6), make([]float64, 6)},
		{0, []float64{0, math.NaN(), 0, 0, 0, 0}, make([]float64, 6)},
	} {
		if err := ph.SetState(c.i, c.qpos, c.qvel); !errors.Is(err, envs.ErrConfig) {
			t.Errorf("SetState(%d, %v, %v) = %v, want ErrConfig", c.i, c.qpos, c.qvel, err)
		}
	}
	if !slices.Equal(before, v.Buffers().Obs) {
		t.Error("a refused SetState changed the observations")
	}
	if _, ok := envs.PhysicsOf(mustClassic(t)); ok {
		t.Error("PhysicsOf(CartPole) = ok")
	}
}

func mustClassic(t *testing.T) envs.VecEnv {
	v, err := envs.Make("CartPole-v1", envs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

//go:build mujoco && cgo

package mujoco

import (
	"math"
	"math/rand/v2"
)

// The locomotion envs of Gymnasium's mujoco/*_v4.py with their default constructor arguments.
// Each reads positions the way v4 does: qpos entries after the step, or MuJoCo's body
// positions (xpos, xipos) as mj_step leaves them, that is computed at the start of its last
// substep.

// forwardTask is HalfCheetah-v4 and Swimmer-v4: reward = w·Δx/dt − c·Σa², never terminated;
// the observation is qpos[skip:] then qvel.
type forwardTask struct {
	forward, ctrl float64 // forward_reward_weight, ctrl_cost_weight
	noise         float64 // reset_noise_scale
	normalQvel    bool    // qvel noise is scale × standard normal (HalfCheetah), not uniform
	skip          int     // qpos entries left out of the observation (the x, or x and y)
}

func (t *forwardTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, t.noise)
	if t.normalQvel {
		addNormal(qvel, nil, rng, t.noise)
	} else {
		addUniform(qvel, nil, rng, t.noise)
	}
}

func (t *forwardTask) before(_ *model, d *data, pre *[3]float64) { pre[0] = d.qpos[0] }

func (t *forwardTask) after(md *model, d *data, pre *[3]float64, a []float32) (float64, bool) {
	v := (d.qpos[0] - pre[0]) / md.dt
	return t.forward*v - t.ctrl*sumSquares(a), false
}

func (t *forwardTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, d.qpos[t.skip:]...)
	put(obs, k, d.qvel...)
}

// hopTask is Hopper-v4 and Walker2d-v4: reward = Δx/dt + 1 − 1e-3·Σa² (the healthy reward is
// paid on every step, terminate_when_unhealthy being true), terminated when unhealthy; the
// observation is qpos[1:] then clip(qvel, −10, 10).
type hopTask struct {
	zLow, zHigh         float64 // healthy_z_range (open interval)
	angleLow, angleHigh float64 // healthy_angle_range
	stateBound          float64 // healthy_state_range (±; Hopper 100), 0: no check (Walker2d)
}

func (t *hopTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 5e-3)
	addUniform(qvel, nil, rng, 5e-3)
}

func (t *hopTask) before(_ *model, d *data, pre *[3]float64) { pre[0] = d.qpos[0] }

func (t *hopTask) after(md *model, d *data, pre *[3]float64, a []float32) (float64, bool) {
	v := (d.qpos[0] - pre[0]) / md.dt
	return v + 1 - 1e-3*sumSquares(a), !t.healthy(d)
}

// healthy is v4's is_healthy: z and angle are qpos[1:3]; Hopper also bounds every entry of
// state_vector()[2:] (qpos[2:] then qvel) to (−100, 100).
func (t *hopTask) healthy(d *data) bool {
	z, angle := d.qpos[1], d.qpos[2]
	if t.stateBound > 0 {
		for _, x := range d.qpos[2:] {
			if !(-t.stateBound < x && x < t.stateBound) {
				return false
			}
		}
		for _, x := range d.qvel {
			if !(-t.stateBound < x && x < t.stateBound) {
				return false
			}
		}
	}
	return t.zLow < z && z < t.zHigh && t.angleLow < angle && angle < t.angleHigh
}

func (t *hopTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, d.qpos[1:]...)
	putClipped(obs, k, 10, d.qvel)
}

// antTask is Ant-v4 (use_contact_forces false): reward = Δx/dt of the torso's xpos + 1 −
// 0.5·Σa², terminated when the state is not finite or the torso's z (qpos[2]) leaves
// [0.2, 1]; the observation is qpos[2:] then qvel.
type antTask struct {
	torso int // body index
}

func (t *antTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 0.1)
	addNormal(qvel, nil, rng, 0.1)
}

func (t *antTask) before(_ *model, d *data, pre *[3]float64) { pre[0] = d.xpos[3*t.torso] }

func (t *antTask) after(md *model, d *data, pre *[3]float64, a []float32) (float64, bool) {
	v := (d.xpos[3*t.torso] - pre[0]) / md.dt
	return v + 1 - 0.5*sumSquares(a), !t.healthy(d)
}

func (t *antTask) healthy(d *data) bool {
	if !finite(d.qpos) || !finite(d.qvel) {
		return false
	}
	z := d.qpos[2]
	return 0.2 <= z && z <= 1.0
}

func (t *antTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, d.qpos[2:]...)
	put(obs, k, d.qvel...)
}

// humanoidObserve is Humanoid-v4's and HumanoidStandup-v4's observation: qpos[2:], qvel, then
// cinert, cvel, qfrc_actuator and cfrc_ext whole (the world body's rows included, as in v4).
func humanoidObserve(d *data, obs []float32) {
	k := put(obs, 0, d.qpos[2:]...)
	k = put(obs, k, d.qvel...)
	k = put(obs, k, d.cinert...)
	k = put(obs, k, d.cvel...)
	k = put(obs, k, d.qfrcActuator...)
	put(obs, k, d.cfrcExt...)
}

// humanoidTask is Humanoid-v4: reward = 1.25·Δx/dt of the mass centre + 5 − 0.1·Σctrl²,
// terminated when qpos[2] (the torso's z) leaves (1, 2).
type humanoidTask struct{}

func (t *humanoidTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 1e-2)
	addUniform(qvel, nil, rng, 1e-2)
}

// massCenterX is the x of v4's mass_center: Σ body_mass·xipos / Σ body_mass.
func massCenterX(md *model, d *data) float64 {
	num, den := 0.0, 0.0
	for b, m := range md.bodyMass {
		num += m * d.xipos[3*b]
		den += m
	}
	return num / den
}

func (t *humanoidTask) before(md *model, d *data, pre *[3]float64) { pre[0] = massCenterX(md, d) }

func (t *humanoidTask) after(md *model, d *data, pre *[3]float64, _ []float32) (float64, bool) {
	v := (massCenterX(md, d) - pre[0]) / md.dt
	ctrl := 0.0
	for _, c := range d.ctrl {
		ctrl += c * c
	}
	z := d.qpos[2]
	return 1.25*v + 5 - 0.1*ctrl, !(1 < z && z < 2)
}

func (t *humanoidTask) observe(_ *model, d *data, obs []float32) { humanoidObserve(d, obs) }

// standupTask is HumanoidStandup-v4: reward = qpos[2]/timestep − 0.1·Σctrl² −
// min(0.5e-6·Σcfrc_ext², 10) + 1, never terminated.
type standupTask struct{}

func (t *standupTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 1e-2)
	addUniform(qvel, nil, rng, 1e-2)
}

func (t *standupTask) before(*model, *data, *[3]float64) {}

func (t *standupTask) after(md *model, d *data, _ *[3]float64, _ []float32) (float64, bool) {
	ctrl, impact := 0.0, 0.0
	for _, c := range d.ctrl {
		ctrl += c * c
	}
	for _, f := range d.cfrcExt {
		impact += f * f
	}
	return d.qpos[2]/md.timestep - 0.1*ctrl - min(0.5e-6*impact, 10) + 1, false
}

func (t *standupTask) observe(_ *model, d *data, obs []float32) { humanoidObserve(d, obs) }

func init() {
	register(&def{spec: spec("HalfCheetah-v4", 17, 6, 1, 1000, 4800), file: "half_cheetah.xml", frameSkip: 5,
		task: &forwardTask{forward: 1, ctrl: 0.1, noise: 0.1, normalQvel: true, skip: 1}})
	register(&def{spec: spec("Swimmer-v4", 8, 2, 1, 1000, 360), file: "swimmer.xml", frameSkip: 4,
		task: &forwardTask{forward: 1, ctrl: 1e-4, noise: 0.1, skip: 2}})
	register(&def{spec: spec("Hopper-v4", 11, 3, 1, 1000, 3800), file: "hopper.xml", frameSkip: 4,
		task: &hopTask{zLow: 0.7, zHigh: math.Inf(1), angleLow: -0.2, angleHigh: 0.2, stateBound: 100}})
	register(&def{spec: spec("Walker2d-v4", 17, 6, 1, 1000, 0), file: "walker2d.xml", frameSkip: 4,
		task: &hopTask{zLow: 0.8, zHigh: 2, angleLow: -1, angleHigh: 1}})
	ant := &antTask{}
	register(&def{spec: spec("Ant-v4", 27, 8, 1, 1000, 6000), file: "ant.xml", frameSkip: 5, task: ant,
		bind: func(md *model) (err error) { ant.torso, err = md.bodyID("torso"); return err }})
	register(&def{spec: spec("Humanoid-v4", 376, 17, 0.4, 1000, 0), file: "humanoid.xml", frameSkip: 5, rne: true,
		task: &humanoidTask{}})
	register(&def{spec: spec("HumanoidStandup-v4", 376, 17, 0.4, 1000, 0), file: "humanoidstandup.xml", frameSkip: 5, rne: true,
		task: &standupTask{}})
}

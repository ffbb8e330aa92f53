//go:build mujoco && cgo

package mujoco

import (
	"math"
	"math/rand/v2"
)

// The control and manipulation envs of Gymnasium's mujoco/*_v4.py with their default
// constructor arguments.

// pendulumTask is InvertedPendulum-v4: reward 1 on every step (the terminating one too),
// terminated when an observation value is not finite or |qpos[1]| > 0.2; the observation is
// qpos then qvel.
type pendulumTask struct{}

func (pendulumTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 0.01)
	addUniform(qvel, nil, rng, 0.01)
}

func (pendulumTask) before(*model, *data, *[3]float64) {}

func (pendulumTask) after(_ *model, d *data, _ *[3]float64, _ []float32) (float64, bool) {
	return 1, !finite(d.qpos) || !finite(d.qvel) || math.Abs(d.qpos[1]) > 0.2
}

func (pendulumTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, d.qpos...)
	put(obs, k, d.qvel...)
}

// doublePendulumTask is InvertedDoublePendulum-v4: with (x, _, y) the tip site's position,
// reward = 10 − (0.01x² + (y−2)²) − (1e-3·qvel[1]² + 5e-3·qvel[2]²), terminated when y ≤ 1;
// the observation is qpos[:1], sin(qpos[1:]), cos(qpos[1:]), clip(qvel, ±10),
// clip(qfrc_constraint, ±10).
type doublePendulumTask struct{}

func (doublePendulumTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 0.1)
	addNormal(qvel, nil, rng, 0.1)
}

func (doublePendulumTask) before(*model, *data, *[3]float64) {}

func (doublePendulumTask) after(_ *model, d *data, _ *[3]float64, _ []float32) (float64, bool) {
	x, y := d.siteXpos[0], d.siteXpos[2]
	dist := 0.01*x*x + (y-2)*(y-2)
	v1, v2 := d.qvel[1], d.qvel[2]
	vel := 1e-3*v1*v1 + 5e-3*v2*v2
	return 10 - dist - vel, y <= 1
}

func (doublePendulumTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, d.qpos[0])
	for _, q := range d.qpos[1:] {
		k = put(obs, k, math.Sin(q))
	}
	for _, q := range d.qpos[1:] {
		k = put(obs, k, math.Cos(q))
	}
	k = putClipped(obs, k, 10, d.qvel)
	putClipped(obs, k, 10, d.qfrcConstraint)
}

// reacherTask is Reacher-v4: the reward is taken before the step, −‖fingertip − target‖ −
// Σa²; never terminated. The observation is cos(qpos[:2]), sin(qpos[:2]), qpos[2:],
// qvel[:2], fingertip − target.
type reacherTask struct{ fingertip, target int }

func (reacherTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	addUniform(qpos, md.qpos0, rng, 0.1)
	var gx, gy float64
	for { // a goal drawn uniformly in the disc of radius 0.2
		gx, gy = -0.2+0.4*rng.Float64(), -0.2+0.4*rng.Float64()
		if math.Hypot(gx, gy) < 0.2 {
			break
		}
	}
	n := len(qpos)
	qpos[n-2], qpos[n-1] = gx, gy
	addUniform(qvel, nil, rng, 0.005)
	qvel[len(qvel)-2], qvel[len(qvel)-1] = 0, 0
}

// before records the distance reward of the state the action is applied to.
func (t *reacherTask) before(_ *model, d *data, pre *[3]float64) {
	pre[0] = -dist3(d, t.fingertip, t.target)
}

func (t *reacherTask) after(_ *model, _ *data, pre *[3]float64, a []float32) (float64, bool) {
	return pre[0] - sumSquares(a), false
}

func (t *reacherTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, math.Cos(d.qpos[0]), math.Cos(d.qpos[1]), math.Sin(d.qpos[0]), math.Sin(d.qpos[1]))
	k = put(obs, k, d.qpos[2:]...)
	k = put(obs, k, d.qvel[:2]...)
	f, g := d.xpos[3*t.fingertip:3*t.fingertip+3], d.xpos[3*t.target:3*t.target+3]
	put(obs, k, f[0]-g[0], f[1]-g[1], f[2]-g[2])
}

// pusherTask is Pusher-v4: the reward is taken before the step, −‖object − goal‖ − 0.1·Σa² −
// 0.5·‖object − tips_arm‖; never terminated. The observation is qpos[:7], qvel[:7], then the
// positions of tips_arm, object and goal.
type pusherTask struct{ tips, object, goal int }

func (pusherTask) resetState(md *model, rng *rand.Rand, qpos, qvel []float64) {
	copy(qpos, md.qpos0)
	var cx, cy float64
	for { // a cylinder position at least 0.17 from the goal (0, 0)
		cx, cy = -0.3+0.3*rng.Float64(), -0.2+0.4*rng.Float64()
		if math.Hypot(cx, cy) > 0.17 {
			break
		}
	}
	n := len(qpos)
	qpos[n-4], qpos[n-3], qpos[n-2], qpos[n-1] = cx, cy, 0, 0
	addUniform(qvel, nil, rng, 0.005)
	clear(qvel[len(qvel)-4:])
}

// dist3 is the distance between the positions (xpos) of bodies a and b.
func dist3(d *data, a, b int) float64 {
	x, y := d.xpos[3*a:3*a+3], d.xpos[3*b:3*b+3]
	return math.Sqrt((x[0]-y[0])*(x[0]-y[0]) + (x[1]-y[1])*(x[1]-y[1]) + (x[2]-y[2])*(x[2]-y[2]))
}

func (t *pusherTask) before(_ *model, d *data, pre *[3]float64) {
	pre[0] = -dist3(d, t.object, t.goal)
	pre[1] = -dist3(d, t.object, t.tips)
}

func (t *pusherTask) after(_ *model, _ *data, pre *[3]float64, a []float32) (float64, bool) {
	return pre[0] + 0.1*(-sumSquares(a)) + 0.5*pre[1], false
}

func (t *pusherTask) observe(_ *model, d *data, obs []float32) {
	k := put(obs, 0, d.qpos[:7]...)
	k = put(obs, k, d.qvel[:7]...)
	for _, b := range []int{t.tips, t.object, t.goal} {
		k = put(obs, k, d.xpos[3*b:3*b+3]...)
	}
}

// bodies resolves names to body indices into the pointers.
func bodies(md *model, names []string, ids ...*int) error {
	for i, name := range names {
		id, err := md.bodyID(name)
		if err != nil {
			return err
		}
		*ids[i] = id
	}
	return nil
}

func init() {
	register(&def{spec: spec("InvertedPendulum-v4", 4, 1, 3, 1000, 950), file: "inverted_pendulum.xml", frameSkip: 2,
		task: pendulumTask{}})
	register(&def{spec: spec("InvertedDoublePendulum-v4", 11, 1, 1, 1000, 9100), file: "inverted_double_pendulum.xml", frameSkip: 5,
		task: doublePendulumTask{}})
	reacher := &reacherTask{}
	register(&def{spec: spec("Reacher-v4", 11, 2, 1, 50, -3.75), file: "reacher.xml", frameSkip: 2, task: reacher,
		bind: func(md *model) error {
			return bodies(md, []string{"fingertip", "target"}, &reacher.fingertip, &reacher.target)
		}})
	pusher := &pusherTask{}
	register(&def{spec: spec("Pusher-v4", 23, 7, 2, 100, 0), file: "pusher.xml", frameSkip: 5, task: pusher,
		bind: func(md *model) error {
			return bodies(md, []string{"tips_arm", "object", "goal"}, &pusher.tips, &pusher.object, &pusher.goal)
		}})
}

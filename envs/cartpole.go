package envs

import (
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/internal/kernels"
)

// CartPole-v1, as gymnasium/envs/classic_control/cartpole.py (CartPoleEnv)
// with its default "euler" kinematics, wrapped in TimeLimit(500).
//
// Reward is 1 on every step, the terminating one included (Gymnasium gives 0
// only for steps taken after termination, which autoreset never takes).

func init() {
	high := []float32{
		float32(cartXThreshold * 2), math.MaxFloat32,
		float32(cartThetaThreshold * 2), math.MaxFloat32,
	}
	spec := Spec{
		ID: "CartPole-v1",
		Observation: Box{
			Shape: []int{4},
			Low:   []float32{-high[0], -high[1], -high[2], -high[3]},
			High:  high,
		},
		Action:          Discrete{N: 2},
		MaxEpisodeSteps: 500,
		RewardThreshold: 475,
	}
	Register(spec, func(n int) Dynamics { return &cartPole{s: make([]cartState, n)} })
	// CartPoleNoVel-v1 is RL Zoo's partially observed CartPole (rl_zoo3's MaskVelocityWrapper
	// over CartPole-v1): the same dynamics, with the velocities (observation entries 1 and 3)
	// multiplied by 0. The observation space keeps its shape and bounds. A feed-forward policy
	// cannot infer the velocities from one observation; a recurrent one can, so this is the
	// standard check that a policy's memory works.
	spec.ID = "CartPoleNoVel-v1"
	Register(spec, func(n int) Dynamics { return &cartPoleNoVel{cartPole{s: make([]cartState, n)}} })
}

// Constants of CartPoleEnv.__init__. The derived ones are computed at run
// time in float64, in Python's order, so they round as Gymnasium's do.
var (
	cartGravity        = 9.8
	cartMassCart       = 1.0
	cartMassPole       = 0.1
	cartTotalMass      = cartMassPole + cartMassCart
	cartLength         = 0.5 // half the pole's length
	cartPoleMassLength = cartMassPole * cartLength
	cartForceMag       = 10.0
	cartTau            = 0.02
	cartThetaThreshold = 12 * 2 * pi64 / 360
	cartXThreshold     = 2.4
)

// pi64 is math.Pi rounded to float64 (numpy's np.pi, Python's math.pi); as a
// variable it makes expressions round at every step as Python's do.
var pi64 = math.Pi

// cartState is CartPoleEnv.state: (x, x_dot, theta, theta_dot).
type cartState struct{ x, xDot, theta, thetaDot float64 }

// cartPoleStep is CartPoleEnv.step's dynamics and termination for action a
// (0 pushes left, 1 right).
func cartPoleStep(s cartState, a int) (cartState, bool) {
	force := -cartForceMag
	if a == 1 {
		force = cartForceMag
	}
	sintheta, costheta := math.Sincos(s.theta)
	temp := (force + cartPoleMassLength*(s.thetaDot*s.thetaDot)*sintheta) / cartTotalMass
	thetaacc := (cartGravity*sintheta - costheta*temp) /
		(cartLength * (4.0/3.0 - cartMassPole*(costheta*costheta)/cartTotalMass))
	xacc := temp - cartPoleMassLength*thetaacc*costheta/cartTotalMass
	n := cartState{
		x:        s.x + cartTau*s.xDot,
		xDot:     s.xDot + cartTau*xacc,
		theta:    s.theta + cartTau*s.thetaDot,
		thetaDot: s.thetaDot + cartTau*thetaacc,
	}
	terminated := n.x < -cartXThreshold || n.x > cartXThreshold ||
		n.theta < -cartThetaThreshold || n.theta > cartThetaThreshold
	return n, terminated
}

// cartPoleReset is CartPoleEnv.reset: np_random.uniform(-0.05, 0.05, size=4).
func cartPoleReset(rng *rand.Rand) cartState {
	return cartState{
		x:        uniform(rng, -0.05, 0.05),
		xDot:     uniform(rng, -0.05, 0.05),
		theta:    uniform(rng, -0.05, 0.05),
		thetaDot: uniform(rng, -0.05, 0.05),
	}
}

func (s cartState) observe(obs []float32) {
	obs = obs[:4:4]
	obs[0], obs[1], obs[2], obs[3] = float32(s.x), float32(s.xDot), float32(s.theta), float32(s.thetaDot)
}

// cartPole is n CartPoles, one cartState each (array of structs: the four
// values of one env share a cache line).
type cartPole struct {
	s    []cartState
	skip []int32 // scratch for Step: the envs kernels.CartPole.Step leaves to cartPoleStep
}

func (c *cartPole) Reset(i int, rng *rand.Rand, obs []float32) {
	c.s[i] = cartPoleReset(rng)
	c.s[i].observe(obs)
}

// cartPoleKernel is the constants of cartPoleStep for kernels.CartPole.Step.
var cartPoleKernel = kernels.CartPole{
	Gravity: cartGravity, MassPole: cartMassPole, TotalMass: cartTotalMass, Length: cartLength,
	PoleMassLength: cartPoleMassLength, Tau: cartTau, XThreshold: cartXThreshold,
	ThetaThreshold: cartThetaThreshold, ForceMag: cartForceMag, FourOverPi: 4 / math.Pi,
}

// Step is the hot loop of the CartPole VecEnv. On a CPU with AVX-512 it steps eight envs at
// a time (kernels.CartPole.Step: cartPoleLoop's bits), and each env whose angle sincos would
// not take inline (outside ±π/4, ±0, NaN) by cartPoleStep, which gives cartPoleLoop's bits too.
func (c *cartPole) Step(a Actions, obs, rewards, terminated []float32) {
	act := a.Discrete
	s := c.s[:len(act)]
	if len(c.skip) < len(s) {
		c.skip = make([]int32, len(s))
	}
	skipped, ok := cartPoleKernel.Step(float64s(s), act, obs, rewards, terminated, c.skip)
	if !ok {
		cartPoleLoop(s, act, obs, rewards, terminated)
		return
	}
	for _, i := range c.skip[:skipped] {
		n, term := cartPoleStep(s[i], act[i])
		s[i] = n
		n.observe(obs[4*i:])
		rewards[i], terminated[i] = 1, 0
		if term {
			terminated[i] = 1
		}
	}
}

// cartPoleLoop is Step in Go over the envs s: the body of cartPoleStep, written out so the compiler
// keeps everything in registers, math.Sincos included (sincos: the same bits).
// TestCartPoleStepMatchesScalar checks it against cartPoleStep.
func cartPoleLoop(s []cartState, act []int, obs, rewards, terminated []float32) {
	s = s[:len(act)]
	obs = obs[:4*len(s)]
	rewards = rewards[:len(s)]
	terminated = terminated[:len(s)]
	var (
		gravity  = cartGravity
		massPole = cartMassPole
		total    = cartTotalMass
		length   = cartLength
		pml      = cartPoleMassLength
		tau      = cartTau
		xThr     = cartXThreshold
		thThr    = cartThetaThreshold
		fmag     = cartForceMag
	)
	for i := range s {
		st := &s[i]
		x, xDot, theta, thetaDot := st.x, st.xDot, st.theta, st.thetaDot
		force := -fmag
		if act[i] == 1 {
			force = fmag
		}
		sintheta, costheta := sincosPoly(theta) // sincos, both parts inline
		if !sincosInline(theta) {
			sintheta, costheta = math.Sincos(theta)
		}
		temp := (force + pml*(thetaDot*thetaDot)*sintheta) / total
		thetaacc := (gravity*sintheta - costheta*temp) /
			(length * (4.0/3.0 - massPole*(costheta*costheta)/total))
		xacc := temp - pml*thetaacc*costheta/total
		x, xDot, theta, thetaDot = x+tau*xDot, xDot+tau*xacc, theta+tau*thetaDot, thetaDot+tau*thetaacc
		st.x, st.xDot, st.theta, st.thetaDot = x, xDot, theta, thetaDot
		o := obs[4*i : 4*i+4 : 4*i+4]
		o[0], o[1], o[2], o[3] = float32(x), float32(xDot), float32(theta), float32(thetaDot)
		rewards[i] = 1
		t := float32(0)
		if x < -xThr || x > xThr || theta < -thThr || theta > thThr {
			t = 1
		}
		terminated[i] = t
	}
}

func (d *cartPole) stateFloats() []float64 { return float64s(d.s) }

// cartPoleNoVel is CartPole with the velocity observations masked to 0 (CartPoleNoVel-v1).
type cartPoleNoVel struct{ cartPole }

func (c *cartPoleNoVel) Reset(i int, rng *rand.Rand, obs []float32) {
	c.cartPole.Reset(i, rng, obs)
	maskVelocities(obs[:4])
}

func (c *cartPoleNoVel) Step(a Actions, obs, rewards, terminated []float32) {
	c.cartPole.Step(a, obs, rewards, terminated)
	for i := range len(a.Discrete) {
		maskVelocities(obs[4*i : 4*i+4])
	}
}

// maskVelocities is MaskVelocityWrapper.observation for CartPole: obs * [1, 0, 1, 0]
// (the product, so a velocity of -x gives -0 as numpy's does).
func maskVelocities(obs []float32) {
	obs = obs[:4:4]
	obs[1] *= 0
	obs[3] *= 0
}

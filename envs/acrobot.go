package envs

import (
	"math"
	"math/rand/v2"
)

// Acrobot-v1, as gymnasium/envs/classic_control/acrobot.py (AcrobotEnv with
// book_or_nips = "book" and torque_noise_max = 0) wrapped in TimeLimit(500):
// one classic RK4 step of dt = 0.2 over the augmented state (θ1, θ2, θ̇1, θ̇2,
// torque), then wrap of the angles into [-π, π] and bound of the velocities
// to ±4π and ±9π. Gymnasium casts the reset state to float32 (reset only);
// so does this.

func init() {
	high := []float32{1, 1, 1, 1, float32(acroMaxVel1), float32(acroMaxVel2)}
	low := make([]float32, len(high))
	for i, h := range high {
		low[i] = -h
	}
	Register(Spec{
		ID:              "Acrobot-v1",
		Observation:     Box{Shape: []int{6}, Low: low, High: high},
		Action:          Discrete{N: 3},
		MaxEpisodeSteps: 500,
		RewardThreshold: -100,
	}, func(n int) Dynamics { return &acrobot{s: make([]acroState, n)} })
}

// Constants of AcrobotEnv. The velocity limits are computed in float64 from
// np.pi as Python computes 4*pi and 9*pi.
const (
	acroDt  = 0.2
	acroL1  = 1.0 // LINK_LENGTH_1
	acroM1  = 1.0 // LINK_MASS_1
	acroM2  = 1.0 // LINK_MASS_2
	acroLC1 = 0.5 // LINK_COM_POS_1
	acroLC2 = 0.5 // LINK_COM_POS_2
	acroI1  = 1.0 // LINK_MOI
	acroI2  = 1.0 // LINK_MOI
)

// Inexact constants are variables so that expressions using them round at
// each operation as Python's do, instead of being folded exactly.
var (
	acroGrav    = 9.8
	acroDtVar   = acroDt
	acroMaxVel1 = 4 * pi64
	acroMaxVel2 = 9 * pi64
)

// acroTorque is AVAIL_TORQUE.
var acroTorque = [3]float64{-1, 0, 1}

// acroState is AcrobotEnv.state: (theta1, theta2, dtheta1, dtheta2).
type acroState [4]float64

// acroDsdt is AcrobotEnv._dsdt for the "book" dynamics, written in Python's
// evaluation order; a is the torque (its derivative is 0).
func acroDsdt(s acroState, a float64) acroState {
	theta1, theta2, dtheta1, dtheta2 := s[0], s[1], s[2], s[3]
	const m1, m2, l1, lc1, lc2, I1, I2 = acroM1, acroM2, acroL1, acroLC1, acroLC2, acroI1, acroI2
	g := acroGrav // a variable: products with g round as in Python
	sin2, cos2 := math.Sincos(theta2)
	d1 := m1*lc1*lc1 + m2*(l1*l1+lc2*lc2+2*l1*lc2*cos2) + I1 + I2
	d2 := m2*(lc2*lc2+l1*lc2*cos2) + I2
	phi2 := m2 * lc2 * g * math.Cos(theta1+theta2-pi64/2.0)
	phi1 := -m2*l1*lc2*(dtheta2*dtheta2)*sin2 -
		2*m2*l1*lc2*dtheta2*dtheta1*sin2 +
		(m1*lc1+m2*l1)*g*math.Cos(theta1-pi64/2) +
		phi2
	ddtheta2 := (a + d2/d1*phi1 - m2*l1*lc2*(dtheta1*dtheta1)*sin2 - phi2) /
		(m2*lc2*lc2 + I2 - (d2*d2)/d1)
	ddtheta1 := -(d2*ddtheta2 + phi1) / d1
	return acroState{dtheta1, dtheta2, ddtheta1, ddtheta2}
}

// acroRK4 is Gymnasium's rk4(derivs, y0, [0, dt]) for the augmented state:
// yout = y0 + dt/6*(k1 + 2*k2 + 2*k3 + k4).
func acroRK4(y0 acroState, a float64) acroState {
	dt := acroDtVar
	dt2 := dt / 2.0
	k1 := acroDsdt(y0, a)
	var y acroState
	for j := range y {
		y[j] = y0[j] + dt2*k1[j]
	}
	k2 := acroDsdt(y, a)
	for j := range y {
		y[j] = y0[j] + dt2*k2[j]
	}
	k3 := acroDsdt(y, a)
	for j := range y {
		y[j] = y0[j] + dt*k3[j]
	}
	k4 := acroDsdt(y, a)
	dt6 := dt / 6.0
	for j := range y {
		y[j] = y0[j] + dt6*(k1[j]+2*k2[j]+2*k3[j]+k4[j])
	}
	return y
}

// acroWrap is Gymnasium's wrap(x, m, M).
func acroWrap(x, m, M float64) float64 {
	diff := M - m
	for x > M {
		x -= diff
	}
	for x < m {
		x += diff
	}
	return x
}

// acroBound is Gymnasium's bound(x, m, M): min(max(x, m), M).
func acroBound(x, m, M float64) float64 { return min(max(x, m), M) }

// acrobotStep is AcrobotEnv.step for action a in {0, 1, 2}: next state,
// reward and termination.
func acrobotStep(s acroState, a int) (acroState, float64, bool) {
	ns := acroRK4(s, acroTorque[a])
	ns[0] = acroWrap(ns[0], -pi64, pi64)
	ns[1] = acroWrap(ns[1], -pi64, pi64)
	ns[2] = acroBound(ns[2], -acroMaxVel1, acroMaxVel1)
	ns[3] = acroBound(ns[3], -acroMaxVel2, acroMaxVel2)
	terminated := -math.Cos(ns[0])-math.Cos(ns[1]+ns[0]) > 1.0
	reward := -1.0
	if terminated {
		reward = 0
	}
	return ns, reward, terminated
}

// acrobotReset is AcrobotEnv.reset: uniform(-0.1, 0.1, size=4).astype(float32).
func acrobotReset(rng *rand.Rand) acroState {
	var s acroState
	for j := range s {
		s[j] = float64(float32(uniform(rng, -0.1, 0.1)))
	}
	return s
}

func (s acroState) observe(obs []float32) {
	obs = obs[:6:6]
	s1, c1 := math.Sincos(s[0])
	s2, c2 := math.Sincos(s[1])
	obs[0], obs[1], obs[2], obs[3] = float32(c1), float32(s1), float32(c2), float32(s2)
	obs[4], obs[5] = float32(s[2]), float32(s[3])
}

type acrobot struct{ s []acroState }

func (ac *acrobot) Reset(i int, rng *rand.Rand, obs []float32) {
	ac.s[i] = acrobotReset(rng)
	ac.s[i].observe(obs)
}

func (ac *acrobot) Step(a Actions, obs, rewards, terminated []float32) {
	s := ac.s[:len(a.Discrete)]
	for i := range s {
		n, r, done := acrobotStep(s[i], a.Discrete[i])
		s[i] = n
		n.observe(obs[6*i:])
		rewards[i] = float32(r)
		terminated[i] = b2f(done)
	}
}

func (d *acrobot) stateFloats() []float64 { return float64s(d.s) }

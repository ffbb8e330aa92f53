package envs

import (
	"math"
	"math/rand/v2"
)

// Pendulum-v1, as gymnasium/envs/classic_control/pendulum.py (PendulumEnv,
// g = 10) wrapped in TimeLimit(200). It never terminates.
//
// The torque is clipped to [-2, 2] before use, as np.clip(u, -max_torque,
// max_torque) does; the reward is computed from the state before the update
// and the clipped torque. Arithmetic is float64 throughout (under NumPy 2 a
// float32 action makes 3.0*u and 0.001*u**2 float32 products; the difference
// is below 1e-7 per step).

func init() {
	Register(Spec{
		ID: "Pendulum-v1",
		Observation: Box{
			Shape: []int{3},
			Low:   []float32{-1, -1, -pendMaxSpeed},
			High:  []float32{1, 1, pendMaxSpeed},
		},
		Action:          NewBox(-pendMaxTorque, pendMaxTorque, 1),
		MaxEpisodeSteps: 200,
	}, func(n int) Dynamics { return &pendulum{s: make([]pendState, n)} })
}

// Constants of PendulumEnv.__init__ (g=10, m=1, l=1).
const (
	pendMaxSpeed  = 8
	pendMaxTorque = 2.0
	pendDt        = 0.05
	pendG         = 10.0
	pendM         = 1.0
	pendL         = 1.0
)

// pendState is PendulumEnv.state: (th, thdot). th is not wrapped.
type pendState struct{ th, thDot float64 }

// angleNormalize is Gymnasium's angle_normalize: ((x + pi) % (2*pi)) - pi
// with numpy's floored modulo (the result takes the divisor's sign).
func angleNormalize(x float64) float64 {
	return pyMod(x+pi64, 2*pi64) - pi64
}

// pyMod is Python's and numpy's float % for y > 0: fmod moved into [0, y).
func pyMod(x, y float64) float64 {
	if x > 0 && x < y { // fmod(x, y) is x itself: skip the slow general case
		return x
	}
	m := math.Mod(x, y)
	if m != 0 && (m < 0) != (y < 0) {
		m += y
	}
	if m == 0 {
		m = math.Copysign(0, y)
	}
	return m
}

// pendulumStep is PendulumEnv.step for torque u (not yet clipped); it returns
// the next state and the reward.
func pendulumStep(s pendState, u float64) (pendState, float64) {
	u = min(max(u, -pendMaxTorque), pendMaxTorque)
	an := angleNormalize(s.th)
	costs := an*an + 0.1*(s.thDot*s.thDot) + 0.001*(u*u)
	newthdot := s.thDot + (3*pendG/(2*pendL)*math.Sin(s.th)+3.0/(pendM*pendL*pendL)*u)*pendDt
	newthdot = min(max(newthdot, -pendMaxSpeed), pendMaxSpeed)
	newth := s.th + newthdot*pendDt
	return pendState{th: newth, thDot: newthdot}, -costs
}

// pendulumReset is PendulumEnv.reset: uniform(low=-[pi, 1], high=[pi, 1]).
func pendulumReset(rng *rand.Rand) pendState {
	th := uniform(rng, -pi64, pi64)
	return pendState{th: th, thDot: uniform(rng, -1, 1)}
}

func (s pendState) observe(obs []float32) {
	obs = obs[:3:3]
	sin, cos := math.Sincos(s.th)
	obs[0], obs[1], obs[2] = float32(cos), float32(sin), float32(s.thDot)
}

type pendulum struct{ s []pendState }

func (p *pendulum) Reset(i int, rng *rand.Rand, obs []float32) {
	p.s[i] = pendulumReset(rng)
	p.s[i].observe(obs)
}

func (p *pendulum) Step(a Actions, obs, rewards, terminated []float32) {
	s := p.s[:len(a.Box)]
	for i := range s {
		n, r := pendulumStep(s[i], float64(a.Box[i]))
		s[i] = n
		n.observe(obs[3*i:])
		rewards[i] = float32(r)
		terminated[i] = 0
	}
}

func (d *pendulum) stateFloats() []float64 { return float64s(d.s) }

package envs

import (
	"math"
	"math/rand/v2"
)

// MountainCar-v0 (gymnasium/envs/classic_control/mountain_car.py,
// MountainCarEnv, goal_velocity 0) wrapped in TimeLimit(200), and
// MountainCarContinuous-v0 (continuous_mountain_car.py,
// Continuous_MountainCarEnv) wrapped in TimeLimit(999).
//
// Continuous: the force is the action clipped to [-1, 1], but the reward
// penalty -0.1*action² uses the unclipped action, as Gymnasium's does; and
// Gymnasium stores that env's state as float32 after every step (not after
// reset), so this one rounds it there too.

func init() {
	Register(Spec{
		ID: "MountainCar-v0",
		Observation: Box{
			Shape: []int{2},
			Low:   []float32{float32(mcMinPosition), float32(-mcMaxSpeed)},
			High:  []float32{float32(mcMaxPosition), float32(mcMaxSpeed)},
		},
		Action:          Discrete{N: 3},
		MaxEpisodeSteps: 200,
		RewardThreshold: -110,
	}, func(n int) Dynamics { return &mountainCar{s: make([]mcState, n)} })
	Register(Spec{
		ID: "MountainCarContinuous-v0",
		Observation: Box{
			Shape: []int{2},
			Low:   []float32{float32(mcMinPosition), float32(-mcMaxSpeed)},
			High:  []float32{float32(mcMaxPosition), float32(mcMaxSpeed)},
		},
		Action:          NewBox(-1, 1, 1),
		MaxEpisodeSteps: 999,
		RewardThreshold: 90,
	}, func(n int) Dynamics { return &mountainCarContinuous{s: make([]mcState, n)} })
}

// Constants of MountainCarEnv and Continuous_MountainCarEnv.
const (
	mcMinPosition   = -1.2
	mcMaxPosition   = 0.6
	mcMaxSpeed      = 0.07
	mcGoalPosition  = 0.5
	mcGoalVelocity  = 0.0
	mcForce         = 0.001
	mcGravity       = 0.0025
	mccGoalPosition = 0.45
	mccPower        = 0.0015
	mccMinAction    = -1.0
	mccMaxAction    = 1.0
)

// mcState is (position, velocity).
type mcState struct{ pos, vel float64 }

// mountainCarStep is MountainCarEnv.step for action a in {0, 1, 2}.
func mountainCarStep(s mcState, a int) (mcState, bool) {
	vel := s.vel + (float64(a-1)*mcForce + math.Cos(3*s.pos)*(-mcGravity))
	vel = min(max(vel, -mcMaxSpeed), mcMaxSpeed)
	pos := s.pos + vel
	pos = min(max(pos, mcMinPosition), mcMaxPosition)
	if pos == mcMinPosition && vel < 0 {
		vel = 0
	}
	return mcState{pos, vel}, pos >= mcGoalPosition && vel >= mcGoalVelocity
}

// mountainCarContinuousStep is Continuous_MountainCarEnv.step for action a
// (not yet clipped); it returns the next state (rounded to float32 as
// Gymnasium stores it), the reward and termination.
func mountainCarContinuousStep(s mcState, a float64) (mcState, float64, bool) {
	force := min(max(a, mccMinAction), mccMaxAction)
	vel := s.vel + (force*mccPower - 0.0025*math.Cos(3*s.pos))
	if vel > mcMaxSpeed {
		vel = mcMaxSpeed
	}
	if vel < -mcMaxSpeed {
		vel = -mcMaxSpeed
	}
	pos := s.pos + vel
	if pos > mcMaxPosition {
		pos = mcMaxPosition
	}
	if pos < mcMinPosition {
		pos = mcMinPosition
	}
	if pos == mcMinPosition && vel < 0 {
		vel = 0
	}
	terminated := pos >= mccGoalPosition && vel >= mcGoalVelocity
	reward := 0.0
	if terminated {
		reward = 100.0
	}
	reward -= a * a * 0.1
	return mcState{float64(float32(pos)), float64(float32(vel))}, reward, terminated
}

// mountainCarReset is the reset of both: position uniform in [-0.6, -0.4),
// velocity 0.
func mountainCarReset(rng *rand.Rand) mcState {
	return mcState{pos: uniform(rng, -0.6, -0.4)}
}

func (s mcState) observe(obs []float32) {
	obs = obs[:2:2]
	obs[0], obs[1] = float32(s.pos), float32(s.vel)
}

type mountainCar struct{ s []mcState }

func (m *mountainCar) Reset(i int, rng *rand.Rand, obs []float32) {
	m.s[i] = mountainCarReset(rng)
	m.s[i].observe(obs)
}

func (m *mountainCar) Step(a Actions, obs, rewards, terminated []float32) {
	s := m.s[:len(a.Discrete)]
	for i := range s {
		n, done := mountainCarStep(s[i], a.Discrete[i])
		s[i] = n
		n.observe(obs[2*i:])
		rewards[i] = -1
		terminated[i] = b2f(done)
	}
}

type mountainCarContinuous struct{ s []mcState }

func (m *mountainCarContinuous) Reset(i int, rng *rand.Rand, obs []float32) {
	m.s[i] = mountainCarReset(rng)
	m.s[i].observe(obs)
}

func (m *mountainCarContinuous) Step(a Actions, obs, rewards, terminated []float32) {
	s := m.s[:len(a.Box)]
	for i := range s {
		n, r, done := mountainCarContinuousStep(s[i], float64(a.Box[i]))
		s[i] = n
		n.observe(obs[2*i:])
		rewards[i] = float32(r)
		terminated[i] = b2f(done)
	}
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

func (d *mountainCar) stateFloats() []float64 { return float64s(d.s) }

func (d *mountainCarContinuous) stateFloats() []float64 { return float64s(d.s) }

// Package envs holds towerrl's environments: the Env and VecEnv contracts,
// their spaces, a registry by Gymnasium id, Gymnasium-exact classic control,
// and DeviceEnv, which puts a VecEnv's outputs on a device.
//
// # Environments
//
// Registered ids and their time limits (Gymnasium's max_episode_steps):
// CartPole-v1 (500), Pendulum-v1 (200), MountainCar-v0 (200),
// MountainCarContinuous-v0 (999) and Acrobot-v1 (500), plus RL Zoo's
// CartPoleNoVel-v1 (500): CartPole-v1 with the velocity entries of every
// observation set to 0 (MaskVelocityWrapper), the standard test that a
// recurrent policy's memory works. Their dynamics,
// constants, integrators, clipping, rewards, termination and reset
// distributions are those of Gymnasium's classic_control sources: the state
// is float64, observations are float32, and the arithmetic follows Python's
// order of evaluation, so a policy trained on Gymnasium (or SB3, CleanRL,
// RLlib on top of it) sees the same transitions here. Rewards are float32 in
// the buffers, as in Stable-Baselines3's VecEnv. Reset noise has Gymnasium's
// distributions but not numpy's bit stream.
//
// Make returns a VecEnv of N copies; New a single Env. An unknown id is an
// error that lists the known ones. Register adds an environment: it supplies
// a Spec and Dynamics (the transition of N copies, struct-of-arrays); the
// package adds the time limit, autoreset, action checking and seeding.
//
// # Buffers, autoreset and flags
//
// A VecEnv owns its Buffers (observations [N×obs], rewards, terminated,
// truncated [N], final observations [N×obs], all float32), allocated once and
// refilled in place. Terminated (the MDP reached a terminal state) and
// Truncated (the time limit cut the episode) are kept apart everywhere and
// reported as Gymnasium reports them: both can be 1 on the same step. An env
// whose episode ends is reset in the same Step: its Obs row is the new
// episode's first observation and its FinalObs row the old episode's last,
// for bootstrapping at truncation (the SB3 and EnvPool rule). CartPole's
// terminating step earns reward 1.
//
// # Actions
//
// Actions come in as N ints (Discrete) or N×dim float32 (Box). An index out
// of range, a buffer of the wrong length or kind, or a NaN or infinite value
// is an error (an *ActionError naming the env and the value) returned before
// any env moves; it never panics. Finite Box values outside the bounds are
// clipped where Gymnasium clips them (Pendulum clips the torque, and its
// reward uses the clipped torque; MountainCarContinuous clips the force but
// charges the unclipped action in its reward).
//
// # Seeding
//
// Env i of a VecEnv made with Config{Seed: s, Offset: k} draws its reset
// noise from a PCG stream derived from (s, k+i) alone. The same seed thus
// gives the same trajectories however the envs are spread over workers, and
// every env index gets a distinct stream. There is no global random state.
//
// # Lifecycle, threading, ownership
//
// Make (or New), Reset, then Step repeatedly; Close when done. Step before
// the first Reset returns ErrNeedsReset. A VecEnv, Env or DeviceEnv is owned
// by one goroutine at a time and is not safe for concurrent use; distinct
// values share nothing and may run in parallel (one per batcher worker). The
// registry is safe for concurrent use; Register is meant for init functions.
// Buffers and tensors belong to the environment that made them and stay at
// the same address for its whole life; their contents are valid until the
// next Reset or Step. Step allocates nothing.
package envs

"""NumPy copies of the environments the foreign-policy fixtures are scored on, and the evaluation loop.

Used by scripts/gen_fixtures_foreign.py (Debian's python3 with numpy; no Gymnasium needed).

    CartPole-v1       Gymnasium's CartPoleEnv ("euler" kinematics) in TimeLimit(500)
    CartPoleNoVel-v1  CartPole-v1 seen through RL Zoo's MaskVelocityWrapper: obs * [1, 0, 1, 0]
                      (the shape stays 4; the velocities read as 0)
    Pendulum-v1       Gymnasium's PendulumEnv (g = 10, max_speed 8, max_torque 2, dt 0.05) in
                      TimeLimit(200); it never terminates

Every env here is a batch of N independent copies stepped together. The state is float64 and the
observation float32, as in Gymnasium. Reset seeds each copy with its own numpy Generator, so episode
i of an evaluation always starts from the same state.
"""
import math

import numpy as np

# CartPole-v1 constants (gymnasium/envs/classic_control/cartpole.py).
CP_GRAVITY = 9.8
CP_MASSCART = 1.0
CP_MASSPOLE = 0.1
CP_TOTAL_MASS = CP_MASSPOLE + CP_MASSCART
CP_LENGTH = 0.5
CP_POLEMASS_LENGTH = CP_MASSPOLE * CP_LENGTH
CP_FORCE_MAG = 10.0
CP_TAU = 0.02
CP_THETA_THRESHOLD = 12 * 2 * math.pi / 360
CP_X_THRESHOLD = 2.4

# Pendulum-v1 constants (gymnasium/envs/classic_control/pendulum.py).
PD_MAX_SPEED = 8.0
PD_MAX_TORQUE = 2.0
PD_DT = 0.05
PD_G = 10.0
PD_M = 1.0
PD_L = 1.0

# MaskVelocityWrapper.velocity_indices["CartPole-v1"] in RL Zoo (rl_zoo3/wrappers.py).
NOVEL_MASK = np.array([1.0, 0.0, 1.0, 0.0], dtype=np.float32)


class CartPole:
    """A batch of CartPole-v1 copies. step() takes int actions (0 pushes left, 1 right)."""

    obs_dim = 4
    discrete = 2
    max_steps = 500

    def __init__(self, n, mask_velocity=False):
        self.n = n
        self.mask_velocity = mask_velocity
        self.state = np.zeros((n, 4), dtype=np.float64)
        self.t = np.zeros(n, dtype=np.int64)

    def reset(self, seeds):
        for i, s in enumerate(seeds):
            self.state[i] = np.random.default_rng(int(s)).uniform(-0.05, 0.05, size=4)
        self.t[:] = 0
        return self.observe()

    def observe(self):
        obs = self.state.astype(np.float32)
        if self.mask_velocity:
            obs = obs * NOVEL_MASK
        return obs

    def step(self, actions):
        x, x_dot, theta, theta_dot = (self.state[:, k].copy() for k in range(4))
        force = np.where(np.asarray(actions) == 1, CP_FORCE_MAG, -CP_FORCE_MAG)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + CP_POLEMASS_LENGTH * theta_dot ** 2 * sintheta) / CP_TOTAL_MASS
        thetaacc = (CP_GRAVITY * sintheta - costheta * temp) / (
            CP_LENGTH * (4.0 / 3.0 - CP_MASSPOLE * costheta ** 2 / CP_TOTAL_MASS))
        xacc = temp - CP_POLEMASS_LENGTH * thetaacc * costheta / CP_TOTAL_MASS
        x = x + CP_TAU * x_dot
        x_dot = x_dot + CP_TAU * xacc
        theta = theta + CP_TAU * theta_dot
        theta_dot = theta_dot + CP_TAU * thetaacc
        self.state = np.stack([x, x_dot, theta, theta_dot], axis=1)
        self.t += 1
        terminated = ((x < -CP_X_THRESHOLD) | (x > CP_X_THRESHOLD)
                      | (theta < -CP_THETA_THRESHOLD) | (theta > CP_THETA_THRESHOLD))
        truncated = self.t >= self.max_steps
        reward = np.ones(self.n, dtype=np.float64)
        return self.observe(), reward, terminated, truncated


def angle_normalize(x):
    return ((x + np.pi) % (2 * np.pi)) - np.pi


class Pendulum:
    """A batch of Pendulum-v1 copies. step() takes torques [n, 1] (clipped to +-2 here)."""

    obs_dim = 3
    discrete = 0
    max_steps = 200
    low = -PD_MAX_TORQUE
    high = PD_MAX_TORQUE

    def __init__(self, n):
        self.n = n
        self.th = np.zeros(n)
        self.thdot = np.zeros(n)
        self.t = np.zeros(n, dtype=np.int64)
        self.mask_velocity = False

    def reset(self, seeds):
        high = np.array([np.pi, 1.0])
        for i, s in enumerate(seeds):
            self.th[i], self.thdot[i] = np.random.default_rng(int(s)).uniform(low=-high, high=high)
        self.t[:] = 0
        return self.observe()

    def observe(self):
        return np.stack([np.cos(self.th), np.sin(self.th), self.thdot], axis=1).astype(np.float32)

    def step(self, actions):
        u = np.clip(np.asarray(actions, dtype=np.float64).reshape(self.n, -1)[:, 0],
                    -PD_MAX_TORQUE, PD_MAX_TORQUE)
        th, thdot = self.th, self.thdot
        costs = angle_normalize(th) ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
        newthdot = thdot + (3 * PD_G / (2 * PD_L) * np.sin(th) + 3.0 / (PD_M * PD_L ** 2) * u) * PD_DT
        newthdot = np.clip(newthdot, -PD_MAX_SPEED, PD_MAX_SPEED)
        self.th = th + newthdot * PD_DT
        self.thdot = newthdot
        self.t += 1
        terminated = np.zeros(self.n, dtype=bool)
        truncated = self.t >= self.max_steps
        return self.observe(), -costs, terminated, truncated


ENVS = {
    "CartPole-v1": lambda n: CartPole(n),
    "CartPoleNoVel-v1": lambda n: CartPole(n, mask_velocity=True),
    "Pendulum-v1": lambda n: Pendulum(n),
}


def make(env_id, n):
    return ENVS[env_id](n)


def rollout(env_id, policy, episodes, seed, record=False):
    """Runs `episodes` episodes side by side (episode i reset with seed + i) until every one ends.

    policy(obs, env) -> actions gets the observations of all copies, finished ones included (their
    actions are ignored); a recurrent policy keeps its own state, which needs no reset since every
    copy plays exactly one episode. Returns the per-episode returns, and with record=True also a
    dict of per-step arrays [T, N, ...]: obs, true state (CartPole) and alive mask.
    """
    env = make(env_id, episodes)
    obs = env.reset([seed + i for i in range(episodes)])
    returns = np.zeros(episodes)
    alive = np.ones(episodes, dtype=bool)
    rec = {"obs": [], "state": [], "alive": []}
    while alive.any():
        if record:
            rec["obs"].append(obs.copy())
            rec["state"].append(env.state.astype(np.float32).copy() if hasattr(env, "state")
                                else env.observe())
            rec["alive"].append(alive.copy())
        actions = policy(obs, env)
        obs, reward, terminated, truncated = env.step(actions)
        returns += np.where(alive, reward, 0.0)
        alive &= ~(terminated | truncated)
    if record:
        return returns, {k: np.stack(v) for k, v in rec.items()}
    return returns

#!/usr/bin/python3
"""Export DQN fixtures (issue 30 item 5) into testdata/dqn/: a CartPole Q-network laid out as
SB3's DQN builds it, exported the two ways SB3 users do, and as CleanRL's dqn.py builds it.

Run with Debian's python3 (python3-torch, python3-onnx, python3-numpy); SB3 itself is not
needed: the modules below carry SB3's attribute names (stable_baselines3/dqn/policies.py
QNetwork and DQNPolicy, common/torch_layers.py FlattenExtractor), so the exported parameter
and node names are those of an SB3 export:

    /usr/bin/python3 scripts/gen_fixture_sb3_dqn.py

The network is DQN's MlpPolicy with net_arch [64, 64] and activation_fn Tanh, its weights
copied from the CartPole teacher's actor (testdata/foreign/teachers/cartpole_ppo.onnx): its
Q-values are the teacher's logits, so acting greedily on them is the teacher's deterministic
policy. For NAME in

    sb3_dqn_cartpole       SB3's current recipe (docs 'Exporting models'): OnnxableSB3Policy
                           returning model.policy(obs, deterministic=True), the greedy actions
                           (int64 [batch]); the Q-values are an inner tensor
    sb3_dqn_cartpole_qnet  the older recipe (the docs' SAC example applied to DQN): a wrapper
                           of model.policy.q_net alone, whose output is the Q-values
                           [batch, 2]
    cleanrl_dqn_cartpole   CleanRL's QNetwork (dqn.py: one nn.Sequential, network) exported
                           with torch.onnx.export's defaults, as CleanRL has no export of its
                           own: input and output auto-named, the output the Q-values

it writes NAME.onnx (batch fixed at 1, opset 17, as the docs export), and once:
    sb3_dqn.input.npy      16 CartPole observations
    sb3_dqn.qvalues.npy    PyTorch's Q-values of those rows
    sb3_dqn.actions.npy    their argmax (int64)
    sb3_dqn.json           PyTorch's greedy return (50 episodes, seeds 10000..10049)
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_envs as fe  # noqa: E402
from gen_fixtures_foreign import EVAL_EPISODES, EVAL_SEED, TEACHERS, Teacher, cartpole_rows, copy_linear  # noqa: E402

OUT = os.path.join(HERE, "..", "testdata", "dqn")
torch.set_num_threads(1)
warnings.filterwarnings("ignore")


class FlattenExtractor(nn.Module):
    """SB3's FlattenExtractor: the observation flattened."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()

    def forward(self, observations):
        return self.flatten(observations)


class QNetwork(nn.Module):
    """SB3's QNetwork: features_extractor, then q_net, an MLP to one Q-value per action."""

    def __init__(self, obs_dim, n_actions, net_arch=(64, 64), activation_fn=nn.Tanh):
        super().__init__()
        self.features_extractor = FlattenExtractor()
        layers, last = [], obs_dim
        for width in net_arch:
            layers += [nn.Linear(last, width), activation_fn()]
            last = width
        layers.append(nn.Linear(last, n_actions))
        self.q_net = nn.Sequential(*layers)

    def forward(self, obs):
        return self.q_net(self.features_extractor(obs))

    def _predict(self, observation, deterministic=True):
        return self(observation).argmax(dim=1).reshape(-1)


class DQNPolicy(nn.Module):
    """SB3's DQNPolicy: q_net and q_net_target (a copy), acting greedily."""

    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.q_net = QNetwork(obs_dim, n_actions)
        self.q_net_target = QNetwork(obs_dim, n_actions)
        self.q_net_target.load_state_dict(self.q_net.state_dict())

    def forward(self, obs, deterministic=True):
        return self._predict(obs, deterministic=deterministic)

    def _predict(self, obs, deterministic=True):
        return self.q_net._predict(obs, deterministic=deterministic)


class CleanRLQNetwork(nn.Module):
    """CleanRL's dqn.py QNetwork: network, an nn.Sequential to one Q-value per action (the
    teacher's 64x64 Tanh layers here, where dqn.py has 120x84 ReLU ones)."""

    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                                     nn.Linear(64, n_actions))

    def forward(self, x):
        return self.network(x)


class OnnxableSB3Policy(nn.Module):
    """SB3 docs, current: the policy's forward, deterministic."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, observation):
        return self.policy(observation, deterministic=True)


class OnnxableQNetwork(nn.Module):
    """The older recipe: the Q-network alone, as the docs export SAC's actor."""

    def __init__(self, q_net):
        super().__init__()
        self.q_net = q_net

    def forward(self, observation):
        return self.q_net(observation)


def main():
    teacher = Teacher(os.path.join(TEACHERS, "cartpole_ppo.onnx"))
    torch.manual_seed(30)
    policy = DQNPolicy(4, 2)
    for k in (0, 2, 4):
        copy_linear(policy.q_net.q_net[k], teacher, f"actor.{k}")
    policy.q_net_target.load_state_dict(policy.q_net.state_dict())
    policy.eval()
    os.makedirs(OUT, exist_ok=True)
    for name, module in (("sb3_dqn_cartpole", OnnxableSB3Policy(policy)),
                         ("sb3_dqn_cartpole_qnet", OnnxableQNetwork(policy.q_net))):
        torch.onnx.export(module.eval(), (torch.randn(1, 4),), os.path.join(OUT, name + ".onnx"), export_params=True,
                          do_constant_folding=True, input_names=["input"], opset_version=17)
    cleanrl = CleanRLQNetwork(4, 2)
    cleanrl.network.load_state_dict(policy.q_net.q_net.state_dict())
    torch.onnx.export(cleanrl.eval(), (torch.randn(1, 4),), os.path.join(OUT, "cleanrl_dqn_cartpole.onnx"),
                      opset_version=17)
    rows = cartpole_rows(teacher, 35).astype(np.float32)
    with torch.no_grad():
        q = policy.q_net(torch.from_numpy(rows))
    np.save(os.path.join(OUT, "sb3_dqn.input.npy"), rows)
    np.save(os.path.join(OUT, "sb3_dqn.qvalues.npy"), q.numpy().astype(np.float32))
    np.save(os.path.join(OUT, "sb3_dqn.actions.npy"), q.argmax(1).numpy().astype(np.int64))

    meta = {"env": "CartPole-v1", "head": "qvalues", "pytorch_greedy_return": greedy_return(policy.q_net)}
    write_meta("sb3_dqn", meta)
    print(meta["pytorch_greedy_return"])


def greedy_return(q_net):
    """PyTorch's return of q_net acting greedily on CartPole-v1, over the episodes every foreign
    fixture is scored on."""

    def act(o, env):
        with torch.no_grad():
            return q_net(torch.from_numpy(np.asarray(o, dtype=np.float32))).argmax(1).numpy()

    returns = fe.rollout("CartPole-v1", act, EVAL_EPISODES, EVAL_SEED)
    return {"mean": float(returns.mean()), "std": float(returns.std()), "episodes": EVAL_EPISODES,
            "seeds": f"{EVAL_SEED}..{EVAL_SEED + EVAL_EPISODES - 1}"}


def write_meta(name, meta):
    """Writes meta as testdata/dqn/NAME.json."""
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

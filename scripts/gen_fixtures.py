#!/usr/bin/python3
"""Export reference policies with torch.onnx.export into testdata/, with inputs and PyTorch's outputs.

Run with Debian's python3 (packages python3-torch, python3-onnx, python3-numpy):

    /usr/bin/python3 scripts/gen_fixtures.py

CI never runs this; its outputs are committed. For each model NAME it writes
    testdata/NAME.onnx                 the policy
    testdata/NAME.input.npy            a batch of observations (float32)
    testdata/NAME.<output>.npy         PyTorch's output for that batch, one file per output
The input and output names differ from one model to the next on purpose.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")
BATCH = 16


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    # CleanRL's initialisation: orthogonal weights with a per-layer gain, constant bias.
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class MLPActorCritic(nn.Module):
    """CleanRL's CartPole agent: separate 64x64 tanh trunks for the actor and the critic."""

    def __init__(self, obs_dim=4, n_actions=2):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0))
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, n_actions), std=0.01))

    def forward(self, obs):
        return self.actor(obs), self.critic(obs)


class GaussianPolicy(nn.Module):
    """ReLU Gaussian policy for Pendulum with a state-independent log_std parameter."""

    def __init__(self, obs_dim=3, act_dim=1):
        super().__init__()
        self.net = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 32)), nn.ReLU(),
            layer_init(nn.Linear(32, 32)), nn.ReLU(),
            layer_init(nn.Linear(32, act_dim), std=0.5))
        self.log_std = nn.Parameter(torch.full((1, act_dim), -0.5))

    def forward(self, observation):
        mu = self.net(observation)
        return mu, self.log_std.expand_as(mu)


class NatureCNN(nn.Module):
    """The Nature DQN trunk (Mnih et al. 2015) as CleanRL's Atari PPO agent uses it, 84x84x4 frames."""

    def __init__(self, n_actions=6):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU())
        self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    def forward(self, pixels):
        hidden = self.network(pixels / 255.0)
        return self.actor(hidden), self.critic(hidden)


def export(name, model, x, input_name, output_names, opset, metadata):
    model.eval()
    path = os.path.join(OUT, name + ".onnx")
    dyn = {input_name: {0: "batch"}}
    for o in output_names:
        dyn[o] = {0: "batch"}
    torch.onnx.export(model, (x,), path, input_names=[input_name], output_names=output_names,
                      dynamic_axes=dyn, opset_version=opset, do_constant_folding=True)
    m = onnx.load(path)
    for k, v in metadata.items():
        p = m.metadata_props.add()
        p.key, p.value = k, v
    m.producer_name = "pytorch"
    onnx.checker.check_model(m)
    onnx.save(m, path)
    with torch.no_grad():
        outs = model(x)
    np.save(os.path.join(OUT, name + ".input.npy"), x.numpy().astype(np.float32))
    for o, y in zip(output_names, outs):
        np.save(os.path.join(OUT, name + "." + o + ".npy"), y.detach().numpy().astype(np.float32))
    print("wrote", path, [i.name for i in m.graph.input], [o.name for o in m.graph.output],
          "opset", m.opset_import[0].version, file=sys.stderr)


def main():
    torch.manual_seed(1234)
    os.makedirs(OUT, exist_ok=True)

    # CartPole-shaped observations: positions and velocities of a few units.
    x = (torch.rand(BATCH, 4) * 2 - 1) * torch.tensor([2.4, 3.0, 0.21, 3.0])
    export("mlp_tanh", MLPActorCritic(), x, "obs", ["logits", "value"], 13, {
        "towerrl.env_id": "CartPole-v1",
        "towerrl.obs_shape": "4",
        "towerrl.action_space": "discrete:2",
        "towerrl.head": "categorical",
        "towerrl.version": "0",
    })

    # Pendulum-shaped observations: cos, sin, angular velocity. No towerrl metadata: a foreign policy.
    th = torch.rand(BATCH) * 2 * np.pi - np.pi
    x = torch.stack([torch.cos(th), torch.sin(th), torch.rand(BATCH) * 16 - 8], dim=1)
    export("gaussian_relu", GaussianPolicy(), x, "observation", ["mu", "log_std"], 13, {})

    # Atari-shaped frames, values 0..255 held in float32.
    x = torch.randint(0, 256, (8, 4, 84, 84)).float()
    export("nature_cnn", NatureCNN(), x, "pixels", ["action_logits", "state_value"], 13, {
        "towerrl.env_id": "ALE/Pong-v5",
        "towerrl.obs_shape": "4,84,84",
        "towerrl.action_space": "discrete:6",
        "towerrl.head": "categorical",
        "towerrl.version": "0",
    })


if __name__ == "__main__":
    main()

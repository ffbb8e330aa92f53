#!/usr/bin/python3
"""Export the foreign-policy fixtures (issue 12) into testdata/foreign/: policies built and exported
the way the popular RL libraries build and export them, each trained to earn a real return.

Run with Debian's python3 (packages python3-torch, python3-onnx, python3-numpy; no Gymnasium, no
onnxruntime, no RL library):

    /usr/bin/python3 scripts/gen_fixtures_foreign.py            # everything (a few minutes)
    /usr/bin/python3 scripts/gen_fixtures_foreign.py --only sb3_ppo_cartpole,sf_cartpole_gru
    /usr/bin/python3 scripts/gen_fixtures_foreign.py --verify   # re-check what is on disk

Every network here is this script's own re-creation of a library's module layout (attribute names,
so initializer and node names come out as the library's do) and of its documented export call
(input/output names, opset, dynamic axes or a fixed batch of 1); no library code is copied. The
sources each one follows are named in its class docstring and in NAME.json's "recipe".

The policies are taught by towerrl's own PPO policies (testdata/foreign/teachers/*.onnx, from
`train --env CartPole-v1 --total-steps 500000 --seed 1` and `train --config configs/pendulum-ppo.json`),
whose initializers are read with onnx.numpy_helper and run in numpy. A student whose layout matches
the teacher's (64x64 tanh MLPs) gets the teacher's weights; every other student is behaviour-cloned
on teacher-labelled states (DAgger), the recurrent ones on CartPoleNoVel-v1 sequences. Returns are
measured on numpy copies of the environments (scripts/fixture_envs.py), deterministically, over 50
episodes with fixed seeds. Seeds are fixed throughout and torch runs on one thread, so a rerun
rewrites the same numbers.

For each fixture NAME it writes into testdata/foreign/:
    NAME.onnx                 the export
    NAME.input.npy            16 observations (the dtype the graph takes)
    NAME.<output>.npy         PyTorch's value of each graph output for those rows (the output's
                              name with characters outside [A-Za-z0-9_] made '_'); a fixed-batch
                              export is run one row at a time and the rows are joined on the
                              output's batch axis
    NAME.seq_obs.npy          recurrent only: [T=32, B=4, obs] sequences, and
    NAME.seq_<output>.npy     PyTorch stepping them from a zero state, carrying the state, no reset
    NAME.json                 what the graph is, where its logits/mean/value live, the return
and README.md, the table of all of them.
"""
import argparse
import collections
import json
import math
import os
import re
import sys
import time
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import numpy_helper
from torch.distributions import Categorical, Normal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_envs as fe  # noqa: E402
from gen_fixtures import MLPActorCritic, layer_init  # noqa: E402  (CleanRL's agent and init)

OUT = os.path.join(HERE, "..", "testdata", "foreign")
TEACHERS = os.path.join(OUT, "teachers")
ROWS = 16            # rows in NAME.input.npy
SEQ_T, SEQ_B = 32, 4  # recurrent sequence files
EVAL_EPISODES = 50
EVAL_SEED = 10_000   # episode i of every evaluation starts from seed EVAL_SEED + i
TRAIN_SEED = 20_000  # training rollouts use seeds from here on, never the evaluation's

warnings.filterwarnings("ignore")  # TracerWarnings from the data-dependent Python branches
torch.set_num_threads(1)

# ---------------------------------------------------------------------------------------------
# Teachers: towerrl's PPO policies, run in numpy from their ONNX initializers.


class Teacher:
    """A towerrl policy.onnx (Gemm/Tanh MLPs, plus Shape/Expand for log_std) run in numpy."""

    def __init__(self, path):
        self.path = path
        self.model = onnx.load(path)
        self.w = {i.name: numpy_helper.to_array(i) for i in self.model.graph.initializer}
        self.input = self.model.graph.input[0].name

    def run(self, obs):
        env = dict(self.w)
        env[self.input] = np.asarray(obs, dtype=np.float32)
        for n in self.model.graph.node:
            a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
            x = [env[k] for k in n.input]
            if n.op_type == "Gemm":
                A = x[0].T if a.get("transA", 0) else x[0]
                B = x[1].T if a.get("transB", 0) else x[1]
                y = a.get("alpha", 1.0) * (A @ B) + a.get("beta", 1.0) * x[2]
            elif n.op_type == "Tanh":
                y = np.tanh(x[0])
            elif n.op_type == "Shape":
                y = np.array(x[0].shape, dtype=np.int64)
            elif n.op_type == "Expand":
                y = x[0] * np.ones(x[1], dtype=x[0].dtype)
            else:
                raise ValueError(f"teacher {self.path}: op {n.op_type} not handled")
            env[n.output[0]] = y.astype(np.float32) if y.dtype.kind == "f" else y
        return {o.name: env[o.name] for o in self.model.graph.output}

    def linear(self, prefix):
        """Weight [out, in] (torch's layout) and bias of the Gemm whose initializers start prefix."""
        w, b = self.w[prefix + ".weight"], self.w[prefix + ".bias"]
        return w.T.copy(), b.copy()


def copy_linear(dst, teacher, prefix):
    w, b = teacher.linear(prefix)
    with torch.no_grad():
        dst.weight.copy_(torch.from_numpy(w))
        dst.bias.copy_(torch.from_numpy(b))


# ---------------------------------------------------------------------------------------------
# Stable-Baselines3 (stable_baselines3/common/policies.py ActorCriticPolicy, torch_layers.py
# FlattenExtractor/NatureCNN/MlpExtractor, distributions.py, preprocessing.preprocess_obs,
# sac/policies.py Actor). Attribute names follow SB3 so the exported names are SB3's.


class SB3FlattenExtractor(nn.Module):
    def __init__(self, obs_dim):
        super().__init__()
        self.features_dim = obs_dim
        self.flatten = nn.Flatten()

    def forward(self, observations):
        return self.flatten(observations)


class SB3NatureCNN(nn.Module):
    """SB3's NatureCNN layout (cnn: 3 convs + Flatten, linear: Linear + ReLU), with fewer channels
    (16/32/16 instead of 32/64/64) and features_dim 64 instead of 512 to keep the file small."""

    def __init__(self, n_input_channels=4, features_dim=64, channels=(16, 32, 16)):
        super().__init__()
        c0, c1, c2 = channels
        self.features_dim = features_dim
        self.cnn = nn.Sequential(
            nn.Conv2d(n_input_channels, c0, kernel_size=8, stride=4, padding=0), nn.ReLU(),
            nn.Conv2d(c0, c1, kernel_size=4, stride=2, padding=0), nn.ReLU(),
            nn.Conv2d(c1, c2, kernel_size=3, stride=1, padding=0), nn.ReLU(),
            nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(c2 * 7 * 7, features_dim), nn.ReLU())

    def forward(self, observations):
        return self.linear(self.cnn(observations))


class SB3MlpExtractor(nn.Module):
    def __init__(self, feature_dim, net_arch, activation_fn):
        super().__init__()
        pi_dims = net_arch.get("pi", []) if isinstance(net_arch, dict) else net_arch
        vf_dims = net_arch.get("vf", []) if isinstance(net_arch, dict) else net_arch
        policy_net, value_net = [], []
        last_pi = last_vf = feature_dim
        for d in pi_dims:
            policy_net += [nn.Linear(last_pi, d), activation_fn()]
            last_pi = d
        for d in vf_dims:
            value_net += [nn.Linear(last_vf, d), activation_fn()]
            last_vf = d
        self.latent_dim_pi, self.latent_dim_vf = last_pi, last_vf
        self.policy_net = nn.Sequential(*policy_net)
        self.value_net = nn.Sequential(*value_net)

    def forward(self, features):
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features):
        return self.policy_net(features)

    def forward_critic(self, features):
        return self.value_net(features)


class SB3CategoricalDistribution:
    def __init__(self, action_dim):
        self.action_dim = action_dim

    def proba_distribution_net(self, latent_dim):
        return nn.Linear(latent_dim, self.action_dim)

    def proba_distribution(self, action_logits):
        self.distribution = Categorical(logits=action_logits)
        return self

    def mode(self):
        return torch.argmax(self.distribution.probs, dim=1)

    def get_actions(self, deterministic=False):
        return self.mode() if deterministic else self.distribution.sample()

    def log_prob(self, actions):
        return self.distribution.log_prob(actions)


def sum_independent_dims(t):
    return t.sum(dim=1) if len(t.shape) > 1 else t.sum()


class SB3DiagGaussianDistribution:
    def __init__(self, action_dim):
        self.action_dim = action_dim

    def proba_distribution_net(self, latent_dim, log_std_init=0.0):
        return (nn.Linear(latent_dim, self.action_dim),
                nn.Parameter(torch.ones(self.action_dim) * log_std_init, requires_grad=True))

    def proba_distribution(self, mean_actions, log_std):
        action_std = torch.ones_like(mean_actions) * log_std.exp()
        self.distribution = Normal(mean_actions, action_std)
        return self

    def mode(self):
        return self.distribution.mean

    def get_actions(self, deterministic=False):
        return self.mode() if deterministic else self.distribution.rsample()

    def log_prob(self, actions):
        return sum_independent_dims(self.distribution.log_prob(actions))


class SB3SquashedDiagGaussianDistribution(SB3DiagGaussianDistribution):
    def mode(self):
        return torch.tanh(self.distribution.mean)

    def get_actions(self, deterministic=False):
        return self.mode() if deterministic else torch.tanh(self.distribution.rsample())


class SB3ActorCriticPolicy(nn.Module):
    """SB3's ActorCriticPolicy (MlpPolicy/CnnPolicy) with a shared features extractor.

    action is ("discrete", n) or ("box", dim). forward(obs, deterministic) returns
    (actions, values, log_prob) as SB3's does; extract_features runs preprocess_obs first
    (obs.float(), divided by 255 for image spaces)."""

    def __init__(self, obs_dim, action, net_arch=None, activation_fn=nn.Tanh, features_extractor=None,
                 image=False, log_std_init=0.0, mlp_feature_dim=None):
        super().__init__()
        self.image = image
        self.features_extractor = features_extractor or SB3FlattenExtractor(obs_dim)
        self.pi_features_extractor = self.features_extractor
        self.vf_features_extractor = self.features_extractor
        self.features_dim = self.features_extractor.features_dim
        if net_arch is None:
            net_arch = [] if isinstance(self.features_extractor, SB3NatureCNN) else dict(pi=[64, 64], vf=[64, 64])
        self.mlp_extractor = SB3MlpExtractor(mlp_feature_dim or self.features_dim, net_arch, activation_fn)
        kind, n = action
        if kind == "discrete":
            self.action_dist = SB3CategoricalDistribution(n)
            self.action_net = self.action_dist.proba_distribution_net(self.mlp_extractor.latent_dim_pi)
            self.action_shape = ()
        else:
            self.action_dist = SB3DiagGaussianDistribution(n)
            self.action_net, self.log_std = self.action_dist.proba_distribution_net(
                self.mlp_extractor.latent_dim_pi, log_std_init)
            self.action_shape = (n,)
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)

    def extract_features(self, obs):
        preprocessed = obs.float() / 255.0 if self.image else obs.float()
        return self.features_extractor(preprocessed)

    def _get_action_dist_from_latent(self, latent_pi):
        mean_actions = self.action_net(latent_pi)
        if isinstance(self.action_dist, SB3DiagGaussianDistribution):
            return self.action_dist.proba_distribution(mean_actions, self.log_std)
        return self.action_dist.proba_distribution(action_logits=mean_actions)

    def forward(self, obs, deterministic=False):
        features = self.extract_features(obs)
        latent_pi, latent_vf = self.mlp_extractor(features)
        values = self.value_net(latent_vf)
        distribution = self._get_action_dist_from_latent(latent_pi)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        actions = actions.reshape((-1, *self.action_shape))
        return actions, values, log_prob


class OnnxableSB3Policy(nn.Module):
    """SB3 docs, "Exporting models" (current): wraps model.policy, returns policy(obs, deterministic=True)."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, observation):
        return self.policy(observation, deterministic=True)


class OnnxablePolicy(nn.Module):
    """SB3 docs before January 2024 (PR #1816): OnnxablePolicy(mlp_extractor, action_net, value_net),
    returning action_net and value_net outputs (no preprocessing, no distribution)."""

    def __init__(self, extractor, action_net, value_net):
        super().__init__()
        self.extractor = extractor
        self.action_net = action_net
        self.value_net = value_net

    def forward(self, observation):
        action_hidden, value_hidden = self.extractor(observation)
        return self.action_net(action_hidden), self.value_net(value_hidden)


class VecNormalizeSB3Policy(nn.Module):
    """OnnxableSB3Policy with VecNormalize's observation statistics baked in as buffers:
    clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs) (vec_normalize.py _normalize_obs)."""

    def __init__(self, policy, mean, var, clip_obs=10.0, epsilon=1e-8):
        super().__init__()
        self.policy = policy
        self.register_buffer("obs_mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("obs_var", torch.as_tensor(var, dtype=torch.float32))
        self.clip_obs = clip_obs
        self.epsilon = epsilon

    def forward(self, observation):
        obs = torch.clamp((observation - self.obs_mean) / torch.sqrt(self.obs_var + self.epsilon),
                          -self.clip_obs, self.clip_obs)
        return self.policy(obs, deterministic=True)


LOG_STD_MIN, LOG_STD_MAX = -20, 2


class SB3SACActor(nn.Module):
    """SB3's SAC Actor: latent_pi (256x256 ReLU), mu, log_std (a Linear, clamped to [-20, 2]),
    squashed Gaussian; forward(obs, deterministic=True) is tanh(mu): actions in [-1, 1]."""

    def __init__(self, obs_dim, action_dim, net_arch=(256, 256), activation_fn=nn.ReLU):
        super().__init__()
        self.features_extractor = SB3FlattenExtractor(obs_dim)
        layers, last = [], obs_dim
        for d in net_arch:
            layers += [nn.Linear(last, d), activation_fn()]
            last = d
        self.latent_pi = nn.Sequential(*layers)
        self.action_dist = SB3SquashedDiagGaussianDistribution(action_dim)
        self.mu = nn.Linear(last, action_dim)
        self.log_std = nn.Linear(last, action_dim)

    def get_action_dist_params(self, obs):
        features = self.features_extractor(obs.float())
        latent_pi = self.latent_pi(features)
        mean_actions = self.mu(latent_pi)
        log_std = torch.clamp(self.log_std(latent_pi), LOG_STD_MIN, LOG_STD_MAX)
        return mean_actions, log_std, {}

    def forward(self, obs, deterministic=False):
        mean_actions, log_std, _ = self.get_action_dist_params(obs)
        return self.action_dist.proba_distribution(mean_actions, log_std).get_actions(deterministic)


class OnnxableSACActor(nn.Module):
    """SB3 docs' SAC export: OnnxablePolicy(model.policy.actor) returning actor(obs, deterministic=True)."""

    def __init__(self, actor):
        super().__init__()
        self.actor = actor

    def forward(self, observation):
        return self.actor(observation, deterministic=True)


class ScaledSACActor(nn.Module):
    """The SB3 docs' SAC export with the docs' post-processing moved into the graph:
    low + 0.5 * (action + 1) * (high - low)."""

    def __init__(self, actor, low, high):
        super().__init__()
        self.actor = actor
        self.register_buffer("low", torch.tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(high, dtype=torch.float32))

    def forward(self, observation):
        scaled_action = self.actor(observation, deterministic=True)
        return self.low + (0.5 * (scaled_action + 1.0) * (self.high - self.low))


# ---------------------------------------------------------------------------------------------
# CleanRL (ppo.py Agent: critic/actor; ppo_continuous_action.py Agent: critic/actor_mean/
# actor_logstd). CleanRL ships no exporter: a user wraps the agent and calls torch.onnx.export
# with named outputs and a dynamic batch.


class CleanRLContinuousAgent(nn.Module):
    def __init__(self, obs_dim=3, act_dim=1):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0))
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))


class CleanRLContinuousExport(nn.Module):
    def __init__(self, agent):
        super().__init__()
        self.agent = agent

    def forward(self, obs):
        action_mean = self.agent.actor_mean(obs)
        return action_mean, self.agent.actor_logstd.expand_as(action_mean), self.agent.critic(obs)


class MLPAgent(nn.Module):
    """A CleanRL-style agent (separate actor and critic Sequentials) with a chosen activation and,
    optionally, nn.LayerNorm after each hidden Linear; forward returns (logits, value)."""

    def __init__(self, activation=nn.Tanh, layer_norm=False, obs_dim=4, n_actions=2, hidden=64):
        super().__init__()

        def trunk(out, std):
            layers, last = [], obs_dim
            for _ in range(2):
                layers.append(layer_init(nn.Linear(last, hidden)))
                if layer_norm:
                    layers.append(nn.LayerNorm(hidden))
                layers.append(activation())
                last = hidden
            layers.append(layer_init(nn.Linear(last, out), std=std))
            return nn.Sequential(*layers)

        self.critic = trunk(1, 1.0)
        self.actor = trunk(n_actions, 0.01)

    def forward(self, obs):
        return self.actor(obs), self.critic(obs)


# ---------------------------------------------------------------------------------------------
# RLlib, old API stack (rllib/models/modelv2.py ModelV2.__call__, models/torch/fcnet.py
# FullyConnectedNetwork, models/torch/misc.py SlimFC, models/torch/recurrent_net.py
# RecurrentNetwork/LSTMWrapper, policy/rnn_sequencing.py add_time_dimension, policy/
# torch_policy_v2.py export_model, examples/_old_api_stack/catalogs/onnx_torch_lstm.py).


def normc_initializer(std=1.0):
    def init(tensor):
        with torch.no_grad():
            tensor.normal_(0, 1)
            tensor.mul_(std / torch.sqrt(tensor.pow(2).sum(1, keepdim=True)))
    return init


class SlimFC(nn.Module):
    def __init__(self, in_size, out_size, initializer=None, activation_fn=None, bias_init=0.0):
        super().__init__()
        layers = []
        linear = nn.Linear(in_size, out_size, bias=True)
        if initializer is not None:
            initializer(linear.weight)
        nn.init.constant_(linear.bias, bias_init)
        layers.append(linear)
        if activation_fn == "tanh":
            layers.append(nn.Tanh())
        elif activation_fn == "relu":
            layers.append(nn.ReLU())
        self._model = nn.Sequential(*layers)

    def forward(self, x):
        return self._model(x)


class RLlibModelV2(nn.Module):
    """ModelV2.__call__ in front of forward(input_dict, state, seq_lens): ModelV2 precedes nn.Module
    in TorchModelV2's MRO, so exporting the model traces this __call__."""

    def __call__(self, input_dict, state=None, seq_lens=None):
        restored = dict(input_dict)
        if len(input_dict["obs"].shape) > 2:
            restored["obs_flat"] = torch.flatten(input_dict["obs"], start_dim=1)
        else:
            restored["obs_flat"] = input_dict["obs"]
        outputs, state_out = self.forward(restored, state or [], seq_lens)
        if len(outputs.shape) != 2 or int(outputs.shape[1]) != self.num_outputs:
            raise ValueError(f"expected output shape [None, {self.num_outputs}], got {outputs.shape}")
        return outputs, state_out


class RLlibFCNet(RLlibModelV2):
    """FullyConnectedNetwork: _hidden_layers (SlimFC, normc(1.0)), _logits (normc(0.01)), and with
    vf_share_layers=False a separate _value_branch_separate trunk feeding _value_branch."""

    def __init__(self, obs_dim, num_outputs, fcnet_hiddens=(256, 256), fcnet_activation="tanh",
                 vf_share_layers=False):
        super().__init__()
        hiddens = list(fcnet_hiddens)
        self.num_outputs = num_outputs
        layers, prev = [], obs_dim
        for size in hiddens[:-1]:
            layers.append(SlimFC(prev, size, normc_initializer(1.0), fcnet_activation))
            prev = size
        self._logits = None
        if hiddens:
            layers.append(SlimFC(prev, hiddens[-1], normc_initializer(1.0), fcnet_activation))
            prev = hiddens[-1]
        if num_outputs:
            self._logits = SlimFC(prev, num_outputs, normc_initializer(0.01), None)
        else:
            self.num_outputs = ([obs_dim] + hiddens[-1:])[-1]
        self._hidden_layers = nn.Sequential(*layers)
        self._value_branch_separate = None
        if not vf_share_layers:
            vf, prev_vf = [], obs_dim
            for size in hiddens:
                vf.append(SlimFC(prev_vf, size, normc_initializer(1.0), fcnet_activation))
                prev_vf = size
            self._value_branch_separate = nn.Sequential(*vf)
        self._value_branch = SlimFC(prev, 1, normc_initializer(0.01), None)
        self._features = None
        self._last_flat_in = None

    def forward(self, input_dict, state, seq_lens):
        obs = input_dict["obs_flat"].float()
        self._last_flat_in = obs.reshape(obs.shape[0], -1)
        self._features = self._hidden_layers(self._last_flat_in)
        logits = self._logits(self._features) if self._logits else self._features
        return logits, state

    def value_function(self):
        if self._value_branch_separate:
            return self._value_branch(self._value_branch_separate(self._last_flat_in)).squeeze(1)
        return self._value_branch(self._features).squeeze(1)


def add_time_dimension(padded_inputs, seq_lens):
    """rnn_sequencing.add_time_dimension for torch, batch-major: [B*T, ...] -> [B, T, ...]."""
    padded_batch_size = padded_inputs.shape[0]
    max_seq_len = padded_batch_size // seq_lens.shape[0]
    new_batch_size = padded_batch_size // max_seq_len
    new_shape = (new_batch_size, max_seq_len) + padded_inputs.shape[1:]
    return torch.reshape(padded_inputs, new_shape)


class RLlibLSTMWrapper(RLlibFCNet):
    """LSTMWrapper around FullyConnectedNetwork as ModelCatalog builds it for use_lstm=True: the FC
    trunk (num_outputs=None, so no _logits), an nn.LSTM (batch_first), _logits_branch and
    _value_branch SlimFCs (xavier_uniform)."""

    def __init__(self, obs_dim, num_outputs, fcnet_hiddens=(64, 64), lstm_cell_size=64):
        super().__init__(obs_dim, None, fcnet_hiddens, "tanh", False)
        self.cell_size = lstm_cell_size
        self.lstm = nn.LSTM(self.num_outputs, self.cell_size, batch_first=True)
        self.num_outputs = num_outputs
        self._logits_branch = SlimFC(self.cell_size, num_outputs, nn.init.xavier_uniform_, None)
        self._value_branch = SlimFC(self.cell_size, 1, nn.init.xavier_uniform_, None)

    def forward(self, input_dict, state, seq_lens):
        wrapped_out, _ = RLlibFCNet.forward(self, input_dict, [], None)
        input_dict["obs_flat"] = wrapped_out
        # RecurrentNetwork.forward
        flat_inputs = input_dict["obs_flat"].float()
        inputs = add_time_dimension(flat_inputs, seq_lens)
        output, new_state = self.forward_rnn(inputs, state, seq_lens)
        output = torch.reshape(output, [-1, self.num_outputs])
        return output, new_state

    def forward_rnn(self, inputs, state, seq_lens):
        self._features, [h, c] = self.lstm(inputs, [torch.unsqueeze(state[0], 0), torch.unsqueeze(state[1], 0)])
        model_out = self._logits_branch(self._features)
        return model_out, [torch.squeeze(h, 0), torch.squeeze(c, 0)]

    def value_function(self):
        return torch.reshape(self._value_branch(self._features), [-1])


class ONNXCompatibleWrapper(nn.Module):
    """RLlib's example (examples/_old_api_stack/catalogs/onnx_torch_lstm.py) for exporting an LSTM
    model: separate state tensors in and out."""

    def __init__(self, original_model):
        super().__init__()
        self.original_model = original_model

    def forward(self, a, b0, b1, c):
        ret = self.original_model({"obs": a}, [b0, b1], c)
        return ret[0], ret[1][0], ret[1][1]


# ---------------------------------------------------------------------------------------------
# Sample Factory (sample_factory/export_onnx.py OnnxExporter, model/actor_critic.py
# ActorCriticSharedWeights, model/encoder.py MultiInputEncoder/MlpEncoder, model/core.py
# ModelCoreRNN, model/decoder.py, model/action_parameterization.py, utils/normalize.py,
# algo/utils/running_mean_std.py).


class SFRunningMeanStdInPlace(nn.Module):
    def __init__(self, input_shape, epsilon=1e-5, clip=5.0):
        super().__init__()
        self.eps = epsilon
        self.clip = clip
        self.register_buffer("running_mean", torch.zeros(input_shape, dtype=torch.float64))
        self.register_buffer("running_var", torch.ones(input_shape, dtype=torch.float64))
        self.register_buffer("count", torch.ones([1], dtype=torch.float64))

    def forward(self, x):
        """Normalizes x in place (evaluation: the statistics are not updated)."""
        mean = self.running_mean.float()
        var = self.running_var.float()
        std = torch.sqrt(var + self.eps)
        x.sub_(mean).mul_(1 / std).clamp_(-self.clip, self.clip)


class SFRunningMeanStdDictInPlace(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.running_mean_std = nn.ModuleDict({k: SFRunningMeanStdInPlace(s) for k, s in shapes.items()})

    def forward(self, x):
        for k, module in self.running_mean_std.items():
            module(x[k])


class SFObservationNormalizer(nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.running_mean_std = SFRunningMeanStdDictInPlace(shapes)

    def forward(self, obs_dict):
        with torch.no_grad():
            obs_clone = {k: (x.float() if x.dtype != torch.float else x.clone()) for k, x in obs_dict.items()}
            self.running_mean_std(obs_clone)
        return obs_clone


class SFMlpEncoder(nn.Module):
    def __init__(self, obs_dim, layers=(64, 64)):
        super().__init__()
        act = nn.ELU()  # create_mlp reuses one activation module
        mods, last = [], obs_dim
        for size in layers:
            mods += [nn.Linear(last, size), act]
            last = size
        self.mlp_head = nn.Sequential(*mods)
        self.encoder_out_size = last

    def forward(self, obs):
        return self.mlp_head(obs)


class SFMultiInputEncoder(nn.Module):
    def __init__(self, obs_dim, layers):
        super().__init__()
        self.obs_keys = ["obs"]
        self.encoders = nn.ModuleDict({"obs": SFMlpEncoder(obs_dim, layers)})
        self.encoder_out_size = self.encoders["obs"].encoder_out_size

    def forward(self, obs_dict):
        return self.encoders["obs"](obs_dict["obs"])


class SFModelCoreRNN(nn.Module):
    def __init__(self, input_size, rnn_size):
        super().__init__()
        self.core = nn.GRU(input_size, rnn_size, 1)
        self.core_output_size = rnn_size

    def forward(self, head_output, rnn_states):
        head_output = head_output.unsqueeze(0)
        rnn_states = rnn_states.unsqueeze(0)
        x, new_rnn_states = self.core(head_output, rnn_states.contiguous())
        return x.squeeze(0), new_rnn_states.squeeze(0)


class SFMlpDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Identity()  # decoder_mlp_layers = []

    def forward(self, core_output):
        return self.mlp(core_output)


class SFCategoricalActionDistribution:
    def __init__(self, raw_logits):
        self.raw_logits = raw_logits

    @property
    def probs(self):
        return F.softmax(self.raw_logits, dim=-1)


class SFActionParameterizationDefault(nn.Module):
    def __init__(self, core_out_size, num_actions):
        super().__init__()
        self.distribution_linear = nn.Linear(core_out_size, num_actions)

    def forward(self, actor_core_output):
        params = self.distribution_linear(actor_core_output)
        return params, SFCategoricalActionDistribution(params)


class SFActorCriticSharedWeights(nn.Module):
    """ActorCriticSharedWeights with --normalize_input (RunningMeanStd, clip 5), an MLP encoder
    (ELU), a GRU core and the default decoder; sizes --encoder_mlp_layers 64 64 --rnn_size 64
    (the defaults, 512, would make a 6 MB file)."""

    def __init__(self, obs_dim, num_actions, encoder_layers=(64, 64), rnn_size=64):
        super().__init__()
        self.obs_normalizer = SFObservationNormalizer({"obs": (obs_dim,)})
        self.encoder = SFMultiInputEncoder(obs_dim, encoder_layers)
        self.core = SFModelCoreRNN(self.encoder.encoder_out_size, rnn_size)
        self.decoder = SFMlpDecoder()
        self.critic_linear = nn.Linear(rnn_size, 1)
        self.action_parameterization = SFActionParameterizationDefault(rnn_size, num_actions)
        self.last_action_distribution = None

    def normalize_obs(self, obs):
        return self.obs_normalizer(obs)

    def action_distribution(self):
        return self.last_action_distribution

    def forward(self, normalized_obs_dict, rnn_states):
        x = self.encoder(normalized_obs_dict)
        x, new_rnn_states = self.core(x, rnn_states)
        decoder_output = self.decoder(x)
        values = self.critic_linear(decoder_output).squeeze()
        action_logits, self.last_action_distribution = self.action_parameterization(decoder_output)
        # Sample Factory also draws sampled actions and their log-probabilities here; with
        # --eval_deterministic the exporter replaces them by the argmax, so they are dead code
        # that the exporter prunes, and this re-creation leaves them out.
        return {"values": values, "action_logits": action_logits, "new_rnn_states": new_rnn_states}


class SFOnnxExporter(nn.Module):
    """export_onnx.OnnxExporter for a recurrent model with --eval_deterministic=True."""

    def __init__(self, actor_critic):
        super().__init__()
        self.actor_critic = actor_critic

    def forward(self, obs, rnn_states):
        normalized_obs = self.actor_critic.normalize_obs({"obs": obs})
        normalized_obs = {k: x.type(torch.float32) for k, x in normalized_obs.items()}
        policy_outputs = self.actor_critic(normalized_obs, rnn_states)
        rnn_states = policy_outputs["new_rnn_states"]
        actions = torch.argmax(self.actor_critic.action_distribution().probs, dim=-1)
        if actions.ndim == 1:
            actions = torch.unsqueeze(actions, dim=-1)
        actions = actions.to(torch.int32)  # preprocess_actions: discrete -> int32, squeeze
        if actions.shape[1] == 1:
            actions = actions.squeeze(-1)
        return actions, rnn_states


# ---------------------------------------------------------------------------------------------
# sb3-contrib RecurrentPPO (sb3_contrib/common/recurrent/policies.py RecurrentActorCriticPolicy,
# rl-baselines3-zoo hyperparams/ppo_lstm.yml CartPoleNoVel-v1: lstm_hidden_size 64,
# enable_critic_lstm, net_arch pi=[64] vf=[64], ReLU).

RNNStates = collections.namedtuple("RNNStates", ["pi", "vf"])


class SB3cRecurrentActorCriticPolicy(SB3ActorCriticPolicy):
    def __init__(self, obs_dim, n_actions, lstm_hidden_size=64):
        super().__init__(obs_dim, ("discrete", n_actions), net_arch=dict(pi=[64], vf=[64]),
                         activation_fn=nn.ReLU, mlp_feature_dim=lstm_hidden_size)
        self.lstm_output_dim = lstm_hidden_size
        self.lstm_actor = nn.LSTM(self.features_dim, lstm_hidden_size, num_layers=1)
        self.lstm_hidden_state_shape = (1, 1, lstm_hidden_size)
        self.critic = None
        self.lstm_critic = nn.LSTM(self.features_dim, lstm_hidden_size, num_layers=1)

    @staticmethod
    def _process_sequence(features, lstm_states, episode_starts, lstm):
        n_seq = lstm_states[0].shape[1]
        features_sequence = features.reshape((n_seq, -1, lstm.input_size)).swapaxes(0, 1)
        episode_starts = episode_starts.reshape((n_seq, -1)).swapaxes(0, 1)
        if torch.all(episode_starts == 0.0):
            lstm_output, lstm_states = lstm(features_sequence, lstm_states)
            return torch.flatten(lstm_output.transpose(0, 1), start_dim=0, end_dim=1), lstm_states
        lstm_output = []
        for step_features, episode_start in zip(features_sequence, episode_starts):
            keep = (1.0 - episode_start).view(1, n_seq, 1)
            hidden, lstm_states = lstm(step_features.unsqueeze(dim=0),
                                       (keep * lstm_states[0], keep * lstm_states[1]))
            lstm_output += [hidden]
        return torch.flatten(torch.cat(lstm_output).transpose(0, 1), start_dim=0, end_dim=1), lstm_states

    def forward(self, obs, lstm_states, episode_starts, deterministic=False):
        features = self.extract_features(obs)
        latent_pi, lstm_states_pi = self._process_sequence(features, lstm_states.pi, episode_starts, self.lstm_actor)
        latent_vf, lstm_states_vf = self._process_sequence(features, lstm_states.vf, episode_starts, self.lstm_critic)
        latent_pi = self.mlp_extractor.forward_actor(latent_pi)
        latent_vf = self.mlp_extractor.forward_critic(latent_vf)
        values = self.value_net(latent_vf)
        distribution = self._get_action_dist_from_latent(latent_pi)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        actions = actions.reshape((-1, *self.action_shape))
        return actions, values, log_prob, RNNStates(lstm_states_pi, lstm_states_vf)


class OnnxableRecurrentPolicy(nn.Module):
    """OnnxableSB3Policy extended the way users export RecurrentPPO (sb3 has no documented recipe,
    see DLR-RM/stable-baselines3#1125): the four LSTM state tensors and episode_starts as inputs."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, observation, pi_h, pi_c, vf_h, vf_c, episode_starts):
        actions, values, log_prob, states = self.policy(
            observation, RNNStates((pi_h, pi_c), (vf_h, vf_c)), episode_starts, deterministic=True)
        return actions, values, log_prob, states.pi[0], states.pi[1], states.vf[0], states.vf[1]


# ---------------------------------------------------------------------------------------------
# Training: behaviour cloning with DAgger on teacher-labelled states.


def evaluate(make_act, env_id, episodes=EVAL_EPISODES, seed=EVAL_SEED):
    """Deterministic return of a policy: make_act() gives a fresh act(obs) -> env actions."""
    act = make_act()
    with torch.no_grad():
        return fe.rollout(env_id, lambda o, env: act(o), episodes, seed)


def labelled_rollouts(env_id, act, teacher, episodes, seed, eps, rng, beta=0.0):
    """Rolls out act (mixed with the teacher acting on the true state with probability beta and
    with uniform random actions with probability eps) and returns the visited steps:
    obs [T, N, d], true state [T, N, d], alive [T, N]."""

    def policy(o, env):
        with torch.no_grad():
            a = np.asarray(act(o))
        full = env.state.astype(np.float32) if hasattr(env, "state") else o
        if beta > 0:
            t = teacher.run(full)["logits"].argmax(1)
            a = np.where(rng.random(len(a)) < beta, t, a)
        if eps > 0:
            a = np.where(rng.random(len(a)) < eps, rng.integers(0, 2, len(a)), a)
        return a

    _, rec = fe.rollout(env_id, policy, episodes, seed, record=True)
    return rec["obs"], rec["state"], rec["alive"]


def fit_discrete(forward, params, obs, teacher_out, steps, rng, lr=1e-3, batch=256):
    """Cross-entropy on the teacher's greedy action plus a small value regression."""
    opt = torch.optim.Adam(params, lr=lr)
    x = torch.from_numpy(obs)
    labels = torch.from_numpy(teacher_out["logits"].argmax(1))
    values = torch.from_numpy(teacher_out["value"].reshape(-1))
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, len(x), batch))
        logits, v = forward(x[idx])
        loss = F.cross_entropy(logits, labels[idx])
        if v is not None:
            loss = loss + 0.01 * F.mse_loss(v.reshape(-1), values[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()


def dagger_discrete(tag, forward, params, make_act, teacher, rng, rounds=6, steps=800, target=499.0):
    """Behaviour-clones a CartPole policy: teacher rollouts first, then the student's own."""
    act0 = lambda o: teacher.run(o)["logits"].argmax(1)  # noqa: E731
    obs, _, alive = labelled_rollouts("CartPole-v1", act0, teacher, 30, TRAIN_SEED, 0.2, rng)
    data = obs[alive]
    for r in range(rounds):
        fit_discrete(forward, params, data, teacher.run(data), steps, rng)
        ret = evaluate(make_act, "CartPole-v1", 20, TRAIN_SEED + 5000)
        print(f"  {tag}: round {r} states {len(data)} return {ret.mean():.1f}", file=sys.stderr)
        if ret.mean() >= target:
            break
        obs, _, alive = labelled_rollouts("CartPole-v1", make_act(), teacher, 20,
                                          TRAIN_SEED + 100 * (r + 1), 0.05, rng)
        data = np.concatenate([data, obs[alive]])


def pendulum_states(teacher, episodes, seed, rng, noise):
    def policy(o, env):
        return teacher.run(o)["mean"] + noise * rng.standard_normal((len(o), 1)).astype(np.float32)
    _, rec = fe.rollout("Pendulum-v1", policy, episodes, seed, record=True)
    return rec["obs"].reshape(-1, 3)


def dagger_sac(actor, teacher, rng, rounds=2, steps=400):
    """Fits tanh(mu) so that 2 * tanh(mu(s)) matches the teacher's mean clipped to [-2, 2]."""
    data = pendulum_states(teacher, 40, TRAIN_SEED, rng, 0.3)
    target_log_std = float(teacher.w["actor_logstd"].reshape(-1)[0])
    opt = torch.optim.Adam(actor.parameters(), lr=1e-3)
    make_act = lambda: (lambda o: 2.0 * actor(torch.from_numpy(o), deterministic=True).numpy())  # noqa: E731
    for r in range(rounds):
        x = torch.from_numpy(data)
        target = torch.from_numpy(np.clip(teacher.run(data)["mean"], -2.0, 2.0))
        for _ in range(steps):
            idx = torch.from_numpy(rng.integers(0, len(x), 256))
            mean, log_std, _ = actor.get_action_dist_params(x[idx])
            loss = F.mse_loss(2.0 * torch.tanh(mean), target[idx]) + 0.01 * F.mse_loss(
                log_std, torch.full_like(log_std, target_log_std))
            opt.zero_grad()
            loss.backward()
            opt.step()
        ret = evaluate(make_act, "Pendulum-v1", 20, TRAIN_SEED + 5000)
        print(f"  sac: round {r} states {len(data)} return {ret.mean():.1f}", file=sys.stderr)

        def student(o, env):
            with torch.no_grad():
                a = make_act()(o)
            return a + 0.3 * rng.standard_normal(a.shape).astype(np.float32)
        _, rec = fe.rollout("Pendulum-v1", student, 20, TRAIN_SEED + 100 * (r + 1), record=True)
        data = np.concatenate([data, rec["obs"].reshape(-1, 3)])


class RecurrentSpec:
    """How to train a recurrent student: pre(obs [T, B, 4]) -> inputs [T, B, F] of the recurrent
    modules rnns (nn.LSTM/nn.GRU, one layer), heads(outputs) -> (logits [T, B, 2], values [T, B],
    features [T, B, H] for the auxiliary velocity head)."""

    def __init__(self, pre, rnns, heads, params):
        self.pre, self.rnns, self.heads, self.params = pre, rnns, heads, params


def rnn_run(rnn, x, state):
    """Runs a one-layer nn.LSTM/nn.GRU over time-major x [T, B, F] from state ([1, B, H] or a pair)."""
    if rnn.batch_first:
        out, state = rnn(x.transpose(0, 1), state)
        return out.transpose(0, 1), state
    return rnn(x, state)


def rnn_zero(rnn, n):
    z = torch.zeros(1, n, rnn.hidden_size)
    return (z, z.clone()) if isinstance(rnn, nn.LSTM) else z


def stored_states(spec, obs):
    """The recurrent state before every step of the padded episodes obs [T, N, 4] under the current
    weights: for each rnn, [T, 1, N, H] (a pair of them for an LSTM)."""
    with torch.no_grad():
        x = spec.pre(obs)
        out = []
        for rnn in spec.rnns:
            st = rnn_zero(rnn, obs.shape[1])
            hist = []
            for t in range(obs.shape[0]):
                hist.append(st)
                _, st = rnn_run(rnn, x[t:t + 1], st)
            if isinstance(rnn, nn.LSTM):
                out.append((torch.stack([h for h, _ in hist]), torch.stack([c for _, c in hist])))
            else:
                out.append(torch.stack(hist))
        return out


def fit_recurrent(spec, aux, episodes, teacher, steps, rng, batch=32, window=32, lr=3e-3):
    """Truncated BPTT on windows of the episodes, each started from the state the current weights
    reach there (recomputed once per call, as R2D2 does with stored states): cross-entropy on the
    teacher's greedy action (the teacher sees the true state), a value regression, and an auxiliary
    head predicting the hidden velocities from the recurrent features (trained here only, not
    exported). A quarter of the windows start at an episode's first step."""
    params = list(spec.params) + list(aux.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    n = len(episodes)
    lengths = np.array([len(o) for o, _ in episodes])
    Tm = int(lengths.max())
    O = np.zeros((Tm + window, n, 4), np.float32)
    S = np.zeros((Tm + window, n, 4), np.float32)
    M = np.zeros((Tm + window, n), np.float32)
    for j, (o, st) in enumerate(episodes):
        O[:len(o), j], S[:len(o), j], M[:len(o), j] = o, st, 1.0
    out = teacher.run(S.reshape(-1, 4))
    L = torch.from_numpy(out["logits"].argmax(1).reshape(Tm + window, n))
    V = torch.from_numpy(out["value"].reshape(Tm + window, n))
    VEL = torch.from_numpy(S[:, :, [1, 3]])
    O, M = torch.from_numpy(O), torch.from_numpy(M)
    states = stored_states(spec, O[:Tm])
    for _ in range(steps):
        ep = rng.integers(0, n, batch)
        t0 = (rng.random(batch) * lengths[ep]).astype(np.int64)
        t0[rng.random(batch) < 0.25] = 0
        tt = t0[None, :] + np.arange(window)[:, None]  # [W, batch]
        idx = (torch.from_numpy(tt), torch.from_numpy(ep)[None, :].expand(window, batch))
        x = spec.pre(O[idx])
        outs = []
        for rnn, st in zip(spec.rnns, states):
            if isinstance(rnn, nn.LSTM):
                s0 = (st[0][t0, :, ep].transpose(0, 1).contiguous(), st[1][t0, :, ep].transpose(0, 1).contiguous())
            else:
                s0 = st[t0, :, ep].transpose(0, 1).contiguous()
            outs.append(rnn_run(rnn, x, s0)[0])
        logits, values, feats = spec.heads(outs)
        m = M[idx]
        ce = F.cross_entropy(logits.reshape(-1, 2), L[idx].reshape(-1), reduction="none").reshape(window, batch)
        loss = (ce * m).sum() / m.sum()
        loss = loss + 0.5 * ((((values - V[idx]) / 50.0) ** 2) * m).sum() / m.sum()
        loss = loss + 0.5 * (((aux(feats) - VEL[idx]) ** 2).sum(-1) * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()


def dagger_recurrent(tag, spec, hidden_size, make_act, teacher, rng, rounds=6, steps=300, target=495.0):
    """Behaviour-clones a recurrent policy on CartPoleNoVel-v1: the teacher acts on the true state
    and labels every step; later rounds roll out the student (mixed with the teacher, less each
    round) so it learns to recover from its own mistakes. Keeps the best round's weights."""
    aux = nn.Linear(hidden_size, 2)
    act0 = lambda o: np.zeros(len(o), np.int64)  # noqa: E731  (beta=1: the teacher acts)
    obs, state, alive = labelled_rollouts("CartPoleNoVel-v1", act0, teacher, 48, TRAIN_SEED, 0.1, rng, beta=1.0)
    episodes = [(obs[:int(alive[:, i].sum()), i], state[:int(alive[:, i].sum()), i]) for i in range(obs.shape[1])]
    best = None
    for r in range(rounds):
        fit_recurrent(spec, aux, episodes, teacher, steps, rng)
        ret = evaluate(make_act, "CartPoleNoVel-v1", 20, TRAIN_SEED + 5000)
        print(f"  {tag}: round {r} episodes {len(episodes)} return {ret.mean():.1f}", file=sys.stderr)
        if best is None or ret.mean() > best[0]:
            best = (ret.mean(), [p.detach().clone() for p in spec.params])
        if ret.mean() >= target:
            break
        beta = max(0.0, 0.5 - 0.15 * r)
        obs, state, alive = labelled_rollouts("CartPoleNoVel-v1", make_act(), teacher, 24,
                                              TRAIN_SEED + 100 * (r + 1), 0.03, rng, beta=beta)
        episodes += [(obs[:int(alive[:, i].sum()), i], state[:int(alive[:, i].sum()), i])
                     for i in range(obs.shape[1])]
    with torch.no_grad():
        for p, b in zip(spec.params, best[1]):
            p.copy_(b)


def weaken(first_weight, make_act, lo=50.0, hi=250.0, aim=175.0, env_id="CartPole-v1",
           factors=(0.8, 0.85, 0.9, 0.95, 1.0)):
    """Makes a weak CartPole policy by shrinking the actor's first-layer weights that read the pole
    angle (obs[2]) by a factor 1 - s: the policy then balances mostly on the angular velocity (or,
    on CartPoleNoVel-v1, on its memory of the angle's recent values), and the pole's swing grows
    until it falls, at a fairly consistent time. s is the one of factors whose 20-episode
    return on env_id is nearest aim within [lo, hi]. Returns s and the 50-episode return."""
    base = first_weight.detach().clone()

    def apply(s):
        with torch.no_grad():
            first_weight.copy_(base)
            first_weight[:, 2] *= 1.0 - s

    best, tried = None, []
    for s in factors:
        apply(s)
        ret = evaluate(make_act, env_id, 20).mean()
        tried.append(f"{s:g}:{ret:.0f}")
        if lo <= ret <= hi and (best is None or abs(ret - aim) < abs(best[1] - aim)):
            best = (s, ret)
    print(f"  weaken: s:return {' '.join(tried)}", file=sys.stderr)
    if best is None:
        raise RuntimeError("weaken: no shrink factor brought the return into range")
    apply(best[0])
    return best[0], evaluate(make_act, env_id)


# ---------------------------------------------------------------------------------------------
# Export and recording.


DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool", 11: "float64"}


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def shape_of(value_info):
    return [d.dim_param if d.dim_param else d.dim_value for d in value_info.type.tensor_type.shape.dim]


def describe(values):
    return [{"name": v.name, "dtype": DTYPES[v.type.tensor_type.elem_type], "shape": shape_of(v)} for v in values]


def inner(m, scope, op_type):
    """The output of the last node named under scope (torch names nodes /module/path/OpType)."""
    nodes = [n for n in m.graph.node if n.name.startswith(scope) and n.op_type == op_type]
    if not nodes:
        raise KeyError(f"no {op_type} node under {scope}")
    return nodes[-1].output[0]


class Runner:
    """Runs the PyTorch module behind a fixture: step(obs) -> [outputs], carrying any recurrent state."""

    def __init__(self, step):
        self.step = step


class Fixture:
    def __init__(self, name, **kw):
        self.name = name
        self.family = kw.pop("family")
        self.recipe = kw.pop("recipe")
        self.short = kw.pop("short")
        self.env = kw.pop("env")
        self.module = kw.pop("module")
        self.args = kw.pop("args")
        self.input_names = kw.pop("input_names")
        self.output_names = kw.pop("output_names", None)
        self.opset = kw.pop("opset")
        self.dynamic_axes = kw.pop("dynamic_axes", None)
        self.fixed_batch = kw.pop("fixed_batch")
        self.roles = kw.pop("roles")
        self.batch_axes = kw.pop("batch_axes", None) or [0] * len(self.roles)
        self.bind = kw.pop("bind")            # m -> {role: tensor name}
        self.head = kw.pop("head")
        self.action_scaling = kw.pop("action_scaling", "none")
        self.make_runner = kw.pop("make_runner")
        self.to_action = kw.pop("to_action", None)
        self.recurrent = kw.pop("recurrent", None)
        self.extra_inputs = kw.pop("extra_inputs", [])
        self.weak_of = kw.pop("weak_of", None)
        self.notes = kw.pop("notes", "")
        self.rows = kw.pop("rows")
        self.seq = kw.pop("seq", None)
        self.returns = kw.pop("returns", None)  # precomputed evaluation (weak variants)
        if kw:
            raise TypeError(f"{name}: unknown fields {sorted(kw)}")

    def make_act(self):
        runner = self.make_runner()
        return lambda o: self.to_action(runner.step(o))


def run_rows(fx, x):
    """PyTorch's outputs for the rows x: one call, or one row per call for a fixed-batch export."""
    with torch.no_grad():
        if not fx.fixed_batch:
            return fx.make_runner().step(x)
        parts = [fx.make_runner().step(x[i:i + 1]) for i in range(len(x))]
        return [np.concatenate([p[k] for p in parts], axis=fx.batch_axes[k]) for k in range(len(parts[0]))]


def run_seq(fx, seq):
    """PyTorch stepping seq [T, B, ...] from a zero state, carrying the state: outputs [T, ...]."""
    with torch.no_grad():
        if not fx.fixed_batch:
            runner = fx.make_runner()
            steps = [runner.step(seq[t]) for t in range(len(seq))]
        else:
            runners = [fx.make_runner() for _ in range(seq.shape[1])]
            steps = []
            for t in range(len(seq)):
                parts = [r.step(seq[t, b:b + 1]) for b, r in enumerate(runners)]
                steps.append([np.concatenate([p[k] for p in parts], axis=fx.batch_axes[k])
                              for k in range(len(parts[0]))])
        return [np.stack([s[k] for s in steps]) for k in range(len(steps[0]))]


def write_fixture(fx):
    path = os.path.join(OUT, fx.name + ".onnx")
    fx.module.eval()
    torch.onnx.export(fx.module, fx.args, path, export_params=True, do_constant_folding=True,
                      input_names=fx.input_names, output_names=fx.output_names,
                      opset_version=fx.opset, dynamic_axes=fx.dynamic_axes)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    outs = run_rows(fx, fx.rows)
    if len(outs) != len(m.graph.output) or len(outs) != len(fx.roles):
        raise RuntimeError(f"{fx.name}: {len(outs)} PyTorch outputs, {len(m.graph.output)} graph outputs, "
                           f"{len(fx.roles)} roles")
    np.save(os.path.join(OUT, fx.name + ".input.npy"), fx.rows)
    files = {}
    for o, y in zip(m.graph.output, outs):
        f = fx.name + "." + sanitize(o.name) + ".npy"
        np.save(os.path.join(OUT, f), y)
        files[o.name] = f
    seq_files = {}
    if fx.seq is not None:
        np.save(os.path.join(OUT, fx.name + ".seq_obs.npy"), fx.seq)
        for o, y in zip(m.graph.output, run_seq(fx, fx.seq)):
            f = fx.name + ".seq_" + sanitize(o.name) + ".npy"
            np.save(os.path.join(OUT, f), y)
            seq_files[o.name] = f
    if fx.returns is None and fx.to_action is not None:
        fx.returns = evaluate(fx.make_act, fx.env)
    outputs = describe(m.graph.output)
    for o, role, ax in zip(outputs, fx.roles, fx.batch_axes):
        o["role"] = role
        o["batch_axis"] = ax
        o["file"] = files[o["name"]]
        if o["name"] in seq_files:
            o["seq_file"] = seq_files[o["name"]]
    meta = {
        "family": fx.family,
        "recipe": fx.recipe,
        "recipe_short": fx.short,
        "env": fx.env,
        "opset": m.opset_import[0].version,
        "dynamic_batch": not fx.fixed_batch,
        "inputs": describe(m.graph.input),
        "outputs": outputs,
        "extra_inputs": fx.extra_inputs,
        "bind": fx.bind(m),
        "head": fx.head,
        "action_scaling": fx.action_scaling,
        "recurrent": fx.recurrent,
        "pytorch_return": None if fx.returns is None else {
            "mean": round(float(fx.returns.mean()), 3), "std": round(float(fx.returns.std()), 3),
            "episodes": len(fx.returns), "seeds": f"{EVAL_SEED}..{EVAL_SEED + len(fx.returns) - 1}"},
        "weak_of": fx.weak_of,
        "ops": sorted({n.op_type for n in m.graph.node}),
        "input_file": fx.name + ".input.npy",
        "seq_obs_file": fx.name + ".seq_obs.npy" if fx.seq is not None else None,
        "notes": fx.notes,
    }
    with open(os.path.join(OUT, fx.name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    ret = meta["pytorch_return"]
    print(f"wrote {fx.name}: opset {meta['opset']} ops {len(meta['ops'])} return "
          f"{'-' if ret is None else '%.1f +- %.1f' % (ret['mean'], ret['std'])}", file=sys.stderr)
    return meta


# ---------------------------------------------------------------------------------------------
# The fixtures. Each group trains (or copies) one policy and yields the fixtures exported from
# it; a weak variant is made only after its strong parent has been written.


def ff_runner(module):
    """A stateless runner: the module's outputs as numpy arrays."""
    def make():
        def step(x):
            out = module(torch.from_numpy(np.asarray(x)))
            out = out if isinstance(out, tuple) else (out,)
            return [o.detach().numpy() for o in out]
        return Runner(step)
    return make


def argmax0(outs):
    return outs[0].argmax(1)


def first(outs):
    return outs[0]


def bind_of(outputs=None, inners=None, inits=None):
    """A bind function: role -> graph output index, inner node (scope, op_type) or initializer name."""
    def bind(m):
        b = {k: None for k in ("logits", "mean", "log_std", "value", "actions")}
        for role, i in (outputs or {}).items():
            b[role] = m.graph.output[i].name
        for role, (scope, op) in (inners or {}).items():
            b[role] = inner(m, scope, op)
        names = {i.name for i in m.graph.initializer}
        for role, name in (inits or {}).items():
            if name not in names:
                raise KeyError(f"initializer {name} not in graph")
            b[role] = name
        return b
    return bind


def twin(fx, input_name="input"):
    """The dynamic-batch twin of a fixed-batch export: the same call with dynamic_axes on the input."""
    return Fixture(fx.name + "_dynbatch", short=fx.short.replace(", batch 1", "") + " + dynamic_axes",
                   family=fx.family, recipe=fx.recipe + " Twin: the same call with "
                   f"dynamic_axes={{'{input_name}': {{0: 'batch'}}}}.", env=fx.env, module=fx.module, args=fx.args,
                   input_names=fx.input_names, output_names=fx.output_names, opset=fx.opset,
                   dynamic_axes={input_name: {0: "batch"}}, fixed_batch=False, roles=fx.roles,
                   bind=fx.bind, head=fx.head, action_scaling=fx.action_scaling, make_runner=fx.make_runner,
                   to_action=fx.to_action, rows=fx.rows, extra_inputs=fx.extra_inputs, returns=fx.returns,
                   notes=(fx.notes + " " if fx.notes else "") + f"Dynamic-batch twin of {fx.name} (same weights).")


def weak_copy(fx, returns, scale):
    return Fixture(fx.name + "_weak", short=fx.short, family=fx.family, recipe=fx.recipe, env=fx.env, module=fx.module,
                   args=fx.args, input_names=fx.input_names, output_names=fx.output_names, opset=fx.opset,
                   dynamic_axes=fx.dynamic_axes, fixed_batch=fx.fixed_batch, roles=fx.roles, bind=fx.bind,
                   head=fx.head, action_scaling=fx.action_scaling, make_runner=fx.make_runner,
                   to_action=fx.to_action, rows=fx.rows, extra_inputs=fx.extra_inputs, returns=returns,
                   seq=fx.seq, recurrent=fx.recurrent, weak_of=fx.name, notes=f"{fx.name} weakened for fine-tuning tests: the actor's first-layer "
                   f"weights on the pole angle (obs[2]) multiplied by {1 - scale:.2g}, so it balances on the angular "
                   "velocity alone and the pole's swing grows until it falls. Everything else, the value head "
                   "included, is the parent's.")


def cartpole_rows(teacher, seed, mask=False):
    rng = np.random.default_rng(seed)
    act = lambda o: teacher.run(o)["logits"].argmax(1)  # noqa: E731
    obs, state, alive = labelled_rollouts("CartPole-v1", act, teacher, 8, seed, 0.25, rng)
    pool = state[alive]
    rows = pool[rng.choice(len(pool), ROWS, replace=False)]
    return rows * fe.NOVEL_MASK if mask else rows


def pendulum_rows(teacher, seed):
    rng = np.random.default_rng(seed)
    pool = pendulum_states(teacher, 4, seed, rng, 0.3)
    return pool[rng.choice(len(pool), ROWS, replace=False)]


def novel_sequences(teacher, seed):
    """SEQ_B CartPoleNoVel-v1 episodes played by the teacher (on the true state, 10% random
    actions): their first SEQ_T masked observations, [T, B, 4]."""
    rng = np.random.default_rng(seed)
    obs, _, alive = labelled_rollouts("CartPoleNoVel-v1", lambda o: np.zeros(len(o), np.int64), teacher,
                                      SEQ_B * 2, seed, 0.1, rng, beta=1.0)
    keep = [i for i in range(obs.shape[1]) if alive[:SEQ_T, i].all()][:SEQ_B]
    return np.ascontiguousarray(obs[:SEQ_T, keep])


def copy_sb3_from_teacher(policy, teacher, actor, critic):
    pn, vn = policy.mlp_extractor.policy_net, policy.mlp_extractor.value_net
    copy_linear(pn[0], teacher, actor + ".0")
    copy_linear(pn[2], teacher, actor + ".2")
    copy_linear(policy.action_net, teacher, actor + ".4")
    copy_linear(vn[0], teacher, critic + ".0")
    copy_linear(vn[2], teacher, critic + ".2")
    copy_linear(policy.value_net, teacher, critic + ".4")


SB3_NEW = ("SB3 docs 'Exporting models' (current): OnnxableSB3Policy(model.policy) returning "
           "policy(obs, deterministic=True) -> (actions, values, log_prob); th.onnx.export(..., "
           "th.randn(1, *obs_shape), opset_version=17, input_names=['input']): batch fixed at 1, outputs "
           "auto-named.")
SB3_OLD = ("SB3 docs before Jan 2024: OnnxablePolicy(policy.mlp_extractor, policy.action_net, policy.value_net) "
           "returning (action_net(latent_pi), value_net(latent_vf)); th.onnx.export(..., th.randn(1, *obs_shape), "
           "opset_version=9, input_names=['input']): batch fixed at 1, outputs auto-named, no preprocessing.")


def group_sb3_cartpole(T):
    teacher = T["cartpole"]
    torch.manual_seed(11)
    policy = SB3ActorCriticPolicy(4, ("discrete", 2))
    copy_sb3_from_teacher(policy, teacher, "actor", "critic")
    rows = cartpole_rows(teacher, 31)
    new = OnnxableSB3Policy(policy)
    fx_new = Fixture("sb3_ppo_cartpole",
                     short="SB3 OnnxableSB3Policy (docs now), batch 1",
                     family="sb3-ppo", recipe=SB3_NEW, env="CartPole-v1", module=new,
                     args=(torch.randn(1, 4),), input_names=["input"], opset=17, fixed_batch=True,
                     roles=["actions", "value", "log_prob"],
                     bind=bind_of({"actions": 0, "value": 1}, {"logits": ("/policy/action_net/", "Gemm")}),
                     head="categorical", make_runner=ff_runner(new), to_action=first, rows=rows,
                     notes="PPO MlpPolicy (pi/vf 64x64 tanh, shared FlattenExtractor); weights copied from the "
                           "CartPole teacher. actions int64 = argmax(softmax(logits)); log_prob of that action.")
    yield fx_new
    yield twin(fx_new)
    old = OnnxablePolicy(policy.mlp_extractor, policy.action_net, policy.value_net)
    fx_old = Fixture("sb3_ppo_cartpole_old",
                     short="SB3 OnnxablePolicy(extractor, action_net, value_net) (docs < 2024), batch 1",
                     family="sb3-ppo", recipe=SB3_OLD, env="CartPole-v1", module=old,
                     args=(torch.randn(1, 4),), input_names=["input"], opset=9, fixed_batch=True,
                     roles=["logits", "value"], bind=bind_of({"logits": 0, "value": 1}), head="categorical",
                     make_runner=ff_runner(old), to_action=argmax0, rows=rows,
                     notes="Same weights as sb3_ppo_cartpole; the graph holds the logits and the value only.")
    yield fx_old
    yield twin(fx_old)
    scale, ret = weaken(policy.mlp_extractor.policy_net[0].weight, fx_new.make_act)
    yield weak_copy(fx_new, ret, scale)
    yield weak_copy(fx_old, evaluate(fx_old.make_act, "CartPole-v1"), scale)


def group_sb3_pendulum(T):
    teacher = T["pendulum"]
    torch.manual_seed(12)
    policy = SB3ActorCriticPolicy(3, ("box", 1))
    copy_sb3_from_teacher(policy, teacher, "actor_mean", "critic")
    log_std = float(teacher.w["actor_logstd"].reshape(-1)[0])
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([log_std]))
    rows = pendulum_rows(teacher, 32)
    new = OnnxableSB3Policy(policy)
    fx_new = Fixture("sb3_ppo_pendulum",
                     short="SB3 OnnxableSB3Policy (docs now), batch 1",
                     family="sb3-ppo", recipe=SB3_NEW, env="Pendulum-v1", module=new,
                     args=(torch.randn(1, 3),), input_names=["input"], opset=17, fixed_batch=True,
                     roles=["actions", "value", "log_prob"],
                     bind=bind_of({"actions": 0, "value": 1}, {"mean": ("/policy/action_net/", "Gemm")},
                                  {"log_std": "policy.log_std"}),
                     head="gaussian", make_runner=ff_runner(new), to_action=first, rows=rows,
                     notes=f"PPO MlpPolicy, DiagGaussian with SB3's state-independent log_std parameter of "
                           f"shape [1] (= {log_std:.6f}); weights copied from the Pendulum teacher. The deterministic "
                           "actions are the mean, unclipped (SB3 clips outside the policy).")
    yield fx_new
    yield twin(fx_new)
    old = OnnxablePolicy(policy.mlp_extractor, policy.action_net, policy.value_net)
    fx_old = Fixture("sb3_ppo_pendulum_old",
                     short="SB3 OnnxablePolicy(extractor, action_net, value_net) (docs < 2024), batch 1",
                     family="sb3-ppo", recipe=SB3_OLD, env="Pendulum-v1", module=old,
                     args=(torch.randn(1, 3),), input_names=["input"], opset=9, fixed_batch=True,
                     roles=["mean", "value"], bind=bind_of({"mean": 0, "value": 1}), head="gaussian",
                     make_runner=ff_runner(old), to_action=first, rows=rows,
                     notes=f"Same weights as sb3_ppo_pendulum. log_std is NOT in the graph (the old recipe drops "
                           f"policy.log_std); its value was {log_std:.6f} (shape [1]).")
    yield fx_old
    yield twin(fx_old)


def group_sb3_sac(T):
    teacher = T["pendulum"]
    torch.manual_seed(13)
    rng = np.random.default_rng(13)
    actor = SB3SACActor(3, 1)
    dagger_sac(actor, teacher, rng)
    rows = pendulum_rows(teacher, 33)
    recipe = ("SB3 docs 'Exporting models', SAC: OnnxablePolicy(model.policy.actor) returning "
              "actor(obs, deterministic=True) = tanh(mu(obs)) in [-1, 1]; th.onnx.export(..., th.randn(1, *obs_shape), "
              "opset_version=17, input_names=['input']): batch fixed at 1, output auto-named.")
    sq = OnnxableSACActor(actor)
    fx = Fixture("sb3_sac_pendulum",
                 short="SB3 SAC OnnxablePolicy(actor) (docs), batch 1",
                 family="sb3-sac", recipe=recipe, env="Pendulum-v1", module=sq,
                 args=(torch.randn(1, 3),), input_names=["input"], opset=17, fixed_batch=True, roles=["actions"],
                 bind=bind_of({"actions": 0}, {"mean": ("/actor/mu/", "Gemm"), "log_std": ("/actor/", "Clip")}),
                 head="tanh-gaussian", action_scaling="env", make_runner=ff_runner(sq),
                 to_action=lambda outs: 2.0 * outs[0], rows=rows,
                 notes="SAC Actor (latent_pi 256x256 ReLU, mu, log_std Linear clamped to [-20, 2]), behaviour-cloned "
                       "so that 2*tanh(mu) matches the Pendulum teacher's mean clipped to [-2, 2]. The graph's output "
                       "is squashed to [-1, 1]: the env action is low + (a + 1) * (high - low) / 2 = 2a (the docs "
                       "leave that to the user; action_scaling 'env' = map [-1, 1] to the env's bounds). bind.mean is "
                       "mu before tanh; bind.log_std is the clamped log_std Linear, which reaches the output only "
                       "through Normal's broadcast of loc against scale (Exp/ConstantOfShape/Add/Shape/Expand), so "
                       "the exporter keeps it.")
    yield fx
    yield twin(fx)
    sc = ScaledSACActor(actor, [-2.0], [2.0])
    fx = Fixture("sb3_sac_pendulum_scaled",
                 short="SB3 SAC OnnxablePolicy(actor) + rescale in graph, batch 1",
                 family="sb3-sac",
                 recipe=recipe + " The docs' post-processing low + 0.5 * (action + 1) * (high - low) is done "
                 "inside the graph (low/high as buffers).", env="Pendulum-v1", module=sc, args=(torch.randn(1, 3),),
                 input_names=["input"], opset=17, fixed_batch=True, roles=["actions"],
                 bind=bind_of({"actions": 0}, {"mean": ("/actor/mu/", "Gemm"), "log_std": ("/actor/", "Clip")}),
                 head="tanh-gaussian", action_scaling="none", make_runner=ff_runner(sc), to_action=first, rows=rows,
                 notes="Same weights as sb3_sac_pendulum; the output is already in the env's units [-2, 2] "
                       "(action_scaling 'none' = use as is). bind.mean is mu before tanh, bind.log_std the "
                       "clamped log_std.")
    yield fx
    yield twin(fx)


CLEANRL = ("CleanRL ppo.py / ppo_continuous_action.py Agent (no exporter ships with CleanRL): the agent's "
           "networks wrapped in a module returning them, torch.onnx.export(..., input_names=['obs'], "
           "output_names=[...], dynamic_axes batch on every input and output, opset_version=17).")


def group_cleanrl(T):
    teacher = T["cartpole"]
    torch.manual_seed(14)
    agent = MLPActorCritic()
    for k in ("0", "2", "4"):
        copy_linear(agent.actor[int(k)], teacher, "actor." + k)
        copy_linear(agent.critic[int(k)], teacher, "critic." + k)
    dyn = {"obs": {0: "batch"}, "logits": {0: "batch"}, "value": {0: "batch"}}
    fx = Fixture("cleanrl_cartpole",
                 short="CleanRL Agent, torch.onnx.export, dynamic batch",
                 family="cleanrl", recipe=CLEANRL, env="CartPole-v1", module=agent,
                 args=(torch.randn(8, 4),), input_names=["obs"], output_names=["logits", "value"], opset=17,
                 dynamic_axes=dyn, fixed_batch=False, roles=["logits", "value"],
                 bind=bind_of({"logits": 0, "value": 1}), head="categorical", make_runner=ff_runner(agent),
                 to_action=argmax0, rows=cartpole_rows(teacher, 34),
                 notes="CleanRL's CartPole Agent (actor/critic 64x64 tanh, layer_init); weights copied from the "
                       "CartPole teacher.")
    yield fx
    scale, ret = weaken(agent.actor[0].weight, fx.make_act)
    yield weak_copy(fx, ret, scale)

    teacher = T["pendulum"]
    cagent = CleanRLContinuousAgent()
    for k in ("0", "2", "4"):
        copy_linear(cagent.actor_mean[int(k)], teacher, "actor_mean." + k)
        copy_linear(cagent.critic[int(k)], teacher, "critic." + k)
    with torch.no_grad():
        cagent.actor_logstd.copy_(torch.from_numpy(teacher.w["actor_logstd"]))
    exp = CleanRLContinuousExport(cagent)
    names = ["action_mean", "action_logstd", "value"]
    yield Fixture("cleanrl_pendulum",
                  short="CleanRL Agent, torch.onnx.export, dynamic batch",
                  family="cleanrl", recipe=CLEANRL, env="Pendulum-v1", module=exp,
                  args=(torch.randn(8, 3),), input_names=["obs"], output_names=names, opset=17,
                  dynamic_axes={n: {0: "batch"} for n in ["obs"] + names}, fixed_batch=False,
                  roles=["mean", "log_std", "value"], bind=bind_of({"mean": 0, "log_std": 1, "value": 2}),
                  head="gaussian", make_runner=ff_runner(exp), to_action=first, rows=pendulum_rows(teacher, 35),
                  notes="CleanRL's continuous Agent (critic, actor_mean 64x64 tanh, actor_logstd [1, 1] expanded "
                        "to the mean's shape); weights copied from the Pendulum teacher. Observations are fed raw "
                        "(the teacher was trained without CleanRL's NormalizeObservation wrapper).")


def group_vecnorm(T):
    teacher = T["cartpole"]
    torch.manual_seed(15)
    rng = np.random.default_rng(15)
    act = lambda o: teacher.run(o)["logits"].argmax(1)  # noqa: E731
    obs, _, alive = labelled_rollouts("CartPole-v1", act, teacher, 30, TRAIN_SEED + 15, 0.1, rng)
    states = obs[alive].astype(np.float64)
    mean, var = states.mean(0), states.var(0)
    eps, clip = 1e-8, 10.0
    policy = SB3ActorCriticPolicy(4, ("discrete", 2))
    copy_sb3_from_teacher(policy, teacher, "actor", "critic")
    # Fold the normalisation into the first layers so the policy on normalized observations acts
    # exactly as the teacher on raw ones: W' = W * sqrt(var + eps), b' = b + W @ mean.
    std = torch.tensor(np.sqrt(var + eps), dtype=torch.float32)
    mu = torch.tensor(mean, dtype=torch.float32)
    with torch.no_grad():
        for lin in (policy.mlp_extractor.policy_net[0], policy.mlp_extractor.value_net[0]):
            lin.bias.add_(lin.weight @ mu)
            lin.weight.mul_(std)
    mod = VecNormalizeSB3Policy(policy, mean.astype(np.float32), var.astype(np.float32), clip, eps)
    fx = Fixture("vecnorm_cartpole",
                 short="SB3 OnnxableSB3Policy + VecNormalize mean/var buffers, batch 1",
                 family="sb3-ppo+vecnormalize",
                 recipe=SB3_NEW + " The module first applies VecNormalize's observation normalisation, with the "
                 "saved obs_rms mean/var registered as buffers: clip((obs - mean) / sqrt(var + 1e-8), -10, 10).",
                 env="CartPole-v1", module=mod, args=(torch.randn(1, 4),), input_names=["input"], opset=17,
                 fixed_batch=True, roles=["actions", "value", "log_prob"],
                 bind=bind_of({"actions": 0, "value": 1}, {"logits": ("/policy/action_net/", "Gemm")}),
                 head="categorical", make_runner=ff_runner(mod), to_action=first, rows=cartpole_rows(teacher, 36),
                 notes=f"obs_rms from 30 teacher episodes: mean {np.round(mean, 5).tolist()}, var "
                       f"{np.round(var, 5).tolist()}; clip_obs 10, epsilon 1e-8 (VecNormalize's defaults). The "
                       "teacher's first layers were rescaled so the policy acts on normalized observations as the "
                       "teacher does on raw ones. The mean/var buffers feed only the normalisation (frozen when "
                       "fine-tuning).")
    yield fx
    yield twin(fx)
    scale, ret = weaken(policy.mlp_extractor.policy_net[0].weight, fx.make_act)
    yield weak_copy(fx, ret, scale)


RLLIB_MLP = ("RLlib old API stack TorchPolicyV2.export_model(export_dir, onnx=11): torch.onnx.export(self.model, "
             "(dummy_batch_dict, state_ins, seq_lens), export_params=True, opset_version=11, do_constant_folding=True, "
             "input_names=list(dummy_batch) + ['state_ins', 'seq_lens'], output_names=['output', 'state_outs'], "
             "dynamic_axes={k: {0: 'batch_size'} for every input}); a non-recurrent model gets the dummy state "
             "state_in_0 = seq_lens = np.array([1.0]). Only the tensors the model reads survive as inputs.")


def rllib_dummy_batch(obs_dim, n_actions, batch=32):
    """The keys of a PPO policy's _dummy_batch (view requirements), as torch tensors."""
    z = lambda *s: torch.zeros(*s)  # noqa: E731
    state = torch.tensor([1.0])  # state_in_0 and seq_lens are the same np.array([1.0])
    return {
        "obs": z(batch, obs_dim), "new_obs": z(batch, obs_dim), "actions": torch.zeros(batch, dtype=torch.int64),
        "rewards": z(batch), "terminateds": torch.zeros(batch, dtype=torch.bool),
        "truncateds": torch.zeros(batch, dtype=torch.bool), "eps_id": torch.zeros(batch, dtype=torch.int64),
        "unroll_id": torch.zeros(batch, dtype=torch.int64), "agent_index": torch.zeros(batch, dtype=torch.int64),
        "t": torch.zeros(batch, dtype=torch.int64), "action_dist_inputs": z(batch, n_actions),
        "action_prob": z(batch), "action_logp": z(batch), "vf_preds": z(batch),
        "values_bootstrapped": z(batch), "advantages": z(batch), "value_targets": z(batch),
        "state_in_0": state, "seq_lens": state,
    }


def group_rllib_mlp(T):
    teacher = T["cartpole"]
    torch.manual_seed(16)
    rng = np.random.default_rng(16)
    model = RLlibFCNet(4, 2, (256, 256), "tanh")

    def forward(x):
        logits, _ = model({"obs": x}, [], None)
        return logits, model.value_function()

    def make_runner():
        state = torch.zeros(1)

        def step(x):
            out, st = model({"obs": torch.from_numpy(x)}, [state], torch.ones(1))
            return [out.detach().numpy(), st[0].detach().numpy()]
        return Runner(step)

    def make_act():
        r = make_runner()
        return lambda o: r.step(o)[0].argmax(1)

    dagger_discrete("rllib_mlp", forward, list(model.parameters()), make_act, teacher, rng)
    dummy = rllib_dummy_batch(4, 2)
    state_ins = [dummy["state_in_0"]]
    names = list(dummy.keys()) + ["state_ins", "seq_lens"]
    fx = Fixture("rllib_cartpole_mlp",
                 short="RLlib TorchPolicyV2.export_model(onnx=11)",
                 family="rllib", recipe=RLLIB_MLP, env="CartPole-v1", module=model,
                 args=(dummy, state_ins, dummy["seq_lens"]), input_names=names, output_names=["output", "state_outs"],
                 opset=11, dynamic_axes={k: {0: "batch_size"} for k in names}, fixed_batch=False,
                 roles=["logits", "state"], bind=bind_of({"logits": 0}), head="categorical", make_runner=make_runner,
                 to_action=argmax0, rows=cartpole_rows(teacher, 37),
                 extra_inputs=[{"name": "state_ins", "dtype": "float32", "shape": [1],
                                "feed": "zeros([1]): RLlib's dummy state for a non-recurrent model; the graph passes "
                                        "it through to state_outs (RLlib's own example feeds np.array([0.]))"}],
                 notes="Default FullyConnectedNetwork (fcnet_hiddens [256, 256], tanh, vf_share_layers False), "
                       "behaviour-cloned from the CartPole teacher. export_model exports model.forward only: the "
                       "value branch (_value_branch_separate/_value_branch) is never called, so the graph has NO "
                       "value output and no value weights. 'output' is the action logits; state_outs is state_ins "
                       "unchanged. Both dynamic axes are named 'batch_size' although state_ins keeps length 1.")
    yield fx
    scale, ret = weaken(model._hidden_layers[0]._model[0].weight, fx.make_act)
    yield weak_copy(fx, ret, scale)


def recurrent_act(make_runner, action_of):
    def make():
        r = make_runner()
        return lambda o: action_of(r.step(o))
    return make


def group_rllib_lstm(T):
    teacher = T["cartpole"]
    torch.manual_seed(17)
    rng = np.random.default_rng(17)
    model = RLlibLSTMWrapper(4, 2, (64, 64), 64)
    wrapper = ONNXCompatibleWrapper(model)

    def pre(obs):
        return model._hidden_layers(obs)

    def heads(outs):
        return model._logits_branch(outs[0]), model._value_branch(outs[0]).squeeze(-1), outs[0]

    def make_runner():
        st = {}

        def step(x):
            n = len(x)
            if "h" not in st:
                st["h"], st["c"] = torch.zeros(n, 64), torch.zeros(n, 64)
            out, st["h"], st["c"] = wrapper(torch.from_numpy(x), st["h"], st["c"], torch.ones(n))
            return [out.numpy(), st["h"].numpy(), st["c"].numpy()]
        return Runner(step)

    make_act = recurrent_act(make_runner, argmax0)
    params = [p for n, p in model.named_parameters() if not n.startswith("_value_branch_separate")]
    dagger_recurrent("rllib_lstm", RecurrentSpec(pre, [model.lstm], heads, params), 64, make_act, teacher, rng)
    B, Tn = 3, 5
    names = ["obs", "state_in_0", "state_in_1", "seq_lens"]
    args = (torch.rand(B * Tn, 4), torch.rand(B, 64), torch.rand(B, 64), torch.full((B,), float(Tn)))
    yield (_last := Fixture("rllib_cartpole_lstm", short="RLlib LSTM export example (ONNXCompatibleWrapper)", family="rllib",
                  recipe="RLlib's LSTM export example (examples/_old_api_stack/catalogs/onnx_torch_lstm.py): "
                  "ONNXCompatibleWrapper(policy.model) taking (obs, state_in_0, state_in_1, seq_lens) and returning "
                  "(output, state_out_0, state_out_1); torch.onnx.export(..., export_params=True, opset_version=11, "
                  "do_constant_folding=True, input_names=['obs', 'state_in_0', 'state_in_1', 'seq_lens'], "
                  "output_names=['output', 'state_out_0', 'state_out_1'], dynamic_axes={k: {0: 'batch_size'} for "
                  "every input}); traced with B=3 sequences of T=5.",
                  env="CartPoleNoVel-v1", module=wrapper, args=args, input_names=names,
                  output_names=["output", "state_out_0", "state_out_1"], opset=11,
                  dynamic_axes={k: {0: "batch_size"} for k in names}, fixed_batch=False,
                  roles=["logits", "state", "state"], bind=bind_of({"logits": 0}), head="categorical",
                  make_runner=make_runner, to_action=argmax0, rows=cartpole_rows(teacher, 38, mask=True),
                  seq=novel_sequences(teacher, 48),
                  recurrent={"state_pairs": [
                      {"input": "state_in_0", "output": "state_out_0", "shape": ["batch_size", 64], "batch_axis": 0,
                       "kind": "h"},
                      {"input": "state_in_1", "output": "state_out_1", "shape": ["batch_size", 64], "batch_axis": 0,
                       "kind": "c"}],
                      "seq_lens": {"input": "seq_lens", "dtype": "float32",
                                   "feed": "ones([B]) (one step per sequence; obs holds B*T rows, T = len(obs) / B)"},
                      "episode_starts": None, "zero_state_at_episode_start": True,
                      "recordings": "input.npy rows: batch 16 from a zero state with seq_lens ones(16); seq files: "
                                    "batch 4 stepped T=32 times, state carried, no reset"},
                  notes="use_lstm=True model (fcnet_hiddens [64, 64] tanh, lstm_cell_size 64, both below RLlib's "
                        "defaults of 256 to keep the file small): FC trunk -> nn.LSTM(batch_first) -> _logits_branch. "
                        "Behaviour-cloned (DAgger) on CartPoleNoVel-v1 from the CartPole teacher, which sees the "
                        "true state. No value output (the example exports forward only)."))
    fx = _last
    scale, ret = weaken(model._hidden_layers[0]._model[0].weight, make_act, env_id="CartPoleNoVel-v1")
    yield weak_copy(fx, ret, scale)


def group_sf_gru(T):
    teacher = T["cartpole"]
    torch.manual_seed(18)
    rng = np.random.default_rng(18)
    ac = SFActorCriticSharedWeights(4, 2)
    obs, _, alive = labelled_rollouts("CartPoleNoVel-v1", lambda o: np.zeros(len(o), np.int64), teacher, 30,
                                      TRAIN_SEED + 18, 0.1, rng, beta=1.0)
    pool = obs[alive].astype(np.float64)
    rms = ac.obs_normalizer.running_mean_std.running_mean_std["obs"]
    with torch.no_grad():
        rms.running_mean.copy_(torch.from_numpy(pool.mean(0)))
        rms.running_var.copy_(torch.from_numpy(pool.var(0)))
        rms.count.fill_(float(len(pool)))
    exporter = SFOnnxExporter(ac)
    mean, std = rms.running_mean.float(), torch.sqrt(rms.running_var.float() + rms.eps)

    def pre(o):
        return ac.encoder.encoders["obs"].mlp_head(torch.clamp((o - mean) * (1 / std), -5.0, 5.0))

    def heads(outs):
        f = outs[0]
        return ac.action_parameterization.distribution_linear(f), ac.critic_linear(f).squeeze(-1), f

    def make_runner():
        st = {}

        def step(x):
            if "h" not in st:
                st["h"] = torch.zeros(len(x), 64)
            actions, st["h"] = exporter(torch.from_numpy(x), st["h"])
            return [actions.numpy(), st["h"].numpy()]
        return Runner(step)

    make_act = recurrent_act(make_runner, lambda outs: outs[0].astype(np.int64))
    spec = RecurrentSpec(pre, [ac.core.core], heads, list(ac.parameters()))
    dagger_recurrent("sf_gru", spec, 64, make_act, teacher, rng)
    args = {"obs": torch.randn(1, 4), "rnn_states": torch.zeros(1, 64)}
    yield (_last := Fixture("sf_cartpole_gru", short="Sample Factory export_onnx (RNN: batch 1)", family="sample-factory",
                  recipe="Sample Factory export_onnx (sample_factory/export_onnx.py): OnnxExporter(cfg, env_info, "
                  "actor_critic) with forward patched to named args (obs, rnn_states); torch.onnx.export(model, "
                  "(args,), f, export_params=True, input_names=['obs', 'rnn_states'], output_names=['output_actions', "
                  "'output_rnn_states'], dynamic_axes=None) with batch 1 ('batch size must be 1 when rnn is used') "
                  "and no opset_version (torch's default: 14 in torch 1.13, 17 from torch 2.1).",
                  env="CartPoleNoVel-v1", module=exporter, args=(args,), input_names=["obs", "rnn_states"],
                  output_names=["output_actions", "output_rnn_states"], opset=14, fixed_batch=True,
                  roles=["actions", "state"], bind=bind_of({"actions": 0}, {"logits": (
                      "/actor_critic/action_parameterization/distribution_linear/", "Gemm")}),
                  head="categorical", make_runner=make_runner, to_action=lambda outs: outs[0].astype(np.int64),
                  rows=cartpole_rows(teacher, 39, mask=True), seq=novel_sequences(teacher, 48),
                  recurrent={"state_pairs": [{"input": "rnn_states", "output": "output_rnn_states", "shape": [1, 64],
                                              "batch_axis": 0, "kind": "gru"}],
                             "seq_lens": None, "episode_starts": None, "zero_state_at_episode_start": True,
                             "recordings": "input.npy rows: one row per call from a zero state; seq files: each of "
                                           "the 4 sequences stepped alone (batch 1) T=32 times, state carried, no "
                                           "reset, joined on the batch axis: [32, 4, ...]"},
                  notes="ActorCriticSharedWeights with --normalize_input (running mean/var of CartPoleNoVel "
                        "observations baked in as float64 buffers, clip 5), MLP encoder 64x64 ELU (SF's default "
                        "nonlinearity; --encoder_mlp_layers 64 64), GRU core --rnn_size 64, identity decoder. "
                        "--eval_deterministic=True: actions are argmax(softmax(logits)) as int32 [1]. "
                        "Behaviour-cloned (DAgger) on CartPoleNoVel-v1. The critic (critic_linear) feeds no output, "
                        "so the exporter prunes it: no value tensor exists. bind.logits is the "
                        "distribution_linear output."))
    # Its observations are normalised, so the angle's weights matter more: smaller shrinks.
    scale, ret = weaken(ac.encoder.encoders["obs"].mlp_head[0].weight, make_act, env_id="CartPoleNoVel-v1",
                        factors=(0.2, 0.3, 0.4, 0.5, 0.6, 0.7))
    yield weak_copy(_last, ret, scale)


def group_sb3c_lstm(T):
    teacher = T["cartpole"]
    torch.manual_seed(19)
    rng = np.random.default_rng(19)
    policy = SB3cRecurrentActorCriticPolicy(4, 2, 64)
    wrapper = OnnxableRecurrentPolicy(policy)

    def heads(outs):
        pi, vf = outs
        logits = policy.action_net(policy.mlp_extractor.forward_actor(pi))
        return logits, policy.value_net(policy.mlp_extractor.forward_critic(vf)).squeeze(-1), pi

    def make_runner():
        st = {}

        def step(x):
            n = len(x)
            if "s" not in st:
                st["s"] = [torch.zeros(1, n, 64) for _ in range(4)]
            out = wrapper(torch.from_numpy(x), *st["s"], torch.zeros(n))
            st["s"] = list(out[3:])
            return [o.numpy() for o in out]
        return Runner(step)

    make_act = recurrent_act(make_runner, first)
    spec = RecurrentSpec(lambda o: o, [policy.lstm_actor, policy.lstm_critic], heads, list(policy.parameters()))
    dagger_recurrent("sb3c_lstm", spec, 64, make_act, teacher, rng)
    z = lambda: torch.zeros(1, 1, 64)  # noqa: E731
    in_names = ["input", "pi_h", "pi_c", "vf_h", "vf_c", "episode_starts"]
    out_names = ["actions", "values", "log_prob", "pi_h_out", "pi_c_out", "vf_h_out", "vf_c_out"]
    yield Fixture("sb3c_recurrentppo_cartpole",
                  short="sb3-contrib RecurrentPPO, OnnxableSB3Policy-style, batch 1",
                  family="sb3-contrib-recurrentppo",
                  recipe="sb3-contrib RecurrentPPO has no documented export: OnnxableSB3Policy extended to "
                  "policy(obs, RNNStates((pi_h, pi_c), (vf_h, vf_c)), episode_starts, deterministic=True); "
                  "th.onnx.export(..., (th.randn(1, 4), zeros(1, 1, 64) x4, th.ones(1)), opset_version=17, "
                  f"input_names={in_names}, output_names={out_names}): batch fixed at 1. The dummy episode_starts "
                  "of 1 makes the trace take _process_sequence's per-step branch, so the graph resets the state "
                  "by (1 - episode_starts) * state.",
                  env="CartPoleNoVel-v1", module=wrapper, args=(torch.randn(1, 4), z(), z(), z(), z(), torch.ones(1)),
                  input_names=in_names, output_names=out_names, opset=17, fixed_batch=True,
                  roles=["actions", "value", "log_prob", "state", "state", "state", "state"],
                  batch_axes=[0, 0, 0, 1, 1, 1, 1],
                  bind=bind_of({"actions": 0, "value": 1}, {"logits": ("/policy/action_net/", "Gemm")}),
                  head="categorical", make_runner=make_runner, to_action=first,
                  rows=cartpole_rows(teacher, 40, mask=True), seq=novel_sequences(teacher, 48),
                  recurrent={"state_pairs": [
                      {"input": i, "output": o, "shape": [1, 1, 64], "batch_axis": 1, "kind": k}
                      for i, o, k in zip(in_names[1:5], out_names[3:], ["h", "c", "h", "c"])],
                      "seq_lens": None,
                      "episode_starts": {"input": "episode_starts", "dtype": "float32", "shape": [1],
                                         "feed": "0 in every recording (1 at an episode's first step zeroes "
                                                 "the state)"},
                      "zero_state_at_episode_start": True,
                      "recordings": "input.npy rows: one row per call from a zero state, episode_starts 0; seq "
                                    "files: each of the 4 sequences stepped alone (batch 1) T=32 times, state carried, "
                                    "episode_starts 0, joined on each output's batch axis (1 for the states)"},
                  notes="RecurrentActorCriticPolicy as RL Zoo's ppo_lstm CartPoleNoVel-v1 config (lstm_hidden_size 64, "
                        "enable_critic_lstm, net_arch pi=[64] vf=[64], ReLU; RL Zoo also wraps the env in "
                        "VecNormalize, "
                        "left out here). States are [n_layers=1, batch, 64] (batch on axis 1); pi_* feed lstm_actor, "
                        "vf_* lstm_critic. Behaviour-cloned (DAgger) on CartPoleNoVel-v1.")


def group_atari(T):
    torch.manual_seed(20)
    policy = SB3ActorCriticPolicy(None, ("discrete", 6), features_extractor=SB3NatureCNN(), image=True)
    gains = {policy.features_extractor: math.sqrt(2), policy.mlp_extractor: math.sqrt(2),
             policy.action_net: 0.01, policy.value_net: 1.0}
    for module, gain in gains.items():  # SB3's ortho_init
        for layer in module.modules():
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(layer.weight, gain=gain)
                layer.bias.data.fill_(0.0)
    rows = np.random.default_rng(20).integers(0, 256, (ROWS, 4, 84, 84), dtype=np.uint8)
    mod = OnnxableSB3Policy(policy)
    fx = Fixture("atari_uint8_cnn",
                 short="SB3 OnnxableSB3Policy, CnnPolicy, uint8 dummy, batch 1",
                 family="sb3-ppo-cnn",
                 recipe=SB3_NEW + " CnnPolicy on a uint8 Box(0, 255, (4, 84, 84)) space, exported with a uint8 dummy "
                 "(th.zeros((1, 4, 84, 84), dtype=th.uint8)) so the graph takes uint8; preprocess_obs does "
                 "obs.float() / 255 inside the graph.",
                 env=None, module=mod, args=(torch.zeros((1, 4, 84, 84), dtype=torch.uint8),), input_names=["input"],
                 opset=17, fixed_batch=True, roles=["actions", "value", "log_prob"],
                 bind=bind_of({"actions": 0, "value": 1}, {"logits": ("/policy/action_net/", "Gemm")}),
                 head="categorical", make_runner=ff_runner(mod), to_action=None, rows=rows,
                 notes="SB3 NatureCNN layout (features_extractor.cnn / .linear) with 16/32/16 channels and "
                       "features_dim 64 instead of 32/64/64 and 512, to keep the file small; SB3's orthogonal "
                       "init, untrained; 6 actions (Pong). No env: infer only (pytorch_return null). "
                       "mlp_extractor is empty (net_arch [] for CNN policies).")
    yield fx
    yield twin(fx)


MLP_RECIPE = ("A CleanRL-style agent (separate actor/critic Sequentials) exported by torch.onnx.export(agent, "
              "th.randn(8, 4), input_names=['obs'], output_names=['logits', 'value'], dynamic_axes batch on all, "
              "opset_version={opset}).")


def mlp_fixture(name, agent, opset, teacher, rows, notes):
    dyn = {"obs": {0: "batch"}, "logits": {0: "batch"}, "value": {0: "batch"}}
    return Fixture(name,
                   short=f"CleanRL-style agent, torch.onnx.export opset {opset}, dynamic batch",
                   family="custom-mlp", recipe=MLP_RECIPE.format(opset=opset), env="CartPole-v1", module=agent,
                   args=(torch.randn(8, 4),), input_names=["obs"], output_names=["logits", "value"], opset=opset,
                   dynamic_axes=dyn, fixed_batch=False, roles=["logits", "value"],
                   bind=bind_of({"logits": 0, "value": 1}), head="categorical", make_runner=ff_runner(agent),
                   to_action=argmax0, rows=rows, notes=notes)


def train_mlp_agent(tag, agent, teacher, rng):
    def make_act():
        return lambda o: agent(torch.from_numpy(o))[0].numpy().argmax(1)
    dagger_discrete(tag, lambda x: agent(x), list(agent.parameters()), make_act, teacher, rng)


def group_layernorm(T):
    teacher = T["cartpole"]
    torch.manual_seed(21)
    rng = np.random.default_rng(21)
    agent = MLPAgent(nn.Tanh, layer_norm=True)
    train_mlp_agent("layernorm", agent, teacher, rng)
    rows = cartpole_rows(teacher, 41)
    note = ("Actor and critic 4 -> 64 -> 64 with nn.LayerNorm(64) after each hidden Linear, tanh; "
            "behaviour-cloned from the CartPole teacher.")
    fx17 = mlp_fixture("layernorm_opset17_cartpole", agent, 17, teacher, rows,
                       note + " At opset 17 nn.LayerNorm exports as one LayerNormalization node.")
    fx14 = mlp_fixture("layernorm_decomposed_cartpole", agent, 14, teacher, rows,
                       note + " Same weights as layernorm_opset17_cartpole; at opset 14 (torch 1.13's default) "
                       "nn.LayerNorm is decomposed into ReduceMean/Sub/Pow/Add/Sqrt/Div/Mul/Add.")
    yield fx17
    yield fx14
    scale, ret = weaken(agent.actor[0].weight, fx17.make_act)
    yield weak_copy(fx17, ret, scale)
    yield weak_copy(fx14, evaluate(fx14.make_act, "CartPole-v1"), scale)


def group_activations(T):
    teacher = T["cartpole"]
    for i, (tag, act, desc) in enumerate([("elu", nn.ELU, "ELU (Elu)"),
                                          ("silu", nn.SiLU, "SiLU (exported as Sigmoid and Mul)"),
                                          ("leakyrelu", nn.LeakyReLU, "LeakyReLU(0.01) (LeakyRelu)")]):
        torch.manual_seed(22 + i)
        rng = np.random.default_rng(22 + i)
        agent = MLPAgent(act)
        train_mlp_agent("act_" + tag, agent, teacher, rng)
        fx = mlp_fixture(f"act_{tag}_cartpole", agent, 17, teacher, cartpole_rows(teacher, 42 + i),
                         f"Actor and critic 4 -> 64 -> 64 with {desc}; behaviour-cloned from the CartPole teacher.")
        yield fx
        scale, ret = weaken(agent.actor[0].weight, fx.make_act)
        yield weak_copy(fx, ret, scale)


GROUPS = collections.OrderedDict([
    ("sb3_cartpole", group_sb3_cartpole),
    ("sb3_pendulum", group_sb3_pendulum),
    ("sb3_sac", group_sb3_sac),
    ("cleanrl", group_cleanrl),
    ("vecnorm", group_vecnorm),
    ("rllib_mlp", group_rllib_mlp),
    ("rllib_lstm", group_rllib_lstm),
    ("sf_gru", group_sf_gru),
    ("sb3c_lstm", group_sb3c_lstm),
    ("atari", group_atari),
    ("layernorm", group_layernorm),
    ("activations", group_activations),
])


# ---------------------------------------------------------------------------------------------
# Checks, README and main.


def check_written(fx, meta):
    """Re-reads what was written and re-runs the PyTorch module on the stored input."""
    m = onnx.load(os.path.join(OUT, fx.name + ".onnx"))
    onnx.checker.check_model(m, full_check=True)
    x = np.load(os.path.join(OUT, meta["input_file"]))
    again = run_rows(fx, x)
    for o, y in zip(meta["outputs"], again):
        stored = np.load(os.path.join(OUT, o["file"]))
        if stored.dtype != y.dtype or stored.shape != y.shape or not np.array_equal(stored, y):
            raise RuntimeError(f"{fx.name}: output {o['name']} does not reproduce")
        shape = o["shape"]
        if len(shape) != y.ndim:
            raise RuntimeError(f"{fx.name}: output {o['name']} rank {y.ndim}, graph says {shape}")
    if meta["seq_obs_file"]:
        seq = np.load(os.path.join(OUT, meta["seq_obs_file"]))
        for o, y in zip(meta["outputs"], run_seq(fx, seq)):
            if not np.array_equal(np.load(os.path.join(OUT, o["seq_file"])), y):
                raise RuntimeError(f"{fx.name}: sequence output {o['name']} does not reproduce")


def load_all():
    metas = {}
    for f in sorted(os.listdir(OUT)):
        if f.endswith(".json"):
            with open(os.path.join(OUT, f)) as fh:
                metas[f[:-5]] = json.load(fh)
    return metas


def verify_disk():
    """--verify: every fixture's files exist, the models pass the checker, the recorded outputs
    have the graph's dtypes and ranks."""
    bad = 0
    for name, meta in load_all().items():
        m = onnx.load(os.path.join(OUT, name + ".onnx"))
        onnx.checker.check_model(m, full_check=True)
        x = np.load(os.path.join(OUT, meta["input_file"]))
        if x.shape[0] != ROWS and meta["recurrent"] is None:
            bad += 1
            print(f"{name}: input has {x.shape[0]} rows", file=sys.stderr)
        for o in meta["outputs"]:
            y = np.load(os.path.join(OUT, o["file"]))
            if str(y.dtype) != o["dtype"] or y.ndim != len(o["shape"]):
                bad += 1
                print(f"{name}: {o['file']} is {y.dtype}{list(y.shape)}, graph {o['dtype']}{o['shape']}",
                      file=sys.stderr)
    return bad


def fmt_io(values):
    return ", ".join(f"{v['name']} {v['dtype']}[{','.join(str(d) for d in v['shape'])}]" for v in values)


def write_readme(metas):
    lines = [
        "# Foreign-policy fixtures (issue 12)",
        "",
        "Policies built and exported the way the popular RL libraries do it, each with the return it earns",
        "in PyTorch. Written by `scripts/gen_fixtures_foreign.py` (regenerate with `make fixtures`, or",
        "`/usr/bin/python3 scripts/gen_fixtures_foreign.py [--only GROUP,...]`; Debian's python3-torch 1.13,",
        "python3-onnx 1.12, numpy; a few minutes on one core). The networks and export calls are this",
        "script's own re-creations of each library's module layout and documented export; no library is",
        "needed. `NAME.json` says what each graph is: inputs/outputs with their roles, where the logits /",
        "mean / log_std / value / actions live (`bind`, graph outputs or inner tensor names), the head, the",
        "action scaling, the recurrent state pairs, the ops, the PyTorch return and notes.",
        "",
        "The MuJoCo fixtures (issue 27) are in `mujoco/`, written by `scripts/gen_fixtures_mujoco.py`.",
        "",
        "Files per fixture: `NAME.onnx`; `NAME.input.npy` (16 observations, the graph's dtype) and",
        "`NAME.<output>.npy` (PyTorch's value of each graph output for them; fixed-batch exports are run one",
        "row at a time and joined on the output's batch axis); recurrent fixtures also `NAME.seq_obs.npy`",
        "[T=32, B=4, obs] and `NAME.seq_<output>.npy` (stepped from a zero state, state carried, no reset).",
        "Output names are made file-safe by turning characters outside `[A-Za-z0-9_]` into `_`.",
        "",
        "Returns: deterministic (argmax / mean; SAC: tanh then scaled to [-2, 2]) over 50 episodes, episode i",
        "reset with `numpy.random.default_rng(10000 + i)`, on the numpy environments of",
        "`scripts/fixture_envs.py` (Gymnasium's CartPole-v1 and Pendulum-v1; CartPoleNoVel-v1 = CartPole-v1",
        "observed through RL Zoo's MaskVelocityWrapper, obs * [1, 0, 1, 0]). The teachers are towerrl's own",
        "PPO policies in `teachers/` (CartPole: `train --env CartPole-v1 --total-steps 500000 --seed 1`;",
        "Pendulum: `train --config configs/pendulum-ppo.json`).",
        "",
        "`action_scaling`: `env` = the graph's action is in [-1, 1] and must be mapped to the env's bounds;",
        "`none` = use the graph's action as it is.",
        "",
        "| fixture | family | env | recipe | opset | batch | inputs | outputs | head | return (50 ep) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, meta in metas.items():
        ret = meta["pytorch_return"]
        r = "-" if ret is None else f"{ret['mean']:.1f} ± {ret['std']:.1f}"
        if meta["weak_of"]:
            r += f" (weak of {meta['weak_of']})"
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            name, meta["family"], meta["env"] or "-", meta["recipe_short"], meta["opset"],
            "dynamic" if meta["dynamic_batch"] else "fixed 1", fmt_io(meta["inputs"]), fmt_io(meta["outputs"]),
            meta["head"] + ("" if meta["action_scaling"] == "none" else " (scale: env)"), r))
    lines += ["", "## Ops per fixture", ""]
    for name, meta in metas.items():
        lines.append(f"- {name}: {', '.join(meta['ops'])}")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def summary(metas):
    print(f"{'fixture':36} {'batch':7} {'opset':5} {'return':>16}  inputs -> outputs | ops")
    for name, meta in metas.items():
        ret = meta["pytorch_return"]
        r = "-" if ret is None else f"{ret['mean']:.1f}±{ret['std']:.1f}"
        print(f"{name:36} {'dyn' if meta['dynamic_batch'] else 'fixed1':7} {meta['opset']:<5} {r:>16}  "
              f"{fmt_io(meta['inputs'])} -> {fmt_io(meta['outputs'])} | {' '.join(meta['ops'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated groups: " + ", ".join(GROUPS))
    ap.add_argument("--verify", action="store_true", help="only check the files on disk")
    a = ap.parse_args()
    if a.verify:
        bad = verify_disk()
        summary(load_all())
        sys.exit(1 if bad else 0)
    groups = [g for g in a.only.split(",") if g] or list(GROUPS)
    for g in groups:
        if g not in GROUPS:
            sys.exit(f"unknown group {g!r}; groups: {', '.join(GROUPS)}")
    os.makedirs(OUT, exist_ok=True)
    teachers = {"cartpole": Teacher(os.path.join(TEACHERS, "cartpole_ppo.onnx")),
                "pendulum": Teacher(os.path.join(TEACHERS, "pendulum_ppo.onnx"))}
    t0 = time.time()
    for g in groups:
        t = time.time()
        for fx in GROUPS[g](teachers):
            meta = write_fixture(fx)
            check_written(fx, meta)
        print(f"group {g}: {time.time() - t:.1f}s", file=sys.stderr)
    metas = load_all()
    write_readme(metas)
    summary(metas)
    print(f"total {time.time() - t0:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()

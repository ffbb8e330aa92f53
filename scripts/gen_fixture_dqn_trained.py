#!/usr/bin/python3
"""Train a DQN Q-network on CartPole-v1 in PyTorch as Stable-Baselines3's DQN trains it, and export
it as SB3 users do (issue 30 item 5: a trained Q-network for `train --algo dqn --init-policy`):

    /usr/bin/python3 scripts/gen_fixture_dqn_trained.py

scripts/gen_fixture_sb3_dqn.py's Q-networks carry a PPO teacher's logits as Q-values, right for
recognising the exports and acting greedily, wrong for fine-tuning with DQN (their values are
not action values, so the first TD targets move them far). This one is a real Q-network:

- the network is SB3's DQN MlpPolicy (q_net: Linear, ReLU, Linear, ReLU, Linear) with RL Zoo's
  CartPole-v1 net_arch [256, 256] (hyperparams/dqn.yml), exported by the older recipe (the
  Q-network alone: OnnxableQNetwork of gen_fixture_sb3_dqn.py), batch 1, opset 17;
- the training is SB3's DQN (stable_baselines3/dqn/dqn.py) with RL Zoo's CartPole-v1 settings
  (lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, gamma 0.99, a target copy every 10 env
  steps, 128 gradient steps every 256 env steps, epsilon from 1 to 0.04 over the first 16% of the
  steps, Huber loss, Adam, gradients clipped to norm 10, the target max_a Q_target(s', a)), on one
  env of scripts/fixture_envs.py, the truncation at 500 steps bootstrapped as SB3 does
  (handle_timeout_termination), for STEPS env steps from torch seed SEED.

It writes testdata/dqn/dqn_cartpole_trained.onnx and dqn_cartpole_trained.json: PyTorch's greedy
return over 50 episodes (seeds 10000..10049, as every foreign fixture is scored) and the settings.
The committed one scores 132.5 (bin/eval, 100 episodes: 132.0): a Q-network part-way trained,
which a fine-tune can improve.

Its 14,500 updates of a 256x256 network take a few minutes with OpenBLAS and far longer with
Debian's reference BLAS (libblas3); with libopenblas0-pthread unpacked into /tmp/openblas:

    OPENBLAS_NUM_THREADS=1 LD_LIBRARY_PATH=/tmp/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread \
        /usr/bin/python3 scripts/gen_fixture_dqn_trained.py
"""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_envs as fe  # noqa: E402
from gen_fixture_sb3_dqn import OUT, OnnxableQNetwork, QNetwork, greedy_return, write_meta  # noqa: E402
NAME = "dqn_cartpole_trained"
SEED = 3
STEPS = 30_000
HP = {"lr": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000, "gamma": 0.99,
      "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128, "exploration_fraction": 0.16,
      "exploration_final_eps": 0.04, "net_arch": [256, 256], "max_grad_norm": 10}
torch.set_num_threads(1)
warnings.filterwarnings("ignore")


def epsilon(step):
    """SB3's linear schedule from 1 to exploration_final_eps over the first fraction of STEPS."""
    frac = min(step / (HP["exploration_fraction"] * STEPS), 1.0)
    return 1.0 + frac * (HP["exploration_final_eps"] - 1.0)


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    q = QNetwork(4, 2, net_arch=HP["net_arch"], activation_fn=nn.ReLU)
    target = QNetwork(4, 2, net_arch=HP["net_arch"], activation_fn=nn.ReLU)
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=HP["lr"])
    cap = HP["buffer_size"]
    obs_b = np.zeros((cap, 4), np.float32)
    next_b = np.zeros((cap, 4), np.float32)
    act_b = np.zeros(cap, np.int64)
    rew_b = np.zeros(cap, np.float32)
    done_b = np.zeros(cap, np.float32)
    env = fe.CartPole(1)
    episode = 0
    obs = env.reset([SEED * 1000 + episode])
    ret, returns = 0.0, []
    for step in range(STEPS):
        if step < HP["learning_starts"] or rng.random() < epsilon(step):
            a = int(rng.integers(2))
        else:
            with torch.no_grad():
                a = int(q(torch.from_numpy(obs)).argmax(1)[0])
        nxt, r, term, trunc = env.step(np.array([a]))
        i = step % cap
        obs_b[i], next_b[i], act_b[i], rew_b[i], done_b[i] = obs[0], nxt[0], a, r[0], float(term[0])
        ret += r[0]
        obs = nxt
        if term[0] or trunc[0]:
            returns.append(ret)
            ret, episode = 0.0, episode + 1
            obs = env.reset([SEED * 1000 + episode])
        if (step + 1) % HP["target_update_interval"] == 0:
            target.load_state_dict(q.state_dict())
        if (step + 1) % HP["train_freq"] == 0 and step + 1 > HP["learning_starts"]:
            n = min(step + 1, cap)
            for _ in range(HP["gradient_steps"]):
                idx = rng.integers(n, size=HP["batch_size"])
                with torch.no_grad():
                    nq = target(torch.from_numpy(next_b[idx])).max(1).values
                    y = torch.from_numpy(rew_b[idx]) + (1 - torch.from_numpy(done_b[idx])) * HP["gamma"] * nq
                cur = q(torch.from_numpy(obs_b[idx])).gather(1, torch.from_numpy(act_b[idx])[:, None])[:, 0]
                loss = F.smooth_l1_loss(cur, y)
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q.parameters(), HP["max_grad_norm"])
                opt.step()
        if (step + 1) % 5000 == 0:
            print(f"step {step + 1}: epsilon {epsilon(step):.3f}, last 10 training episodes {np.mean(returns[-10:]):.1f}",
                  flush=True)
    q.eval()
    greedy = greedy_return(q)
    os.makedirs(OUT, exist_ok=True)
    torch.onnx.export(OnnxableQNetwork(q).eval(), (torch.randn(1, 4),), os.path.join(OUT, NAME + ".onnx"),
                      export_params=True, do_constant_folding=True, input_names=["input"], opset_version=17)
    meta = {"env": "CartPole-v1", "head": "qvalues", "steps": STEPS, "torch_seed": SEED, "hyperparams": HP,
            "pytorch_greedy_return": greedy}
    write_meta(NAME, meta)
    print(greedy)


if __name__ == "__main__":
    main()

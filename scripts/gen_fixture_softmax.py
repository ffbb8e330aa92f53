#!/usr/bin/python3
"""Export the softmax-output fixtures (issue 31 item 5) into testdata/softmax/: the CartPole
teacher's actor (the weights of testdata/foreign/cleanrl_cartpole) written as a plain
nn.Sequential that ends, as a hand-written export often does, in the action distribution's
probabilities (Softmax) or their log (LogSoftmax) instead of its logits.

Run with Debian's python3 (python3-torch, python3-onnx, python3-numpy):

    /usr/bin/python3 scripts/gen_fixture_softmax.py

For NAME in softmax_cartpole, logsoftmax_cartpole it writes:
    NAME.onnx           the export (input -> output, the probabilities or their log; dynamic batch,
                        opset 17)
    NAME.input.npy      16 CartPole observations
    NAME.actions.npy    one action per row drawn by torch.distributions.Categorical (seed 31)
    NAME.logp.npy       PyTorch's log_prob of those actions: what a batcher's rows must carry
    NAME.json           the sampled return PyTorch earns (50 episodes, seeds 10000..10049)
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture_envs as fe  # noqa: E402
from gen_fixtures import MLPActorCritic  # noqa: E402
from gen_fixtures_foreign import (EVAL_EPISODES, EVAL_SEED, TEACHERS, Teacher, cartpole_rows,  # noqa: E402
                                  copy_linear)

OUT = os.path.join(HERE, "..", "testdata", "softmax")
torch.set_num_threads(1)


def probabilities(agent, log):
    """The agent's actor as a plain nn.Sequential ending in Softmax (log=False) or LogSoftmax
    (log=True), as a hand-written export of a policy network often is: no library's layout, no
    value output."""
    a = agent.actor
    net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2),
                        nn.LogSoftmax(dim=-1) if log else nn.Softmax(dim=-1))
    with torch.no_grad():
        for k in (0, 2, 4):
            net[k].weight.copy_(a[k].weight)
            net[k].bias.copy_(a[k].bias)
    return net


def main():
    teacher = Teacher(os.path.join(TEACHERS, "cartpole_ppo.onnx"))
    torch.manual_seed(14)
    agent = MLPActorCritic()
    for k in ("0", "2", "4"):
        copy_linear(agent.actor[int(k)], teacher, "actor." + k)
        copy_linear(agent.critic[int(k)], teacher, "critic." + k)
    rows = cartpole_rows(teacher, 34).astype(np.float32)
    os.makedirs(OUT, exist_ok=True)
    for name, log in (("softmax_cartpole", False), ("logsoftmax_cartpole", True)):
        module = probabilities(agent, log).eval()
        out = "output"
        torch.onnx.export(module, (torch.randn(8, 4),), os.path.join(OUT, name + ".onnx"), export_params=True,
                          do_constant_folding=True, input_names=["input"], output_names=[out],
                          opset_version=17, dynamic_axes={n: {0: "batch"} for n in ("input", out)})
        with torch.no_grad():
            dist = Categorical(logits=agent.actor(torch.from_numpy(rows)))
            torch.manual_seed(31)
            actions = dist.sample()
            logp = dist.log_prob(actions)
        np.save(os.path.join(OUT, name + ".input.npy"), rows)
        np.save(os.path.join(OUT, name + ".actions.npy"), actions.numpy().astype(np.int64))
        np.save(os.path.join(OUT, name + ".logp.npy"), logp.numpy().astype(np.float32))
        gen = torch.Generator().manual_seed(EVAL_SEED)

        def act(o, env):
            with torch.no_grad():
                p = torch.softmax(agent.actor(torch.from_numpy(np.asarray(o, dtype=np.float32))), -1)
                return torch.multinomial(p, 1, generator=gen).squeeze(1).numpy()

        returns = fe.rollout("CartPole-v1", act, EVAL_EPISODES, EVAL_SEED)
        meta = {"env": "CartPole-v1", "output": out, "head": "categorical",
                "pytorch_sampled_return": {"mean": float(returns.mean()), "std": float(returns.std()),
                                           "episodes": EVAL_EPISODES,
                                           "seeds": f"{EVAL_SEED}..{EVAL_SEED + EVAL_EPISODES - 1}"}}
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print(name, meta["pytorch_sampled_return"])


if __name__ == "__main__":
    main()

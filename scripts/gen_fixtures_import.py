#!/usr/bin/python3
"""Export the fixtures of the ONNX import tests (onnx/graph) into testdata/.

Run with Debian's python3 (packages python3-torch, python3-onnx, python3-numpy):

    /usr/bin/python3 scripts/gen_fixtures_import.py

It only writes new files (testdata/matmul_opset17.*); the fixtures of scripts/gen_fixtures.py
are left as they are. For each model NAME it writes
    testdata/NAME.onnx                 the policy
    testdata/NAME.input.npy            a batch of observations (float32)
    testdata/NAME.<output>.npy         PyTorch's output for that batch, one file per output
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_fixtures import OUT, export  # noqa: E402  (one exporter for every fixture)

BATCH = 16


class MatMulPolicy(nn.Module):
    """A categorical actor-critic written with bare parameters, so the exporter emits MatMul + Add
    (never Gemm), plus the ops a hand-written policy tends to produce: observation normalisation
    with buffers (Sub, Div), a view that goes through Shape/Gather/Unsqueeze/Concat/Reshape,
    Sigmoid, Mul, Concat, Softmax and LogSoftmax on the last axis, and Unsqueeze/Squeeze."""

    def __init__(self, obs_dim=5, hidden=16, n_actions=3):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.register_buffer("obs_mean", torch.randn(obs_dim, generator=g) * 0.1)
        self.register_buffer("obs_std", torch.rand(obs_dim, generator=g) + 0.5)
        self.W1 = nn.Parameter(torch.randn(obs_dim, hidden, generator=g) / np.sqrt(obs_dim))
        self.b1 = nn.Parameter(torch.randn(hidden, generator=g) * 0.1)
        self.W2 = nn.Parameter(torch.randn(hidden, hidden, generator=g) / np.sqrt(hidden))
        self.b2 = nn.Parameter(torch.randn(hidden, generator=g) * 0.1)
        self.Wpi = nn.Parameter(torch.randn(hidden, n_actions, generator=g) / np.sqrt(hidden))
        self.bpi = nn.Parameter(torch.randn(n_actions, generator=g) * 0.1)
        self.Wv = nn.Parameter(torch.randn(hidden + obs_dim, 1, generator=g) / np.sqrt(hidden))
        self.bv = nn.Parameter(torch.randn(1, generator=g) * 0.1)

    def forward(self, state):
        x = (state - self.obs_mean) / self.obs_std
        x = x.view(x.size(0), -1)
        h = torch.tanh(x @ self.W1 + self.b1)
        gate = torch.sigmoid(h @ self.W2 + self.b2)
        h = (h * gate).unsqueeze(1).squeeze(1)
        logits = h @ self.Wpi + self.bpi
        value = torch.cat([h, x], dim=1) @ self.Wv + self.bv
        return torch.log_softmax(logits, dim=-1), torch.softmax(logits, dim=-1), value


def main():
    torch.manual_seed(4321)
    os.makedirs(OUT, exist_ok=True)
    x = torch.randn(BATCH, 5) * 2
    export("matmul_opset17", MatMulPolicy(), x, "state", ["logp", "probs", "value"], 17,
           {"towerrl.version": "0"})


if __name__ == "__main__":
    main()

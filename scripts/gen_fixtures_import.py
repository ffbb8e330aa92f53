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
import onnx
import torch
import torch.nn as nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")
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


def export(name, model, x, input_name, output_names, opset):
    model.eval()
    path = os.path.join(OUT, name + ".onnx")
    dyn = {input_name: {0: "batch"}}
    for o in output_names:
        dyn[o] = {0: "batch"}
    torch.onnx.export(model, (x,), path, input_names=[input_name], output_names=output_names,
                      dynamic_axes=dyn, opset_version=opset, do_constant_folding=True)
    m = onnx.load(path)
    p = m.metadata_props.add()
    p.key, p.value = "towerrl.version", "0"
    m.producer_name = "pytorch"
    onnx.checker.check_model(m)
    onnx.save(m, path)
    with torch.no_grad():
        outs = model(x)
    np.save(os.path.join(OUT, name + ".input.npy"), x.numpy().astype(np.float32))
    for o, y in zip(output_names, outs):
        np.save(os.path.join(OUT, name + "." + o + ".npy"), y.detach().numpy().astype(np.float32))
    print("wrote", path, [n.op_type for n in m.graph.node], "opset", m.opset_import[0].version,
          file=sys.stderr)


def main():
    torch.manual_seed(4321)
    os.makedirs(OUT, exist_ok=True)
    x = torch.randn(BATCH, 5) * 2
    export("matmul_opset17", MatMulPolicy(), x, "state", ["logp", "probs", "value"], 17)


if __name__ == "__main__":
    main()

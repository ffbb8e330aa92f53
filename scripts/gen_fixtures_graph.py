#!/usr/bin/python3
"""Export the PyTorch fixtures of the importer's operator-coverage tests (onnx/graph) into
testdata/graph_*.

Run with Debian's python3 (packages python3-torch, python3-onnx, python3-numpy):

    /usr/bin/python3 scripts/gen_fixtures_graph.py

For each model NAME it writes
    testdata/graph_NAME.onnx              the model, exported by torch.onnx.export
    testdata/graph_NAME.<input>.npy       the inputs it was run on (float32, or uint8 pixels)
    testdata/graph_NAME.<output>.npy      PyTorch's outputs for them (float32)
The forms are the ones torch 1.13 emits: nn.LayerNorm decomposed into ReduceMean, Sub, Pow,
Sqrt, Div, Mul, Add below opset 17 and LayerNormalization at 17; SiLU as Sigmoid and Mul; GELU
through Erf; an observation normaliser's buffers as initializers; uint8 pixels through Cast and
Div; nn.LSTM and nn.GRU as ONNX LSTM and GRU with the state inputs and outputs.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")
BATCH = 8


class LayerNormMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 16)
        self.norm = nn.LayerNorm(16)
        self.out = nn.Linear(16, 3)

    def forward(self, obs):
        return self.out(nn.functional.silu(self.norm(self.fc(obs))))


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 12)
        self.b = nn.Linear(12, 12)
        self.c = nn.Linear(12, 12)
        self.d = nn.Linear(12, 2)

    def forward(self, obs):
        h = nn.functional.elu(self.a(obs))
        h = nn.functional.leaky_relu(self.b(h), 0.2)
        h = nn.functional.gelu(self.c(h)) + nn.functional.selu(h) + nn.functional.softplus(h)
        return self.d(h), torch.clamp(h, -0.5, 0.5)


class Normalised(nn.Module):
    """VecNormalize baked in: (obs - mean) / sqrt(var + eps), clipped to ±10."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("obs_rms_mean", torch.randn(4, generator=g))
        self.register_buffer("obs_rms_var", torch.rand(4, generator=g) + 0.5)
        self.pi = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.vf = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, obs):
        x = torch.clamp((obs - self.obs_rms_mean) / torch.sqrt(self.obs_rms_var + 1e-8), -10.0, 10.0)
        return self.pi(x), self.vf(x)


class PixelCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2, 4, 4, stride=2), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(), nn.Flatten())
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, pixels):
        return self.head(self.conv(pixels.float() / 255.0))


class LSTMPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(3, 6)
        self.lstm = nn.LSTM(6, 5, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, obs, h0, c0):
        y, (h, c) = self.lstm(torch.tanh(self.enc(obs)), (h0, c0))
        return self.head(y), h, c


class GRUPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, obs, h0):
        y, h = self.gru(obs, h0)
        return self.head(y), h


def export(name, model, inputs, output_names, opset, dynamic):
    """inputs: [(name, tensor)]; dynamic: {name: {axis: label}}."""
    model.eval()
    path = os.path.join(OUT, "graph_" + name + ".onnx")
    args = tuple(t for _, t in inputs)
    torch.onnx.export(model, args, path, input_names=[n for n, _ in inputs], output_names=output_names,
                      dynamic_axes=dynamic, opset_version=opset, do_constant_folding=True)
    m = onnx.load(path)
    onnx.checker.check_model(m)
    with torch.no_grad():
        outs = model(*args)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    for n, t in inputs:
        np.save(os.path.join(OUT, "graph_" + name + "." + n + ".npy"), t.numpy())
    for o, y in zip(output_names, outs):
        np.save(os.path.join(OUT, "graph_" + name + "." + o + ".npy"), y.numpy().astype(np.float32))
    print("wrote", path, [n.op_type for n in m.graph.node], file=sys.stderr)


def main():
    torch.manual_seed(2024)
    os.makedirs(OUT, exist_ok=True)
    batch = {0: "batch"}
    obs5 = torch.randn(BATCH, 5)
    export("layernorm_opset13", LayerNormMLP(), [("obs", obs5)], ["y"], 13, {"obs": batch, "y": batch})
    export("layernorm_opset17", LayerNormMLP(), [("obs", obs5)], ["y"], 17, {"obs": batch, "y": batch})
    export("activations", Activations(), [("obs", torch.randn(BATCH, 4))], ["y", "clipped"], 13,
           {"obs": batch, "y": batch, "clipped": batch})
    export("vecnormalize", Normalised(), [("obs", torch.randn(BATCH, 4) * 2)], ["logits", "value"], 13,
           {"obs": batch, "logits": batch, "value": batch})
    pixels = torch.randint(0, 256, (BATCH, 2, 14, 14), dtype=torch.uint8)
    export("uint8_cnn", PixelCNN(), [("pixels", pixels)], ["logits"], 13, {"pixels": batch, "logits": batch})
    b, t = 4, 6
    export("lstm", LSTMPolicy(), [("obs", torch.randn(b, t, 3)), ("h0", torch.randn(1, b, 5) * 0.5),
                                  ("c0", torch.randn(1, b, 5) * 0.5)], ["logits", "h", "c"], 14,
           {"obs": {0: "batch"}, "h0": {1: "batch"}, "c0": {1: "batch"}, "logits": {0: "batch"},
            "h": {1: "batch"}, "c": {1: "batch"}})
    export("gru", GRUPolicy(), [("obs", torch.randn(t, b, 3)), ("h0", torch.randn(1, b, 5) * 0.5)],
           ["logits", "h"], 14, {"obs": {1: "batch"}, "h0": {1: "batch"}, "logits": {1: "batch"}, "h": {1: "batch"}})


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Time the Nature-CNN fixture in PyTorch and in towerrl (cmd/infer) on the same device, same
weights, fp32, in one command, and print both throughputs and their ratio as one JSON object.

    python3 scripts/cnn_compare.py --infer bin/infer [--device cuda] [--batch 1024] [--repeat 100]
                                   [--ort-lib PATH]

The PyTorch model is rebuilt from the ONNX file's own initializers (read with a small protobuf
reader, so the `onnx` package is not needed) and checked against the fixture's recorded PyTorch
outputs before anything is timed. For --device cuda, towerrl runs with --provider cuda and the
CUDA libraries of the Python environment's NVIDIA wheels are put on LD_LIBRARY_PATH. Needs
torch and numpy; written for the GPU machines, where there is no Go toolchain: build bin/infer
beforehand (CGO_ENABLED=1 go build -o bin/infer ./cmd/infer).
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message; value is an int or bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("unsupported protobuf wire type %d" % wt)
        yield num, wt, v


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def packed(buf):
    """The varints of a packed repeated field."""
    out, i = [], 0
    while i < len(buf):
        v, i = varint(buf, i)
        out.append(v)
    return out


def onnx_weights(path):
    """Float32 initializers of an ONNX model by name, with Identity outputs resolved."""
    model = open(path, "rb").read()
    graph = next(v for n, wt, v in fields(model) if n == 7)
    weights, alias = {}, {}
    for n, wt, v in fields(graph):
        if n == 5:  # TensorProto
            dims, name, raw, floats, dtype = [], None, None, [], None
            for fn, fwt, fv in fields(v):
                if fn == 1:
                    dims += [fv] if fwt == 0 else packed(fv)
                elif fn == 2:
                    dtype = fv
                elif fn == 8:
                    name = fv.decode()
                elif fn == 9:
                    raw = fv
                elif fn == 4:
                    floats.append(struct.unpack("<f", fv)[0] if fwt == 5 else None)
            if dtype != 1:
                continue
            data = np.frombuffer(raw, dtype="<f4") if raw is not None else np.array(floats, np.float32)
            weights[name] = data.reshape(dims).copy()
        elif n == 1:  # NodeProto
            ins, outs, op = [], [], None
            for fn, fwt, fv in fields(v):
                if fn == 1:
                    ins.append(fv.decode())
                elif fn == 2:
                    outs.append(fv.decode())
                elif fn == 4:
                    op = fv.decode()
            if op == "Identity":
                alias[outs[0]] = ins[0]
    for out, src in alias.items():
        if src in weights:
            weights[out] = weights[src]
    return weights


class NatureCNN(nn.Module):
    """scripts/gen_fixtures.py's NatureCNN (CleanRL's Atari PPO agent)."""

    def __init__(self, n_actions=6):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 512), nn.ReLU())
        self.actor = nn.Linear(512, n_actions)
        self.critic = nn.Linear(512, 1)

    def forward(self, pixels):
        hidden = self.network(pixels / 255.0)
        return self.actor(hidden), self.critic(hidden)


def nvidia_library_path():
    try:
        import nvidia
    except ImportError:
        return []
    return sorted(glob.glob(os.path.join(os.path.dirname(nvidia.__path__[0]), "nvidia", "*", "lib")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "testdata", "nature_cnn.onnx"))
    ap.add_argument("--infer", required=True, help="towerrl's cmd/infer binary")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for both (0: all cores)")
    ap.add_argument("--ort-lib", default="", help="ONNX Runtime library for cmd/infer")
    args = ap.parse_args()

    fixture = os.path.splitext(args.model)[0]
    x0 = np.load(fixture + ".input.npy")
    weights = onnx_weights(args.model)
    net = NatureCNN()
    state = {k: torch.from_numpy(weights[k]) for k in net.state_dict()}
    net.load_state_dict(state)
    net.eval()
    with torch.no_grad():
        logits, value = net(torch.from_numpy(x0))
    err = max(np.abs(logits.numpy() - np.load(fixture + ".action_logits.npy")).max(),
              np.abs(value.numpy() - np.load(fixture + ".state_value.npy")).max())
    if err > 1e-4:
        sys.exit("cnn_compare: the rebuilt PyTorch model differs from the fixture's outputs by %g" % err)

    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    net = net.to(dev)
    reps = -(-args.batch // x0.shape[0])
    xb = torch.from_numpy(np.concatenate([x0] * reps)[:args.batch]).to(dev)
    with torch.no_grad():
        for _ in range(5):
            net(xb)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.repeat):
            out = net(xb)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        torch_sps = args.batch * args.repeat / (time.perf_counter() - start)
        _ = out

    env = dict(os.environ)
    if args.device == "cuda":
        env["LD_LIBRARY_PATH"] = ":".join(nvidia_library_path() + [env.get("LD_LIBRARY_PATH", "")])
    with tempfile.TemporaryDirectory() as out:
        cmd = [args.infer, "--model", args.model, "--input", fixture + ".input.npy", "--out", out,
               "--batch", str(args.batch), "--repeat", str(args.repeat), "--threads", str(threads),
               "--provider", args.device]
        if args.ort_lib:
            cmd += ["--ort-lib", args.ort_lib]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit("cnn_compare: %s failed:\n%s" % (" ".join(cmd), res.stderr))
        tw = json.loads(res.stdout)
        got = np.load(os.path.join(out, "action_logits.npy"))[:x0.shape[0]]
    print(json.dumps({
        "device": args.device, "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
        "batch": args.batch, "repeat": args.repeat, "threads": threads,
        "torch_version": torch.__version__, "torch_samples_per_sec": torch_sps,
        "towerrl_provider": tw["provider"], "towerrl_samples_per_sec": tw["samples_per_sec"],
        "ratio": tw["samples_per_sec"] / torch_sps,
        "towerrl_vs_fixture_max_abs_diff": float(np.abs(got - np.load(fixture + ".action_logits.npy")).max()),
        "rebuilt_torch_vs_fixture_max_abs_diff": float(err),
    }))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch's side of scripts/gpu_check.sh: the peer timings, and the comparison of towerrl's
outputs and throughputs against them.

    python3 scripts/gpu_bench.py torch   --work DIR [--device cuda|cpu] [--dry-run] [--compile-budget S]
    python3 scripts/gpu_bench.py compare --work DIR

torch: rebuilds the Nature-CNN and CartPole MLP fixtures (testdata/nature_cnn.onnx,
testdata/mlp_tanh.onnx) in PyTorch from the ONNX files' own initializers (checked against the
fixtures' recorded outputs), draws fresh random inputs (DIR/data/*_x.npy, which cmd/infer then
reads), computes float64 references of every output, and times PyTorch on them:
  eager       inputs already on the device, timed with CUDA events (median of chunks);
  host        inputs from host (pageable numpy) memory copied in, outputs copied back, as
              cmd/infer does (ONNX Runtime's I/O binding binds host memory only);
  host_pinned the same from page-locked memory (what towerrl's CUDA sessions use);
  compile     torch.compile'd, inputs on the device (only where it runs, within S seconds).
Each in two precisions: fp32 (TF32 off for convolutions and matrix products) and default
(PyTorch's own defaults: TF32 convolutions, full float32 matrix products). Writes DIR/torch.json.

compare: reads DIR/torch.json, DIR/infer.jsonl and DIR/batcher.jsonl (written by
gpu_check.sh), checks each towerrl output against the float64 reference (relative error
||out - ref|| / ||ref||; fp32 runs must be within 1e-4), and writes DIR/summary.json and a
Markdown table DIR/summary.md, which it also prints.
"""
import argparse
import copy
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_compare import NatureCNN, onnx_weights  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TESTDATA = os.path.join(ROOT, "testdata")
TOL = 1e-4  # relative error allowed for fp32 outputs against float64


class MLPActorCritic(nn.Module):
    """scripts/gen_fixtures.py's MLPActorCritic (CleanRL's CartPole agent)."""

    def __init__(self, obs_dim=4, n_actions=2):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
        self.actor = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_actions))

    def forward(self, obs):
        return self.actor(obs), self.critic(obs)


# Per model: its PyTorch module, fixture, outputs, the batches timed (dry: in the dry run) and
# those also timed in PyTorch's default precision.
MODELS = {
    "cnn": dict(net=NatureCNN, fixture="nature_cnn", outputs=["action_logits", "state_value"],
                batches=[1, 256, 1024, 4096], dry=[1, 8], default_batches=[1024, 4096]),
    "mlp": dict(net=MLPActorCritic, fixture="mlp_tanh", outputs=["logits", "value"],
                batches=[1024, 65536], dry=[64, 256], default_batches=[65536]),
}


def load(name):
    m = MODELS[name]
    fixture = os.path.join(TESTDATA, m["fixture"])
    weights = onnx_weights(fixture + ".onnx")
    net = m["net"]()
    net.load_state_dict({k: torch.from_numpy(weights[k]) for k in net.state_dict()})
    net.eval()
    x0 = np.load(fixture + ".input.npy")
    with torch.no_grad():
        outs = net(torch.from_numpy(x0))
    for o, y in zip(m["outputs"], outs):
        err = np.abs(y.numpy() - np.load(fixture + "." + o + ".npy")).max()
        if err > 1e-4:
            sys.exit("gpu_bench: the rebuilt %s differs from the fixture's %s by %g" % (name, o, err))
    return net


def draw(name, rows, rng):
    if name == "cnn":  # Atari frames: integers 0..255 held in float32, as the fixture
        return rng.integers(0, 256, (rows, 4, 84, 84)).astype(np.float32)
    scale = np.array([2.4, 3.0, 0.21, 3.0])  # CartPole's positions and velocities
    return (rng.uniform(-1, 1, (rows, 4)) * scale).astype(np.float32)


def rel(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def bench(fn, dev, target_s=0.5, chunks=5):
    """Median seconds per call of fn: warm-up, then `chunks` chunks sized to fill target_s,
    each timed with CUDA events (or the wall clock on CPU)."""
    for _ in range(3):
        fn()
    sync(dev)
    t = time.perf_counter()
    fn()
    sync(dev)
    one = max(time.perf_counter() - t, 1e-6)
    n = int(min(max(target_s / chunks / one, 1), 2000))
    times = []
    for _ in range(chunks):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(n):
                fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1000 / n)
        else:
            t = time.perf_counter()
            for _ in range(n):
                fn()
            times.append((time.perf_counter() - t) / n)
    return float(np.median(times)), n * chunks


def set_precision(mode):
    # fp32: no TF32 anywhere; default: PyTorch's defaults (TF32 convolutions only).
    torch.backends.cudnn.allow_tf32 = mode == "default"
    torch.backends.cuda.matmul.allow_tf32 = False


def cmd_torch(args):
    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    torch.set_num_threads(os.cpu_count())
    rng = np.random.default_rng(20261128)
    data = os.path.join(args.work, "data")
    os.makedirs(data, exist_ok=True)
    res = {"device": args.device, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if dev.type == "cuda" else None,
           "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
           "rows": [], "compile": {}, "copy": {}}
    start = time.perf_counter()
    kept = {}
    for name, m in MODELS.items():
        batches = m["dry"] if args.dry_run else m["batches"]
        net = load(name).to(dev)
        x = draw(name, max(batches), rng)
        np.save(os.path.join(data, name + "_x.npy"), x)
        net64 = copy.deepcopy(net).double()
        with torch.no_grad():
            refs = [r.cpu().numpy() for r in net64(torch.from_numpy(x).double().to(dev))]
        del net64
        for o, r in zip(m["outputs"], refs):
            np.save(os.path.join(data, "%s_ref_%s.npy" % (name, o)), r)
        for mode in ["fp32", "default"]:
            set_precision(mode)
            for b in batches:
                if mode == "default" and not args.dry_run and b not in m["default_batches"]:
                    continue
                xb = x[:b]
                xd = torch.from_numpy(xb).to(dev)
                xp = torch.from_numpy(xb).pin_memory() if dev.type == "cuda" else None
                row = {"model": name, "batch": b, "mode": mode}
                with torch.no_grad():
                    outs = net(xd)
                    row["rel_err"] = {o: rel(y.cpu().numpy(), r[:b]) for o, y, r in zip(m["outputs"], outs, refs)}
                    row["eager_s"], row["eager_calls"] = bench(lambda: net(xd), dev)

                    def host(src):
                        ys = net(torch.from_numpy(src).to(dev) if isinstance(src, np.ndarray) else src.to(dev, non_blocking=True))
                        return [y.cpu() for y in ys]
                    row["host_s"], _ = bench(lambda: host(xb), dev)
                    if xp is not None:
                        row["host_pinned_s"], _ = bench(lambda: host(xp), dev)
                res["rows"].append(row)
                print("torch %s b=%d %s: eager %.3f ms, host %.3f ms, rel %s" % (
                    name, b, mode, row["eager_s"] * 1e3, row["host_s"] * 1e3,
                    {k: "%.1e" % v for k, v in row["rel_err"].items()}), file=sys.stderr, flush=True)
        if dev.type == "cuda" and name == "cnn":
            # Host-to-device copy of the largest CNN input: pageable and page-locked.
            xb = torch.from_numpy(x)
            xp = xb.pin_memory()
            gb = xb.numel() * 4 / 1e9
            res["copy"]["h2d_pageable_GBps"] = gb / bench(lambda: xb.to(dev), dev, chunks=3)[0]
            res["copy"]["h2d_pinned_GBps"] = gb / bench(lambda: xp.to(dev, non_blocking=True), dev, chunks=3)[0]
        kept[name] = (net, x, refs)
    # torch.compile, fp32, inputs on the device: each batch size compiles once, the sizes the
    # issue asks about first, until the budget (seconds from the start of this phase) is spent.
    set_precision("fp32")
    order = [("cnn", 1024), ("mlp", 65536), ("cnn", 4096), ("cnn", 256), ("mlp", 1024), ("cnn", 1)]
    if args.dry_run:
        order = [(n, b) for n in MODELS for b in MODELS[n]["dry"]]
    if not hasattr(torch, "compile"):
        res["compile"]["error"] = "torch %s has no torch.compile" % torch.__version__
        order = []
    compiled = {}
    for name, b in order:
        if time.perf_counter() - start > args.compile_budget:
            res["compile"].setdefault("skipped", []).append("%s b=%d (past the %d s budget)" % (name, b, args.compile_budget))
            continue
        net, x, refs = kept[name]
        xd = torch.from_numpy(x[:b]).to(dev)
        try:
            if name not in compiled:
                compiled[name] = torch.compile(net, dynamic=False)
            cnet = compiled[name]
            t = time.perf_counter()
            with torch.no_grad():
                outs = cnet(xd)
                sync(dev)
                secs = time.perf_counter() - t
                errs = {o: rel(y.cpu().numpy(), r[:b]) for o, y, r in zip(MODELS[name]["outputs"], outs, refs)}
                per_call, _ = bench(lambda: cnet(xd), dev)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            res["compile"]["error"] = "%s b=%d: %s" % (name, b, repr(e)[:300])
            break
        res["compile"]["%s_%d" % (name, b)] = {"s": per_call, "compile_s": secs, "rel_err": errs}
        print("torch.compile %s b=%d: %.3f ms (compiled in %.1f s)" % (name, b, per_call * 1e3, secs), file=sys.stderr, flush=True)
    with open(os.path.join(args.work, "torch.json"), "w") as f:
        json.dump(res, f, indent=1)


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cmd_compare(args):
    w = args.work
    tj = json.load(open(os.path.join(w, "torch.json")))
    torch_rows = {(r["model"], r["batch"], r["mode"]): r for r in tj["rows"]}
    rows, failures = [], []
    for r in read_jsonl(os.path.join(w, "infer.jsonl")):
        name, b, mode = r["model"], r["batch"], r["mode"]
        m = MODELS[name]
        row = {k: r[k] for k in ("tag", "model", "batch", "mode", "provider", "allow_nan")}
        res = r.get("result")
        if not res:
            row["error"] = r.get("error", "no result")
            rows.append(row)
            failures.append("%s: %s" % (r["tag"], row["error"]))
            continue
        row["ms_median"], row["sps"] = res.get("ms_per_run_median"), res.get("samples_per_sec")
        row["pinned"] = res.get("pinned_host")
        row["rel_err"] = {}
        for o in m["outputs"]:
            out = np.load(os.path.join(w, "infer", r["tag"], o + ".npy"))
            ref = np.load(os.path.join(w, "data", "%s_ref_%s.npy" % (name, o)))[:b]
            row["rel_err"][o] = rel(out.reshape(ref.shape), ref)
        worst = max(row["rel_err"].values())
        row["ok"] = worst <= TOL if mode == "fp32" else None
        if row["ok"] is False:
            failures.append("%s: relative error %.2e > %.0e" % (r["tag"], worst, TOL))
        t = torch_rows.get((name, b, mode))
        if t and row["ms_median"]:
            ms = row["ms_median"]
            row["torch_ms"] = {k: t[k + "_s"] * 1e3 for k in ("eager", "host", "host_pinned") if k + "_s" in t}
            row["ratio"] = {k: v / ms for k, v in row["torch_ms"].items()}  # >1: towerrl faster
            c = tj.get("compile", {}).get("%s_%d" % (name, b))
            if c and mode == "fp32":
                row["torch_ms"]["compile"] = c["s"] * 1e3
                row["ratio"]["compile"] = c["s"] * 1e3 / ms
        rows.append(row)
    batchers = read_jsonl(os.path.join(w, "batcher.jsonl"))
    summary = {"torch": {k: tj[k] for k in ("device", "torch", "cuda", "cudnn", "gpu", "copy", "compile")},
               "infer": rows, "batcher": batchers, "failures": failures}
    with open(os.path.join(w, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    md = table(rows, batchers, tj)
    with open(os.path.join(w, "summary.md"), "w") as f:
        f.write(md)
    print(md)
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))


def fmt(x, spec="%.3f"):
    return "—" if x is None else spec % x


def table(rows, batchers, tj):
    out = ["## infer (towerrl, ONNX Runtime) against PyTorch %s, %s" % (tj["torch"], tj["gpu"] or tj["device"]), "",
           "| model | batch | precision | provider | towerrl ms | samples/s | torch eager ms | torch host ms | torch pinned ms | torch.compile ms | × eager | × host | rel. error (worst) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append("| %s | %d | %s | %s | failed: %s |||||||||" % (r["model"], r["batch"], r["mode"], r["provider"], r["error"][:80]))
            continue
        t, q = r.get("torch_ms", {}), r.get("ratio", {})
        tag = "" if r["allow_nan"] else " (NaN check on)"
        if r["provider"] == "cuda" and r.get("pinned") is not None:
            tag += ", pinned" if r["pinned"] else ", pageable"
        out.append("| %s | %d | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %.1e |" % (
            r["model"], r["batch"], r["mode"], r["provider"], tag, fmt(r["ms_median"]), fmt(r["sps"], "%.3g"),
            fmt(t.get("eager")), fmt(t.get("host")), fmt(t.get("host_pinned")), fmt(t.get("compile")),
            fmt(q.get("eager"), "%.2f"), fmt(q.get("host"), "%.2f"), max(r["rel_err"].values())))
    if tj.get("copy"):
        out += ["", "Host-to-device copy of the 4096-frame CNN input (462 MB): pageable %.1f GB/s, pinned %.1f GB/s." % (
            tj["copy"]["h2d_pageable_GBps"], tj["copy"]["h2d_pinned_GBps"])]
    c = tj.get("compile", {})
    if "error" in c or "skipped" in c:
        out += ["", "torch.compile: %s" % "; ".join(filter(None, [c.get("error"), ", ".join(c.get("skipped", []))]))]
    out += ["", "## batcher (CartPole-v1, mlp_tanh policy)", "",
            "| device | workers × envs | env threads | steps/s | env | inference | sampling | buffers |", "|---|---|---|---|---|---|---|---|"]
    for b in batchers:
        r = b.get("result")
        if not r:
            out.append("| %s | %s | %s | failed: %s |||||" % (b["device"], b["shape"], b["env_threads"], b.get("error", "")[:80]))
            continue
        ts = r.get("time_split", {})
        out.append("| %s | %d × %d | %d | %.3g | %s | %s | %s | %s |" % (
            r["device"], r["workers"], r["envs_per_worker"], r["env_threads"], r["steps_per_sec"],
            *(fmt(ts.get(k), "%.2f") for k in ("env", "inference", "sampling", "buffers"))))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--work", required=True)
    t.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    t.add_argument("--dry-run", action="store_true", help="the small sizes of gpu_check.sh --dry-run")
    t.add_argument("--compile-budget", type=int, default=100, help="seconds from the start past which torch.compile is skipped")
    c = sub.add_parser("compare")
    c.add_argument("--work", required=True)
    args = ap.parse_args()
    {"torch": cmd_torch, "compare": cmd_compare}[args.cmd](args)


if __name__ == "__main__":
    main()

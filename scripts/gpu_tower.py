#!/usr/bin/env python3
"""PyTorch's side of scripts/gpu_tower.sh: the CUDA tower's peer timings and an independent
float64 check of its gradients.

    python3 scripts/gpu_tower.py bench   --out FILE [--device cuda|cpu] [--dry-run]
    python3 scripts/gpu_tower.py check   --dump DIR --out FILE
    python3 scripts/gpu_tower.py summary --work DIR

The network is learner/cudatower's TestCUDATiming one: CleanRL's continuous-action agent
(separate critic and actor_mean trunks) with 256x256 tanh hidden layers over 17 observations,
6 actions and a state-independent actor_logstd, trained with CleanRL's PPO loss (clip 0.2,
clipped value loss, entropy 0.01, value 0.5), in float32 with TF32 off.

bench: one forward and backward pass of the loss per call, minibatches of 256 and 4096 rows,
median of the timed calls after warm-up ones, each call ended by a synchronisation:
  torch_gpu   parameters, minibatch and gradients stay on the GPU (PyTorch's usual way);
  torch_gpu_novalidate  the same without torch.distributions' argument checks (CleanRL
              keeps them; they wait for the GPU);
  torch_host  as the CUDA tower works: the parameters and the minibatch are copied from host
              (pageable numpy) memory at each call and the flat gradient copied back;
  torch_cpu   the same network on the CPU (all cores), for scale.
Writes one JSON object per line to FILE.

check: reads what `cudatower.test -cuda -dump DIR` wrote (DIR/rowsN: the flat parameters, the
minibatch and both towers' gradients), computes the loss's gradient in float64 with PyTorch
and writes the relative error ||g - ref|| / ||ref|| of the CUDA and CPU towers' gradients.

summary: reads DIR/gotest.txt (its CHECK and TIMING lines), DIR/torch_bench.jsonl and
DIR/torch_check.jsonl and writes DIR/summary.md, which it also prints (no numpy or torch).
"""
import argparse
import json
import os
import sys
import time

OBS, ACT, HIDDEN = 17, 6, 256
COEFS = dict(ClipCoef=0.2, ClipVLoss=True, EntCoef=0.01, VfCoef=0.5)


def agent(torch, dtype, device, obs=OBS, act=ACT, hidden=(HIDDEN, HIDDEN)):
    """CleanRL's continuous-action agent: separate tanh trunks of the given widths."""
    nn = torch.nn

    def mlp(out):
        layers, n = [], obs
        for w in hidden:
            layers += [nn.Linear(n, w), nn.Tanh()]
            n = w
        return nn.Sequential(*layers, nn.Linear(n, out))

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = mlp(1)
            self.actor_mean = mlp(act)
            self.actor_logstd = nn.Parameter(torch.full((1, act), -0.5))

    return Agent().to(device=device, dtype=dtype)


def ppo_loss(torch, net, obs, actions, logp_old, adv, ret, val_old, c, validate=None):
    """CleanRL's ppo_continuous_action.py loss for one minibatch (advantages as given);
    validate=False turns off torch.distributions' argument checks (on by default), which
    wait for the GPU."""
    mean = net.actor_mean(obs)
    logstd = net.actor_logstd.expand_as(mean)
    dist = torch.distributions.Normal(mean, logstd.exp(), validate_args=validate)
    logp = dist.log_prob(actions).sum(1)
    entropy = dist.entropy().sum(1)
    value = net.critic(obs).view(-1)
    ratio = (logp - logp_old).exp()
    pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - c["ClipCoef"], 1 + c["ClipCoef"])).mean()
    if c["ClipVLoss"]:
        unclipped = (value - ret) ** 2
        clipped = val_old + torch.clamp(value - val_old, -c["ClipCoef"], c["ClipCoef"])
        v = 0.5 * torch.max(unclipped, (clipped - ret) ** 2).mean()
    else:
        v = 0.5 * ((value - ret) ** 2).mean()
    return pg - c["EntCoef"] * entropy.mean() + c["VfCoef"] * v


def bench(args):
    try:
        import numpy as np
        import torch
    except ImportError as e:
        if args.dry_run:
            print(f"gpu_tower.py: {e}: the dry run times nothing here", file=sys.stderr)
            open(args.out, "w").close()
            return
        raise
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rng = np.random.default_rng(1)
    runs = [("torch_gpu", args.device), ("torch_gpu_novalidate", args.device), ("torch_host", args.device), ("torch_cpu", "cpu")]
    if args.device == "cpu":
        runs = runs[:3]
    sizes = [8, 32] if args.dry_run else [256, 4096]
    with open(args.out, "w") as out:
        for rows in sizes:
            host = {"obs": rng.standard_normal((rows, OBS), dtype=np.float32),
                    "actions": rng.standard_normal((rows, ACT), dtype=np.float32),
                    "logp": (-1.2 + 0.2 * rng.standard_normal(rows)).astype(np.float32),
                    "adv": rng.standard_normal(rows, dtype=np.float32),
                    "ret": rng.standard_normal(rows, dtype=np.float32),
                    "val": (0.3 * rng.standard_normal(rows)).astype(np.float32)}
            for what, dev in runs:
                torch.manual_seed(1)
                net = agent(torch, torch.float32, dev)
                params = list(net.parameters())
                host_params = [p.detach().cpu().numpy().copy() for p in params]
                flat = np.empty(sum(p.numel() for p in params), dtype=np.float32)
                on_dev = {k: torch.from_numpy(v).to(dev) for k, v in host.items()}
                sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

                def call():
                    if what == "torch_host":
                        with torch.no_grad():
                            for p, h in zip(params, host_params):
                                p.copy_(torch.from_numpy(h))
                        d = {k: torch.from_numpy(v).to(dev) for k, v in host.items()}
                    else:
                        d = on_dev
                    for p in params:
                        p.grad = None
                    loss = ppo_loss(torch, net, d["obs"], d["actions"], d["logp"], d["adv"], d["ret"], d["val"], COEFS,
                                    validate=False if what == "torch_gpu_novalidate" else None)
                    loss.backward()
                    if what == "torch_host":
                        flat[:] = torch.cat([p.grad.reshape(-1) for p in params]).cpu().numpy()
                    sync()

                calls = 20 if args.dry_run else (200 if dev == "cuda" else max(10, 200 * 256 // rows))
                for _ in range(10):
                    call()
                times = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    call()
                    times.append((time.perf_counter() - t0) * 1e3)
                times.sort()
                rec = dict(tower=what, device=dev, rows=rows, calls=calls, ms_median=times[calls // 2],
                           ms_min=times[0], ms_p90=times[calls * 9 // 10], threads=torch.get_num_threads(),
                           torch=torch.__version__)
                print(json.dumps(rec), file=out, flush=True)
                print(f"gpu_tower.py: {what} {rows} rows: median {rec['ms_median']:.3f} ms", file=sys.stderr)


def check(args):
    import numpy as np
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with open(args.out, "w") as out:
        for sub in sorted(os.listdir(args.dump)):
            d = os.path.join(args.dump, sub)
            index = json.load(open(os.path.join(d, "index.json")))
            rows = index["rows"]
            load = lambda name: np.fromfile(os.path.join(d, name + ".f32"), dtype="<f4")  # noqa: E731
            flat = load("params").astype(np.float64)
            names = [p["name"] for p in index["params"]]
            if not all(n.split(".")[0] in ("critic", "actor_mean", "actor_logstd") for n in names):
                sys.exit(f"gpu_tower.py: {d} holds {names}: check rebuilds Gaussian heads on separate tanh trunks only")
            hidden = [p["shape"][1] for p in index["params"] if p["name"].startswith("critic.") and p["name"].endswith(".weight")][:-1]
            net = agent(torch, torch.float64, device, index["obs_dim"], index["act_dim"], hidden)
            named = dict(net.named_parameters())
            if sorted(named) != sorted(names):
                sys.exit(f"gpu_tower.py: {d}: parameters {names}, the rebuilt agent has {sorted(named)}")
            with torch.no_grad():
                for p in index["params"]:
                    n = 1
                    for s in p["shape"]:
                        n *= s
                    w = flat[p["offset"]:p["offset"] + n].reshape(p["shape"])
                    if p["name"].endswith(".weight"):
                        w = w.T  # towerrl stores linear weights [in, out], PyTorch [out, in]
                    named[p["name"]].copy_(torch.from_numpy(np.ascontiguousarray(w)))
            t = lambda name, *shape: torch.from_numpy(load(name).astype(np.float64).reshape(*shape)).to(device)  # noqa: E731
            loss = ppo_loss(torch, net, t("obs", rows, index["obs_dim"]), t("actions", rows, index["act_dim"]),
                            t("logp", rows), t("advantages", rows), t("returns", rows), t("values", rows), index["coefs"])
            loss.backward()
            ref = np.zeros_like(flat)
            for p in index["params"]:
                g = named[p["name"]].grad.detach().cpu().numpy()
                if p["name"].endswith(".weight"):
                    g = g.T
                ref[p["offset"]:p["offset"] + g.size] = g.reshape(-1)
            rec = dict(dump=sub, rows=rows, torch=torch.__version__, device=device, dtype="float64")
            for f in sorted(os.listdir(d)):
                if f.startswith("grad_") and f.endswith(".f32"):
                    g = load(f[:-4]).astype(np.float64)
                    rec[f[:-4] + "_rel_err"] = float(np.linalg.norm(g - ref) / np.linalg.norm(ref))
            print(json.dumps(rec), file=out, flush=True)
            print(f"gpu_tower.py: check {rows} rows: {rec}", file=sys.stderr)


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def summary(args):
    checks, timings = [], []
    gotest = os.path.join(args.work, "gotest.txt")
    if os.path.exists(gotest):
        for line in open(gotest):
            if line.startswith("CHECK "):
                checks.append(json.loads(line[6:]))
            elif line.startswith("TIMING "):
                timings.append(json.loads(line[7:]))
    bench_rows = read_jsonl(os.path.join(args.work, "torch_bench.jsonl"))
    torch_checks = read_jsonl(os.path.join(args.work, "torch_check.jsonl"))
    md = ["# CUDA tower: gradients and timings", ""]
    md += ["## Gradients against the CPU tower (relative error)", "", "| arch | rows | whole vector | worst parameter |", "|---|---|---|---|"]
    md += [f"| {c['arch']} | {c['rows']} | {c['rel_err']:.2g} | {c['worst_param_rel_err']:.2g} |" for c in checks]
    towers = sorted({k[5:-8] for c in torch_checks for k in c if k.startswith("grad_") and k.endswith("_rel_err")})
    md += ["", "## Gradients against PyTorch float64 (relative error)", "",
           "| minibatch | rows | " + " | ".join(f"{w} tower" for w in towers) + " |", "|---|---" + "|---" * len(towers) + "|"]
    cell = lambda c, k: f"{c[k]:.2g}" if k in c else "—"  # noqa: E731
    md += [f"| {c['dump']} | {c['rows']} | " + " | ".join(cell(c, f"grad_{w}_rel_err") for w in towers) + " |" for c in torch_checks]
    md += ["", "## One Grad, 256x256 tanh MLP, Gaussian head (ms, median)", ""]
    sizes = sorted({r["rows"] for r in timings + bench_rows})
    cols = [("cuda", "towerrl CUDA tower"), ("cpu", "towerrl CPU tower"), ("torch_gpu", "PyTorch GPU (all on GPU)"),
            ("torch_gpu_novalidate", "PyTorch GPU, no argument checks"),
            ("torch_host", "PyTorch GPU (host copies)"), ("torch_cpu", "PyTorch CPU")]
    md += ["| rows | " + " | ".join(c[1] for c in cols) + " | CUDA tower's loss on CPU |", "|---" * (len(cols) + 2) + "|"]
    for rows in sizes:
        cells = []
        loss = ""
        for key, _ in cols:
            r = [x for x in timings + bench_rows if x.get("tower") == key and x["rows"] == rows]
            cells.append(f"{r[0]['ms_median']:.3f}" if r else "—")
            if key == "cuda" and r and "ms_loss_cpu_mean" in r[0]:
                loss = f"{r[0]['ms_loss_cpu_mean']:.3f}"
        md.append(f"| {rows} | " + " | ".join(cells) + f" | {loss or '—'} |")
    updates = [x for x in timings if "update" in x]
    if updates:
        md += ["", "## learner.Towers.Update, 4096 rows (gradient, averaging, clipping, Adam on the host; ms, median of 5)", "",
               "| towers | ms |", "|---|---|"]
        md += [f"| {u['towers']} × {u['update']} | {u['ms_median']:.3f} |" for u in updates]
    text = "\n".join(md) + "\n"
    open(os.path.join(args.work, "summary.md"), "w").write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--out", required=True)
    b.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    b.add_argument("--dry-run", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("--dump", required=True)
    c.add_argument("--out", required=True)
    s = sub.add_parser("summary")
    s.add_argument("--work", required=True)
    args = ap.parse_args()
    {"bench": bench, "check": check, "summary": summary}[args.cmd](args)


if __name__ == "__main__":
    main()

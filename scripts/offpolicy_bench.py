#!/usr/bin/python3
"""Update speed of towerrl's DQN and SAC against PyTorch on one thread, in one run (issue 30).

    /usr/bin/python3 scripts/offpolicy_bench.py [--rounds 3] [--updates 50] [--go-bins DIR]

Builds the test binaries of engine/sac and engine/dqn (go test -c), then for each round runs,
one after the other: PyTorch's SAC update (SB3's SAC.train step: the critics' MSE step, the
actor's step through the critics, the entropy coefficient's step, Polyak targets) at
HalfCheetah's sizes (17 observations, 6 actions, 256x256 ReLU actor and twin critics, batch
256) and its Double DQN update (smooth L1, clip_grad_norm_ 10, 256x256 ReLU) at CartPole's
sizes with batch 64 and Acrobot's with batch 128, float32, torch.set_num_threads(1); then
towerrl's BenchmarkUpdate of each package (one and two towers, -test.benchtime Nx). Rounds
interleave the two so that a change in the machine's load hits both. Prints each round's
milliseconds per update and a Markdown table of the ranges over rounds.

--go-bins DIR takes sac.test and dqn.test from DIR instead of building them (a machine with no
Go toolchain). PyTorch is timed with the BLAS it links: Debian's python3-torch links the
reference libblas.so.3 (about 0.5 GFLOP/s for a 256x256 product here), which would make any
comparison meaningless, so the script measures that product first and refuses to go on below
5 GFLOP/s unless --slow-blas is given. OpenBLAS's single-thread build serves without touching
the system: `apt-get download libopenblas0-pthread`, `dpkg -x` it into a folder, and run the
script with LD_LIBRARY_PATH=<folder>/usr/lib/x86_64-linux-gnu/openblas-pthread and
OPENBLAS_NUM_THREADS=1 (docs/offpolicy.md).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def mlp(i, o, hidden=(256, 256)):
    layers, k = [], i
    for h in hidden:
        layers += [nn.Linear(k, h), nn.ReLU()]
        k = h
    return nn.Sequential(*layers, nn.Linear(k, o))


class SAC:
    def __init__(self, obs, act, batch):
        self.act = act
        self.actor = mlp(obs, 2 * act)
        self.q1, self.q2 = mlp(obs + act, 1), mlp(obs + act, 1)
        self.t1, self.t2 = mlp(obs + act, 1), mlp(obs + act, 1)
        self.t1.load_state_dict(self.q1.state_dict())
        self.t2.load_state_dict(self.q2.state_dict())
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.a_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-4)
        self.c_opt = torch.optim.Adam(list(self.q1.parameters()) + list(self.q2.parameters()), lr=3e-4)
        self.al_opt = torch.optim.Adam([self.log_alpha], lr=3e-4)
        self.obs, self.next = torch.randn(batch, obs), torch.randn(batch, obs)
        self.actions = torch.rand(batch, act) * 2 - 1
        self.rew, self.done = torch.randn(batch), torch.zeros(batch)

    def pi(self, x):
        h = self.actor(x)
        mu, ls = h[:, :self.act], torch.clamp(h[:, self.act:], -20, 2)
        std = ls.exp()
        u = mu + std * torch.randn_like(mu)
        a = torch.tanh(u)
        logp = torch.distributions.Normal(mu, std).log_prob(u).sum(1) - torch.log(1 - a ** 2 + 1e-6).sum(1)
        return a, logp

    def update(self):
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            a2, lp2 = self.pi(self.next)
            xa = torch.cat([self.next, a2], 1)
            y = self.rew + (1 - self.done) * 0.99 * (torch.min(self.t1(xa), self.t2(xa)).view(-1) - alpha * lp2)
        xa = torch.cat([self.obs, self.actions], 1)
        loss = 0.5 * (F.mse_loss(self.q1(xa).view(-1), y) + F.mse_loss(self.q2(xa).view(-1), y))
        self.c_opt.zero_grad()
        loss.backward()
        self.c_opt.step()
        a, lp = self.pi(self.obs)
        xa = torch.cat([self.obs, a], 1)
        actor_loss = (alpha * lp - torch.min(self.q1(xa), self.q2(xa)).view(-1)).mean()
        self.a_opt.zero_grad()
        actor_loss.backward()
        self.a_opt.step()
        alpha_loss = -(self.log_alpha * (lp.detach() - self.act)).mean()
        self.al_opt.zero_grad()
        alpha_loss.backward()
        self.al_opt.step()
        with torch.no_grad():
            for q, t in ((self.q1, self.t1), (self.q2, self.t2)):
                for p, tp in zip(q.parameters(), t.parameters()):
                    tp.mul_(1 - 0.005).add_(0.005 * p)


class DQN:
    def __init__(self, obs, n, batch):
        self.q, self.t = mlp(obs, n), mlp(obs, n)
        self.t.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-4)
        self.obs, self.next = torch.randn(batch, obs), torch.randn(batch, obs)
        self.actions = torch.randint(0, n, (batch, 1))
        self.rew, self.done = torch.randn(batch), torch.zeros(batch)

    def update(self):
        with torch.no_grad():
            k = self.q(self.next).argmax(1, keepdim=True)
            y = self.rew + (1 - self.done) * 0.99 * self.t(self.next).gather(1, k).view(-1)
        q = self.q(self.obs).gather(1, self.actions).view(-1)
        loss = F.smooth_l1_loss(q, y)
        self.opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), 10)
        self.opt.step()


def time_torch(model, updates):
    for _ in range(5):
        model.update()
    t0 = time.perf_counter()
    for _ in range(updates):
        model.update()
    return (time.perf_counter() - t0) / updates * 1e3


def build(pkg, out):
    subprocess.run(["go", "test", "-c", "-o", out, "./" + pkg], cwd=ROOT, check=True)


def time_go(binary, updates):
    out = subprocess.run([binary, "-test.run", "^$", "-test.bench", "BenchmarkUpdate", "-test.benchtime", "%dx" % updates],
                         capture_output=True, text=True, check=True).stdout
    res = {}
    for m in re.finditer(r"BenchmarkUpdate/(\S+?)-\d+\s+\d+\s+([\d.]+) ns/op", out):
        res[m.group(1)] = float(m.group(2)) / 1e6
    return res


def blas_gflops():
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    return 2 * 256 ** 3 * 20 / (time.perf_counter() - t0) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--updates", type=int, default=50)
    ap.add_argument("--go-bins", help="folder holding prebuilt sac.test and dqn.test")
    ap.add_argument("--slow-blas", action="store_true", help="go on with a BLAS below 5 GFLOP/s")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gf = blas_gflops()
    print("torch %s, one thread, 256x256 product at %.1f GFLOP/s" % (torch.__version__, gf), file=sys.stderr)
    if gf < 5 and not args.slow_blas:
        sys.exit("offpolicy_bench: PyTorch's BLAS does %.2f GFLOP/s (a reference BLAS?); see the docstring" % gf)
    if args.go_bins:
        sac_bin, dqn_bin = os.path.join(args.go_bins, "sac.test"), os.path.join(args.go_bins, "dqn.test")
    else:
        tmp = tempfile.mkdtemp()
        sac_bin, dqn_bin = os.path.join(tmp, "sac.test"), os.path.join(tmp, "dqn.test")
        build("engine/sac", sac_bin)
        build("engine/dqn", dqn_bin)
    rows = {}  # (update, runner) -> [ms per update per round]
    cases = {"sac b256": lambda: SAC(17, 6, 256), "dqn b64": lambda: DQN(4, 2, 64), "dqn b128": lambda: DQN(6, 3, 128)}
    go_names = {"sac b256": ("sac", ""), "dqn b64": ("dqn", "batch=64/"), "dqn b128": ("dqn", "batch=128/")}
    for r in range(args.rounds):
        for name, make in cases.items():
            rows.setdefault((name, "pytorch 1 thread"), []).append(time_torch(make(), args.updates))
        go = {"sac": time_go(sac_bin, args.updates), "dqn": time_go(dqn_bin, args.updates)}
        for name, (pkg, prefix) in go_names.items():
            for towers in (1, 2):
                rows.setdefault((name, "towerrl %d tower%s" % (towers, "s" if towers > 1 else "")), []).append(
                    go[pkg][prefix + "towers=%d" % towers])
        print("round %d: " % (r + 1) + ", ".join("%s %s %.2f ms" % (k[0], k[1], v[-1]) for k, v in rows.items()),
              file=sys.stderr)
    print("| update | runner | ms per update (min–max over %d rounds) | updates/s (median) |" % args.rounds)
    print("|---|---|---|---|")
    for (name, runner), v in rows.items():
        med = sorted(v)[len(v) // 2]
        print("| %s | %s | %.2f–%.2f | %.0f |" % (name, runner, min(v), max(v), 1e3 / med))
    load = os.getloadavg()
    print("\ntorch %s at %.1f GFLOP/s (256x256 product, one thread); load average at the end: %.1f %.1f %.1f on %d CPUs"
          % ((torch.__version__, gf) + load + (os.cpu_count(),)))


if __name__ == "__main__":
    main()

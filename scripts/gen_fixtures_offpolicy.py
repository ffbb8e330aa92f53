#!/usr/bin/python3
"""Reference updates of DQN and SAC in PyTorch (float64) for engine/dqn and engine/sac.

Run with Debian's python3 (python3-torch, python3-numpy):

    /usr/bin/python3 scripts/gen_fixtures_offpolicy.py

CI never runs this; its outputs are committed. Each case writes testdata/offpolicy/CASE.json:
the configuration, the networks' initial float32 parameters, and for each of a few
consecutive updates its minibatch (and, for SAC, the Gaussian noise), the losses, the
gradients before clipping, the parameters after Adam's step and the target networks after
their update, all computed in float64 from the float32 starting point.

Networks are flat vectors in engine/internal/mlp's layout: per layer W [in, out] row-major
(the transpose of nn.Linear.weight), then b [out]; a hidden activation, a linear output.

DQN is SB3's DQN loss (smooth_l1_loss, the gradient clipped by clip_grad_norm_) with Double
DQN's target (or SB3's max, "vanilla"). SAC is SB3's SAC.train step: the critics' loss
0.5·Σ mse(q_k, y) with y = r + γ(1 − terminated)(min_k Q_target,k(s′, a′) − α log π(a′|s′)),
then the actor's loss mean(α log π(a|s) − min_k Q_k(s, a)) through the updated critics, then
the entropy coefficient's loss −mean(log α · (log π + target entropy)) (α of the losses is
the value before its step), then Polyak on the critics' targets. The actor's log std is
clamped (SB3) or squashed by tanh into its bounds (CleanRL); the action is tanh(μ + σ·ε) and
log π subtracts Σ log(1 − a² + 1e-6).

sac_sde is SAC with generalized State-Dependent Exploration, as SB3's SAC with use_sde
computes it (StateDependentNoiseDistribution: full_std, exp, learn_features off, squashed; the
actor's mean through Hardtanh(-clip_mean, clip_mean)): the actor outputs the mean only, its
log std is a [last hidden width, |A|] parameter (flat after the network's, in the actor's
vector), and one exploration matrix W = exp(log std) * eps_w (the reparameterised sample of
reset_noise) makes the noise latent @ W of every row, observations and next observations
alike, the latent (the last hidden layer) detached; log pi is Normal(mean, sqrt(latent² @ std²
+ 1e-6)) at atanh of the squashed action (SB3's bijector inverse), less the tanh correction.

    /usr/bin/python3 scripts/gen_fixtures_offpolicy.py [CASE ...]

writes only the named cases (all without arguments).
"""
import json
import math
import os
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "offpolicy")
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)


def init_flat(rng, sizes):
    """nn.Linear's default initialisation, as float32 values: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    parts = []
    for k, n in zip(sizes[:-1], sizes[1:]):
        bound = 1 / math.sqrt(k)
        parts.append(rng.uniform(-bound, bound, size=(k + 1) * n))
    return np.concatenate(parts).astype(np.float32)


def forward(flat, sizes, x, act):
    off = 0
    last = len(sizes) - 2
    for layer, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = flat[off:off + k * n].view(k, n)
        b = flat[off + k * n:off + (k + 1) * n]
        off += (k + 1) * n
        x = x @ w + b
        if layer < last:
            x = torch.relu(x) if act == "relu" else torch.tanh(x)
    return x


def f32(x):
    return np.asarray(x, dtype=np.float32)


def lst(t):
    if isinstance(t, torch.Tensor):
        t = t.detach().numpy()
    return [float(v) for v in np.asarray(t).ravel()]


def clip_(g, max_norm):
    """torch.nn.utils.clip_grad_norm_ on one gradient; returns the norm before clipping."""
    norm = float(g.norm())
    if max_norm > 0:
        c = max_norm / (norm + 1e-6)
        if c < 1:
            g.mul_(c)
    return norm


def polyak(target, p, tau):
    with torch.no_grad():
        target.mul_(1 - tau).add_(tau * p)


def dqn_case(name, seed, obs_dim, n_act, hidden, act, batch, updates, gamma, lr, max_grad_norm,
             target_every, tau, vanilla):
    rng = np.random.default_rng(seed)
    sizes = [obs_dim] + hidden + [n_act]
    p0 = init_flat(rng, sizes)
    p = torch.tensor(p0.astype(np.float64), requires_grad=True)
    target = p.detach().clone()
    opt = torch.optim.Adam([p], lr=lr, eps=1e-8)
    out = dict(obs_dim=obs_dim, actions=n_act, hidden=hidden, act=act, batch=batch, gamma=gamma, lr=lr,
               max_grad_norm=max_grad_norm, target_every=target_every, tau=tau, vanilla=vanilla,
               params=lst(p0), updates=[])
    for u in range(updates):
        obs = f32(rng.normal(size=(batch, obs_dim)))
        nxt = f32(rng.normal(size=(batch, obs_dim)))
        acts = rng.integers(0, n_act, size=batch)
        rew = f32(rng.normal(scale=2.0, size=batch))
        term = f32(rng.random(batch) < 0.25)
        o, no = torch.tensor(obs.astype(np.float64)), torch.tensor(nxt.astype(np.float64))
        with torch.no_grad():
            qt = forward(target, sizes, no, act)
            if vanilla:
                v = qt.max(dim=1).values
            else:
                k = forward(p, sizes, no, act).argmax(dim=1)
                v = qt.gather(1, k.view(-1, 1)).view(-1)
            y = torch.tensor(rew.astype(np.float64)) + (1 - torch.tensor(term.astype(np.float64))) * gamma * v
        q = forward(p, sizes, o, act).gather(1, torch.tensor(acts).view(-1, 1)).view(-1)
        loss = torch.nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad()
        loss.backward()
        grad = p.grad.clone()
        norm = clip_(p.grad, max_grad_norm)
        opt.step()
        if (u + 1) % target_every == 0:
            polyak(target, p.detach(), tau)
        out["updates"].append(dict(obs=lst(obs), next_obs=lst(nxt), actions=[float(a) for a in acts], rewards=lst(rew),
                                   terminated=lst(term), loss=float(loss), q=float(q.mean()), grad=lst(grad),
                                   grad_norm=norm, params=lst(p), target=lst(target)))
    write(name, out)


def squash(mu, raw, eps, mode, lo, hi):
    """SB3's (or CleanRL's) actor head: the action, log pi and the log std."""
    if mode == "clamp":
        ls = torch.clamp(raw, lo, hi)
    else:
        ls = lo + 0.5 * (hi - lo) * (torch.tanh(raw) + 1)
    std = ls.exp()
    u = mu + std * eps
    a = torch.tanh(u)
    logp = torch.distributions.Normal(mu, std).log_prob(u).sum(1) - torch.log(1 - a ** 2 + 1e-6).sum(1)
    return a, logp


def sac_case(name, seed, obs_dim, act_dim, hidden, act, batch, updates, gamma, lr, tau, target_every,
             mode, lo, hi, init_alpha):
    rng = np.random.default_rng(seed)
    a_sizes = [obs_dim] + hidden + [2 * act_dim]
    c_sizes = [obs_dim + act_dim] + hidden + [1]
    actor0 = init_flat(rng, a_sizes)
    q0 = np.concatenate([init_flat(rng, c_sizes), init_flat(rng, c_sizes)])
    pc = len(q0) // 2
    actor = torch.tensor(actor0.astype(np.float64), requires_grad=True)
    critic = torch.tensor(q0.astype(np.float64), requires_grad=True)
    target = critic.detach().clone()
    log_alpha = torch.tensor([math.log(init_alpha)], requires_grad=True)
    a_opt = torch.optim.Adam([actor], lr=lr, eps=1e-8)
    c_opt = torch.optim.Adam([critic], lr=lr, eps=1e-8)
    al_opt = torch.optim.Adam([log_alpha], lr=lr, eps=1e-8)
    target_entropy = -float(act_dim)
    out = dict(obs_dim=obs_dim, act_dim=act_dim, hidden=hidden, act=act, batch=batch, gamma=gamma, lr=lr, tau=tau,
               target_every=target_every, log_std=mode, log_std_min=lo, log_std_max=hi, init_alpha=init_alpha,
               actor=lst(actor0), critic=lst(q0), updates=[])

    def q_both(flat, x, a):
        xa = torch.cat([x, a], dim=1)
        return forward(flat[:pc], c_sizes, xa, act).view(-1), forward(flat[pc:], c_sizes, xa, act).view(-1)

    def pi(x, eps):
        h = forward(actor, a_sizes, x, act)
        return squash(h[:, :act_dim], h[:, act_dim:], eps, mode, lo, hi)

    for u in range(updates):
        obs = f32(rng.normal(size=(batch, obs_dim)))
        nxt = f32(rng.normal(size=(batch, obs_dim)))
        acts = f32(rng.uniform(-1, 1, size=(batch, act_dim)))
        rew = f32(rng.normal(size=batch))
        term = f32(rng.random(batch) < 0.25)
        eps_next = f32(rng.normal(size=(batch, act_dim)))
        eps = f32(rng.normal(size=(batch, act_dim)))
        t64 = lambda v: torch.tensor(v.astype(np.float64))  # noqa: E731
        o, no, ac, r, d = t64(obs), t64(nxt), t64(acts), t64(rew), t64(term)
        alpha = float(log_alpha.detach().exp())
        # Critics.
        with torch.no_grad():
            a2, logp2 = pi(no, t64(eps_next))
            t1, t2 = q_both(target, no, a2)
            y = r + (1 - d) * gamma * (torch.min(t1, t2) - alpha * logp2)
        q1, q2 = q_both(critic, o, ac)
        critic_loss = 0.5 * (torch.nn.functional.mse_loss(q1, y) + torch.nn.functional.mse_loss(q2, y))
        c_opt.zero_grad()
        critic_loss.backward()
        critic_grad = critic.grad.clone()
        c_opt.step()
        # Actor, through the updated critics.
        a_pi, logp = pi(o, t64(eps))
        p1, p2 = q_both(critic, o, a_pi)
        actor_loss = (alpha * logp - torch.min(p1, p2)).mean()
        a_opt.zero_grad()
        actor_loss.backward()
        actor_grad = actor.grad.clone()
        a_opt.step()
        # Entropy coefficient.
        alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
        al_opt.zero_grad()
        alpha_loss.backward()
        al_opt.step()
        if (u + 1) % target_every == 0:
            polyak(target, critic.detach(), tau)
        out["updates"].append(dict(
            obs=lst(obs), next_obs=lst(nxt), actions=lst(acts), rewards=lst(rew), terminated=lst(term),
            eps=lst(eps), eps_next=lst(eps_next), alpha=alpha,
            critic_loss=float(critic_loss), q1=float(q1.mean()), q2=float(q2.mean()), critic_grad=lst(critic_grad),
            critic=lst(critic), target=lst(target),
            actor_loss=float(actor_loss), logp=float(logp.mean()), actor_grad=lst(actor_grad), actor=lst(actor),
            alpha_loss=float(alpha_loss), log_alpha=float(log_alpha)))
    write(name, out)


def sac_sde_case(name, seed, obs_dim, act_dim, hidden, act, batch, updates, gamma, lr, tau, target_every,
                 log_std_init, clip_mean, init_alpha):
    rng = np.random.default_rng(seed)
    a_sizes = [obs_dim] + hidden + [act_dim]
    c_sizes = [obs_dim + act_dim] + hidden + [1]
    latent_dim = hidden[-1]
    actor0 = np.concatenate([init_flat(rng, a_sizes),
                             np.full(latent_dim * act_dim, log_std_init, dtype=np.float32)]).astype(np.float32)
    q0 = np.concatenate([init_flat(rng, c_sizes), init_flat(rng, c_sizes)])
    pc, pa = len(q0) // 2, len(actor0) - latent_dim * act_dim
    actor = torch.tensor(actor0.astype(np.float64), requires_grad=True)
    critic = torch.tensor(q0.astype(np.float64), requires_grad=True)
    target = critic.detach().clone()
    log_alpha = torch.tensor([math.log(init_alpha)], requires_grad=True)
    a_opt = torch.optim.Adam([actor], lr=lr, eps=1e-8)
    c_opt = torch.optim.Adam([critic], lr=lr, eps=1e-8)
    al_opt = torch.optim.Adam([log_alpha], lr=lr, eps=1e-8)
    target_entropy = -float(act_dim)
    out = dict(obs_dim=obs_dim, act_dim=act_dim, hidden=hidden, act=act, batch=batch, gamma=gamma, lr=lr, tau=tau,
               target_every=target_every, sde=True, log_std_init=log_std_init, clip_mean=clip_mean,
               init_alpha=init_alpha, actor=lst(actor0), critic=lst(q0), updates=[])

    def q_both(flat, x, a):
        xa = torch.cat([x, a], dim=1)
        return forward(flat[:pc], c_sizes, xa, act).view(-1), forward(flat[pc:], c_sizes, xa, act).view(-1)

    def pi(x, w):
        """SB3's Actor.action_log_prob with use_sde: the squashed action and log pi."""
        h = x
        off = 0
        for k, n in zip(a_sizes[:-2], a_sizes[1:-1]):
            wt = actor[off:off + k * n].view(k, n)
            b = actor[off + k * n:off + (k + 1) * n]
            off += (k + 1) * n
            h = h @ wt + b
            h = torch.relu(h) if act == "relu" else torch.tanh(h)
        k, n = a_sizes[-2], a_sizes[-1]
        mean = h @ actor[off:off + k * n].view(k, n) + actor[off + k * n:off + (k + 1) * n]
        mean = torch.nn.functional.hardtanh(mean, -clip_mean, clip_mean)
        std = actor[pa:].view(latent_dim, act_dim).exp()
        z = h.detach()
        dist = torch.distributions.Normal(mean, torch.sqrt((z ** 2) @ (std ** 2) + 1e-6))
        a = torch.tanh(mean + z @ w)
        eps = torch.finfo(a.dtype).eps
        y = a.clamp(min=-1.0 + eps, max=1.0 - eps)
        g = 0.5 * (y.log1p() - (-y).log1p())
        logp = dist.log_prob(g).sum(1) - torch.log(1.0 - torch.tanh(g) ** 2 + 1e-6).sum(1)
        return a, logp

    for u in range(updates):
        obs = f32(rng.normal(size=(batch, obs_dim)))
        nxt = f32(rng.normal(size=(batch, obs_dim)))
        acts = f32(rng.uniform(-1, 1, size=(batch, act_dim)))
        rew = f32(rng.normal(size=batch))
        term = f32(rng.random(batch) < 0.25)
        eps_w = f32(rng.normal(size=(latent_dim, act_dim)))
        t64 = lambda v: torch.tensor(v.astype(np.float64))  # noqa: E731
        o, no, ac, r, d = t64(obs), t64(nxt), t64(acts), t64(rew), t64(term)
        alpha = float(log_alpha.detach().exp())
        # reset_noise: W = std * eps_w, with log std's value before this update; the critics'
        # step needs no gradient through it, the actor's gets it through the same draw.
        with torch.no_grad():
            w_now = actor[pa:].view(latent_dim, act_dim).exp() * t64(eps_w)
            a2, logp2 = pi(no, w_now)
            t1, t2 = q_both(target, no, a2)
            y = r + (1 - d) * gamma * (torch.min(t1, t2) - alpha * logp2)
        q1, q2 = q_both(critic, o, ac)
        critic_loss = 0.5 * (torch.nn.functional.mse_loss(q1, y) + torch.nn.functional.mse_loss(q2, y))
        c_opt.zero_grad()
        critic_loss.backward()
        critic_grad = critic.grad.clone()
        c_opt.step()
        w = actor[pa:].view(latent_dim, act_dim).exp() * t64(eps_w)
        a_pi, logp = pi(o, w)
        p1, p2 = q_both(critic, o, a_pi)
        actor_loss = (alpha * logp - torch.min(p1, p2)).mean()
        a_opt.zero_grad()
        actor_loss.backward()
        actor_grad = actor.grad.clone()
        a_opt.step()
        alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
        al_opt.zero_grad()
        alpha_loss.backward()
        al_opt.step()
        if (u + 1) % target_every == 0:
            polyak(target, critic.detach(), tau)
        out["updates"].append(dict(
            obs=lst(obs), next_obs=lst(nxt), actions=lst(acts), rewards=lst(rew), terminated=lst(term),
            eps_w=lst(eps_w), alpha=alpha,
            critic_loss=float(critic_loss), q1=float(q1.mean()), q2=float(q2.mean()), critic_grad=lst(critic_grad),
            critic=lst(critic), target=lst(target),
            actor_loss=float(actor_loss), logp=float(logp.mean()), actor_grad=lst(actor_grad), actor=lst(actor),
            alpha_loss=float(alpha_loss), log_alpha=float(log_alpha)))
    write(name, out)


def write(name, obj):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(path))


CASES = {
    "dqn_double": lambda: dqn_case(
        "dqn_double", 1, obs_dim=4, n_act=3, hidden=[16, 16], act="relu", batch=16, updates=3, gamma=0.9,
        lr=0.01, max_grad_norm=0.3, target_every=2, tau=1.0, vanilla=False),
    "dqn_vanilla": lambda: dqn_case(
        "dqn_vanilla", 2, obs_dim=5, n_act=4, hidden=[12, 10], act="tanh", batch=16, updates=3, gamma=0.99,
        lr=0.01, max_grad_norm=-1, target_every=1, tau=0.1, vanilla=True),
    "sac_clamp": lambda: sac_case(
        "sac_clamp", 3, obs_dim=5, act_dim=3, hidden=[16, 16], act="relu", batch=16, updates=3, gamma=0.99,
        lr=0.01, tau=0.1, target_every=1, mode="clamp", lo=-0.3, hi=0.2, init_alpha=1.0),
    "sac_tanh": lambda: sac_case(
        "sac_tanh", 4, obs_dim=4, act_dim=2, hidden=[12, 12], act="tanh", batch=16, updates=3, gamma=0.9,
        lr=0.01, tau=0.5, target_every=2, mode="tanh", lo=-5.0, hi=2.0, init_alpha=0.5),
    # gSDE: the mean clipped at ±0.15 so that the clip bites (about half the values), log std from -1 so that the noise
    # and its gradient are not negligible, two action dimensions for the matrix's layout.
    "sac_sde": lambda: sac_sde_case(
        "sac_sde", 5, obs_dim=4, act_dim=2, hidden=[16, 12], act="relu", batch=16, updates=3, gamma=0.95,
        lr=0.01, tau=0.2, target_every=1, log_std_init=-1.0, clip_mean=0.15, init_alpha=0.5),
}

if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit(f"unknown case {n!r}; the cases are {', '.join(CASES)}")
        CASES[n]()

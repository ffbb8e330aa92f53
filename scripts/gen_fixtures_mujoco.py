#!/usr/bin/python3
"""Export the MuJoCo foreign-policy fixtures (issue 27, point 4) into testdata/foreign/mujoco/:
Stable-Baselines3 PPO (with and without VecNormalize baked in) and SAC, and CleanRL's
ppo_continuous_action.py agent, for Gymnasium's MuJoCo v4 envs, with PyTorch's outputs on
observations recorded from towerrl's own envs.

Run with Debian's python3 (python3-torch, python3-onnx, python3-numpy; no Gymnasium, no MuJoCo
for Python, no RL library):

    /usr/bin/python3 scripts/gen_fixtures_mujoco.py            # everything (seconds)
    /usr/bin/python3 scripts/gen_fixtures_mujoco.py --only sb3_sac_hopper
    /usr/bin/python3 scripts/gen_fixtures_mujoco.py --record   # re-record the observations first

The networks and export calls are scripts/gen_fixtures_foreign.py's re-creations of each
library's module layout and documented export (imported from it, so the ONNX graphs come out as
the Pendulum fixtures' do). There is no MuJoCo here to train or score them on, so the weights are
each library's initialisation, with the output layers' gains raised and the biases drawn from
N(0, 0.5^2) so that the actions span the action range, as a trained policy's do, instead of
sitting at 0; what the fixtures pin down is the graph layout and PyTorch's numbers, not a return.

Observations come from towerrl's envs: for each env, the committed <env>.recorded.npz
(halfcheetah_v4.recorded.npz, ...) holds
    reset  [16, obs]      the first observation of envs 0..15 of
                          `batcher --policy random --env ENV --envs 16 --workers 1 --rollout 1
                           --steps 16 --seed 7` (a reset: no action has been taken yet, so any
                          policy run with the same flags sees the same rows)
    pool   [8, 64, obs]   8 envs x 64 steps of uniformly random actions
                          (`--envs 8 --workers 1 --rollout 64 --steps 512 --seed 8`), the data
                          VecNormalize's statistics are taken from
It is written by running towerrl's batcher (`go run -tags mujoco ./cmd/batcher`; needs Go and
libmujoco-dev) when missing or with --record; otherwise this script needs neither.

For each fixture NAME it writes, besides the files gen_fixtures_foreign.py writes for every
fixture (NAME.onnx, NAME.input.npy = the 16 reset rows, NAME.<output>.npy, NAME.json), PyTorch's
own values on the input rows, computed from the module (not the export):
    NAME.ref_mean.npy         the Gaussian mean (SAC: mu, before tanh)       [16, act]
    NAME.ref_log_std.npy      the log_std, broadcast to one row per obs      [16, act]
    NAME.ref_value.npy        the state value (absent for SAC's actor)        [16]
    NAME.ref_env_actions.npy  the deterministic action the env takes: the mean clipped to the
                              env's bounds; SAC: low + (tanh(mu) + 1) (high - low) / 2   [16, act]
    NAME.ref_logp_mode.npy    log-density of the Gaussian at its mean, -sum(log_std) - D/2 log 2pi
                              (what a deterministic step records as logp)     [16]
and NAME.json gains "reference" (those files), "bounds" and "recorded" (how the rows were made).
README.md there lists them.
"""
import argparse
import collections
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures_foreign as gff  # noqa: E402  (the module layouts, Fixture and write_fixture)

ROOT = os.path.join(HERE, "..")
OUT = os.path.join(ROOT, "testdata", "foreign", "mujoco")
ROWS = gff.ROWS  # 16

# Gymnasium v4: observation size, action size, action bounds (the actuators' ctrlrange).
ENVS = {
    "HalfCheetah-v4": (17, 6, -1.0, 1.0),
    "Hopper-v4": (11, 3, -1.0, 1.0),
    "InvertedPendulum-v4": (4, 1, -3.0, 3.0),
    "Humanoid-v4": (376, 17, -0.4, 0.4),
}
BIAS_STD = 0.5  # see random_biases
# The batcher flags the observations are recorded with (see the docstring).
RESET_ARGS = ["--envs", "16", "--workers", "1", "--rollout", "1", "--steps", "16", "--seed", "7"]
POOL_ARGS = ["--envs", "8", "--workers", "1", "--rollout", "64", "--steps", "512", "--seed", "8"]


# ---------------------------------------------------------------------------------------------
# Observations, recorded with towerrl's batcher.


def recorded_path(env_id):
    return os.path.join(OUT, env_id.replace("-", "_").lower() + ".recorded.npz")


def batcher_observations(env_id, args):
    """Runs towerrl's batcher with the random policy and returns its observations [envs, T, obs]
    (a shard's rows are env-major: row i*T + t is env i's step t)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "data")
        cmd = ["go", "run", "-tags", "mujoco", "./cmd/batcher", "--policy", "random", "--env", env_id,
               "--out", out] + args
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        shards = sorted(glob.glob(os.path.join(out, "shard-*.npz")))
        if len(shards) != 1:
            raise RuntimeError(f"{' '.join(cmd)}: {len(shards)} shards, want 1")
        obs = np.load(shards[0])["observations"]
    n = int(args[args.index("--envs") + 1])
    return obs.reshape(n, -1, obs.shape[-1])


def record(env_id):
    reset = batcher_observations(env_id, RESET_ARGS)[:, 0]
    pool = batcher_observations(env_id, POOL_ARGS)
    np.savez(recorded_path(env_id), reset=reset, pool=pool)
    print(f"recorded {env_id}: reset {reset.shape}, pool {pool.shape}", file=sys.stderr)


def observations(env_id):
    with np.load(recorded_path(env_id)) as f:
        reset, pool = f["reset"].astype(np.float32), f["pool"].astype(np.float32)
    if reset.shape != (ROWS, ENVS[env_id][0]):
        raise RuntimeError(f"{recorded_path(env_id)}: reset rows {reset.shape}")
    return reset, pool


RECORDED = ("The 16 input rows are towerrl's own {env} reset observations: the first observation of "
            "envs 0..15 of `batcher --policy random --env {env} " + " ".join(RESET_ARGS) + "` (no action "
            "taken yet, so the same flags give the same rows with any policy).")


# ---------------------------------------------------------------------------------------------
# Weights.


def sb3_ortho_init(policy, action_gain):
    """SB3 ActorCriticPolicy with ortho_init=True: orthogonal weights, zero biases, gain sqrt(2) in
    the MLP extractor, 1 on value_net; action_net gets action_gain (SB3: 0.01)."""
    def init(module, gain):
        for m in module.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, gain=gain)
                m.bias.data.fill_(0.0)
    init(policy.mlp_extractor, math.sqrt(2))
    init(policy.action_net, action_gain)
    init(policy.value_net, 1.0)


def random_biases(module, std):
    """Every Linear's bias drawn from N(0, std^2): an initialised network's are 0 (or tiny), a
    trained one's are not, and on observations near the initial state zero biases give actions
    near 0, which would hide a wrong scale or squashing."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                m.bias.normal_(0.0, std)


def fit_means(policy, states, high):
    """Scales action_net down (never up) so that the Gaussian means on states lie within
    [-high, high], as a policy trained on the env's bounds keeps them."""
    with torch.no_grad():
        latent_pi = policy.mlp_extractor.forward_actor(policy.extract_features(torch.from_numpy(states)))
        q = float(np.abs(policy.action_net(latent_pi).numpy()).max())
        if q > high:
            policy.action_net.weight.mul_(high / q)
            policy.action_net.bias.mul_(high / q)


def set_log_std(param, values):
    with torch.no_grad():
        param.copy_(torch.tensor(values, dtype=torch.float32).reshape(param.shape))


# ---------------------------------------------------------------------------------------------
# PyTorch's reference values, from the modules.


def gaussian_logp_mode(log_std):
    """log N(mean; mean, exp(log_std)) summed over the action: what a deterministic step records."""
    ls = log_std.astype(np.float64)
    return (-ls.sum(1) - 0.5 * ls.shape[1] * math.log(2 * math.pi)).astype(np.float32)


def references(env_id, mean, log_std, value, squashed):
    low, high = ENVS[env_id][2], ENVS[env_id][3]
    mean = mean.detach().numpy().astype(np.float32)
    log_std = np.broadcast_to(log_std.detach().numpy(), mean.shape).astype(np.float32)
    if squashed:
        env = low + (np.tanh(mean.astype(np.float64)) + 1.0) * (high - low) / 2.0
    else:
        env = np.clip(mean.astype(np.float64), low, high)
    refs = {"mean": mean, "log_std": log_std, "env_actions": env.astype(np.float32),
            "logp_mode": gaussian_logp_mode(log_std)}
    if value is not None:
        refs["value"] = value.detach().numpy().reshape(-1).astype(np.float32)
    return refs


def ppo_refs(env_id, policy, obs):
    with torch.no_grad():
        features = policy.extract_features(obs)
        latent_pi, latent_vf = policy.mlp_extractor(features)
        return references(env_id, policy.action_net(latent_pi), policy.log_std, policy.value_net(latent_vf), False)


def sac_refs(env_id, actor, obs):
    with torch.no_grad():
        mean, log_std, _ = actor.get_action_dist_params(obs)
        return references(env_id, mean, log_std, None, True)


def cleanrl_refs(env_id, agent, obs):
    with torch.no_grad():
        return references(env_id, agent.actor_mean(obs), agent.actor_logstd, agent.critic(obs), False)


# ---------------------------------------------------------------------------------------------
# The fixtures: (Fixture, refs) pairs.


def env_slug(env_id):
    return env_id.split("-")[0].lower()


def sb3_ppo(env_id, reset, pool, vecnorm):
    obs_dim, act_dim = ENVS[env_id][:2]
    torch.manual_seed(41 if vecnorm else 40)
    if vecnorm:
        # RL Zoo's hyperparams/ppo.yml for HalfCheetah (and Hopper, Walker2d, Ant): normalize: true,
        # policy_kwargs dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU,
        # net_arch=dict(pi=[256, 256], vf=[256, 256])).
        policy = gff.SB3ActorCriticPolicy(obs_dim, ("box", act_dim), net_arch=dict(pi=[256, 256], vf=[256, 256]),
                                          activation_fn=nn.ReLU, log_std_init=-2.0)
        with torch.no_grad():
            policy.action_net.weight.mul_(2.0)  # torch's default init, made to reach the bounds
        random_biases(policy, BIAS_STD)
        states = pool.reshape(-1, obs_dim).astype(np.float64)
        mean, var = states.mean(0), states.var(0)
        module = gff.VecNormalizeSB3Policy(policy, mean.astype(np.float32), var.astype(np.float32), 10.0, 1e-8)
        name = f"sb3_ppo_{env_slug(env_id)}_vecnorm"
        short = "SB3 OnnxableSB3Policy + VecNormalize mean/var buffers (RL Zoo policy_kwargs), batch 1"
        family = "sb3-ppo+vecnormalize"
        recipe = (gff.SB3_NEW + " The module first applies VecNormalize's observation normalisation, with the "
                  "saved obs_rms mean/var registered as buffers: clip((obs - mean) / sqrt(var + 1e-8), -10, 10). "
                  "Policy as RL Zoo's hyperparams/ppo.yml trains it for MuJoCo: normalize: true, "
                  "policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, "
                  "net_arch=dict(pi=[256, 256], vf=[256, 256])).")
        notes = (f"Untrained: torch's default Linear init (ortho_init=False), action_net's weights x2, biases from N(0, 0.5^2); log_std "
                 f"-2 (log_std_init). obs_rms from towerrl's {env_id} under uniformly random actions (8 envs x 64 "
                 "steps, `batcher --policy random " + " ".join(POOL_ARGS) + "`); clip_obs 10, epsilon 1e-8. ")
        x = torch.from_numpy(reset)
        policy_obs = torch.clamp((x - module.obs_mean) / torch.sqrt(module.obs_var + module.epsilon), -10.0, 10.0)
    else:
        # SB3's PPO MlpPolicy defaults: pi/vf 64x64 tanh, ortho_init, log_std_init 0.
        policy = gff.SB3ActorCriticPolicy(obs_dim, ("box", act_dim))
        sb3_ortho_init(policy, action_gain=1.0)
        random_biases(policy, BIAS_STD)
        fit_means(policy, np.concatenate([reset, pool.reshape(-1, obs_dim)]), ENVS[env_id][3])
        set_log_std(policy.log_std, np.linspace(-1.2, -0.2, act_dim))
        module = gff.OnnxableSB3Policy(policy)
        name = f"sb3_ppo_{env_slug(env_id)}"
        short = "SB3 OnnxableSB3Policy (docs now), batch 1"
        family = "sb3-ppo"
        recipe = gff.SB3_NEW
        notes = ("Untrained: SB3's MlpPolicy defaults (pi/vf 64x64 tanh, shared FlattenExtractor, orthogonal init) "
                 "with action_net's gain 1 instead of 0.01, biases from N(0, 0.5^2) (action_net then scaled down, "
                 "if need be, so that its means on the recorded states lie within the env's bounds), and log_std set to linspace(-1.2, -0.2) so each "
                 "dimension's differs. ")
        policy_obs = torch.from_numpy(reset)
    refs = ppo_refs(env_id, policy, policy_obs)
    fx = gff.Fixture(name, short=short, family=family, recipe=recipe, env=env_id, module=module,
                     args=(torch.randn(1, obs_dim),), input_names=["input"], opset=17, fixed_batch=True,
                     roles=["actions", "value", "log_prob"],
                     bind=gff.bind_of({"actions": 0, "value": 1}, {"mean": ("/policy/action_net/", "Gemm")},
                                      {"log_std": "policy.log_std"}),
                     head="gaussian", make_runner=gff.ff_runner(module), to_action=None, rows=reset,
                     notes=notes + "The deterministic actions are the mean, unclipped (SB3 clips outside the "
                                   f"policy); log_std is SB3's state-independent parameter of shape [{act_dim}].")
    return fx, refs


SAC_RECIPE = ("SB3 docs 'Exporting models', SAC: OnnxablePolicy(model.policy.actor) returning "
              "actor(obs, deterministic=True) = tanh(mu(obs)) in [-1, 1]; th.onnx.export(..., th.randn(1, *obs_shape), "
              "opset_version=17, input_names=['input']): batch fixed at 1, output auto-named.")


def sb3_sac(env_id, reset, seed):
    obs_dim, act_dim, low, high = ENVS[env_id]
    torch.manual_seed(seed)
    actor = gff.SB3SACActor(obs_dim, act_dim)  # SB3's SAC defaults: net_arch [256, 256], ReLU
    with torch.no_grad():
        actor.mu.weight.mul_(4.0)  # torch's default init, made to reach the bounds
    random_biases(actor, BIAS_STD)
    module = gff.OnnxableSACActor(actor)
    refs = sac_refs(env_id, actor, torch.from_numpy(reset))
    scale = "" if (low, high) == (-1.0, 1.0) else (
        f" The env's bounds are [{low:g}, {high:g}]: the env action is {low:g} + (a + 1) * {high - low:g} / 2.")
    fx = gff.Fixture(f"sb3_sac_{env_slug(env_id)}", short="SB3 SAC OnnxablePolicy(actor) (docs), batch 1",
                     family="sb3-sac", recipe=SAC_RECIPE, env=env_id, module=module,
                     args=(torch.randn(1, obs_dim),), input_names=["input"], opset=17, fixed_batch=True,
                     roles=["actions"],
                     bind=gff.bind_of({"actions": 0}, {"mean": ("/actor/mu/", "Gemm"), "log_std": ("/actor/", "Clip")}),
                     head="tanh-gaussian", action_scaling="env", make_runner=gff.ff_runner(module), to_action=None,
                     rows=reset,
                     notes="Untrained SAC Actor with SB3's defaults (latent_pi 256x256 ReLU, mu, log_std Linear clamped "
                           "to [-20, 2]; torch's default init, mu's weights x4, biases from N(0, 0.5^2)). The graph's output is tanh(mu) in "
                           "[-1, 1] (action_scaling 'env': map [-1, 1] onto the env's bounds)." + scale +
                           " bind.mean is mu before tanh; bind.log_std the clamped log_std Linear.")
    return fx, refs


def cleanrl_ppo(env_id, reset):
    obs_dim, act_dim = ENVS[env_id][:2]
    torch.manual_seed(43)
    agent = gff.CleanRLContinuousAgent(obs_dim, act_dim)
    gff.layer_init(agent.actor_mean[4], std=0.5)  # CleanRL: std=0.01
    random_biases(agent, BIAS_STD)
    set_log_std(agent.actor_logstd, np.linspace(-1.0, 0.0, act_dim))
    module = gff.CleanRLContinuousExport(agent)
    names = ["action_mean", "action_logstd", "value"]
    refs = cleanrl_refs(env_id, agent, torch.from_numpy(reset))
    fx = gff.Fixture(f"cleanrl_{env_slug(env_id)}", short="CleanRL Agent, torch.onnx.export, dynamic batch",
                     family="cleanrl", recipe=gff.CLEANRL, env=env_id, module=module,
                     args=(torch.randn(8, obs_dim),), input_names=["obs"], output_names=names, opset=17,
                     dynamic_axes={n: {0: "batch"} for n in ["obs"] + names}, fixed_batch=False,
                     roles=["mean", "log_std", "value"], bind=gff.bind_of({"mean": 0, "log_std": 1, "value": 2}),
                     head="gaussian", make_runner=gff.ff_runner(module), to_action=None, rows=reset,
                     notes="Untrained ppo_continuous_action.py Agent (critic, actor_mean 64x64 tanh, layer_init; "
                           "actor_mean's last layer with std 0.5 instead of 0.01, biases from N(0, 0.5^2); actor_logstd [1, D] set to "
                           "linspace(-1, 0), expanded to the mean's shape). CleanRL trains through gym's "
                           "NormalizeObservation and TransformObservation(clip -10..10) wrappers, which live in the "
                           "env, not in the agent: the exported graph takes raw observations, as this one does, "
                           "and a user who runs it must normalise as the wrappers did (their running mean/var are "
                           "not saved by CleanRL).")
    return fx, refs


GROUPS = collections.OrderedDict([
    ("sb3_ppo_halfcheetah", lambda r, p: sb3_ppo("HalfCheetah-v4", r, p, vecnorm=False)),
    ("sb3_ppo_halfcheetah_vecnorm", lambda r, p: sb3_ppo("HalfCheetah-v4", r, p, vecnorm=True)),
    ("sb3_sac_halfcheetah", lambda r, p: sb3_sac("HalfCheetah-v4", r, 42)),
    ("cleanrl_halfcheetah", lambda r, p: cleanrl_ppo("HalfCheetah-v4", r)),
    ("sb3_sac_hopper", lambda r, p: sb3_sac("Hopper-v4", r, 44)),
    ("sb3_sac_invertedpendulum", lambda r, p: sb3_sac("InvertedPendulum-v4", r, 45)),
    ("sb3_ppo_humanoid", lambda r, p: sb3_ppo("Humanoid-v4", r, p, vecnorm=False)),
])
GROUP_ENV = {"sb3_ppo_halfcheetah": "HalfCheetah-v4", "sb3_ppo_halfcheetah_vecnorm": "HalfCheetah-v4",
             "sb3_sac_halfcheetah": "HalfCheetah-v4", "cleanrl_halfcheetah": "HalfCheetah-v4",
             "sb3_sac_hopper": "Hopper-v4", "sb3_sac_invertedpendulum": "InvertedPendulum-v4",
             "sb3_ppo_humanoid": "Humanoid-v4"}


def write(fx, refs):
    meta = gff.write_fixture(fx)
    gff.check_written(fx, meta)
    files = {}
    for k in ("mean", "log_std", "value", "env_actions", "logp_mode"):
        if k in refs:
            files[k] = f"{fx.name}.ref_{k}.npy"
            np.save(os.path.join(OUT, files[k]), refs[k])
    # The graph's own deterministic output must agree with the module's reference.
    for o in meta["outputs"]:
        y = np.load(os.path.join(OUT, o["file"]))
        if o["role"] == "actions" and fx.head == "gaussian" and not np.allclose(y, refs["mean"], atol=1e-6):
            raise RuntimeError(f"{fx.name}: actions output differs from the mean")
        if o["role"] == "actions" and fx.head == "tanh-gaussian" and not np.allclose(y, np.tanh(refs["mean"]), atol=1e-6):
            raise RuntimeError(f"{fx.name}: actions output differs from tanh(mu)")
    obs_dim, act_dim, low, high = ENVS[fx.env]
    meta["reference"] = files
    meta["bounds"] = {"low": low, "high": high, "action_dim": act_dim}
    meta["recorded"] = RECORDED.format(env=fx.env)
    with open(os.path.join(OUT, fx.name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    inside = float(np.mean(np.abs(refs["env_actions"]) < high - 1e-6))
    print(f"  {fx.name}: {os.path.getsize(os.path.join(OUT, fx.name + '.onnx')) / 1024:.0f} KB; "
          f"{100 * inside:.0f}% of env actions inside the bounds", file=sys.stderr)


def write_readme():
    metas = {}
    for f in sorted(os.listdir(OUT)):
        if f.endswith(".json"):
            with open(os.path.join(OUT, f)) as fh:
                metas[f[:-5]] = json.load(fh)
    lines = [
        "# MuJoCo foreign-policy fixtures (issue 27, point 4)",
        "",
        "Stable-Baselines3 PPO (with and without VecNormalize baked in) and SAC, and CleanRL's",
        "`ppo_continuous_action.py` agent, exported as those libraries' users export them, for Gymnasium's",
        "MuJoCo v4 envs. Written by `scripts/gen_fixtures_mujoco.py` (`/usr/bin/python3",
        "scripts/gen_fixtures_mujoco.py [--only NAME,...] [--record]`; Debian's python3-torch, python3-onnx,",
        "numpy). The module layouts and export calls are `scripts/gen_fixtures_foreign.py`'s (see",
        "`../README.md` for the file layout and `NAME.json`'s fields). No MuJoCo for Python exists here, so",
        "the policies are untrained (each library's initialisation, output gains raised and biases drawn",
        "from N(0, 0.5²) so the actions span the bounds): the fixtures pin down the graphs' layouts and",
        "PyTorch's numbers, not a return (`pytorch_return` is null).",
        "",
        "The input rows are towerrl's own observations, recorded with its batcher into",
        "`<env>.recorded.npz` (e.g. `halfcheetah_v4.recorded.npz`; `reset`: the first observation of 16",
        "envs after a reset, seed 7, which any policy run with `--envs 16 --workers 1 --rollout 1 --seed 7`",
        "sees again; `pool`: 8 envs x 64 random steps, seed 8, VecNormalize's statistics). Besides each",
        "graph output, PyTorch's module values on those rows: `NAME.ref_mean.npy` (SAC: mu before tanh),",
        "`NAME.ref_log_std.npy`, `NAME.ref_value.npy`, `NAME.ref_env_actions.npy` (the deterministic",
        "action the env takes: the mean clipped to the bounds, SAC's tanh(mu) mapped onto them) and",
        "`NAME.ref_logp_mode.npy` (-sum(log_std) - D/2 log 2pi, the logp of a deterministic step).",
        "",
        "Checked by `go test -tags mujoco ./cmd/batcher ./cmd/eval ./cmd/train -run Mujoco`.",
        "",
        "| fixture | family | env | recipe | batch | inputs | outputs | head | onnx |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in metas.items():
        size = os.path.getsize(os.path.join(OUT, name + ".onnx")) / 1024
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {:.0f} KB |".format(
            name, m["family"], m["env"], m["recipe_short"], "dynamic" if m["dynamic_batch"] else "fixed 1",
            gff.fmt_io(m["inputs"]), gff.fmt_io(m["outputs"]),
            m["head"] + ("" if m["action_scaling"] == "none" else " (scale: env)"), size))
    lines += ["", "## Ops per fixture", ""]
    for name, m in metas.items():
        lines.append(f"- {name}: {', '.join(m['ops'])}")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated fixtures: " + ", ".join(GROUPS))
    ap.add_argument("--record", action="store_true",
                    help="re-record the observations with towerrl's batcher (go run -tags mujoco)")
    a = ap.parse_args()
    names = [g for g in a.only.split(",") if g] or list(GROUPS)
    for g in names:
        if g not in GROUPS:
            sys.exit(f"unknown fixture {g!r}; fixtures: {', '.join(GROUPS)}")
    os.makedirs(OUT, exist_ok=True)
    gff.OUT = OUT  # write_fixture and check_written write into OUT
    for env_id in sorted({GROUP_ENV[g] for g in names}):
        if a.record or not os.path.exists(recorded_path(env_id)):
            record(env_id)
    for g in names:
        reset, pool = observations(GROUP_ENV[g])
        write(*GROUPS[g](reset, pool))
    write_readme()


if __name__ == "__main__":
    main()

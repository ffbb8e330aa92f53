#!/usr/bin/python3
"""Back to PyTorch (issue 31 item 4): a policy towerrl fine-tuned loads back into the exporter's own
PyTorch module with load_state_dict(strict=True), computes what towerrl computes, and scores the same.

Run with Debian's python3 (python3-torch, python3-onnx, python3-numpy; no onnxruntime, no Gymnasium,
no RL library) from the repository root, after building the tools (`make build`):

    /usr/bin/python3 scripts/back_to_pytorch.py                 # every case, tools in bin/
    /usr/bin/python3 scripts/back_to_pytorch.py --only cleanrl_cartpole --bin /tmp/bin

For each case it takes a fixture of testdata/ (a foreign one of scripts/gen_fixtures_foreign.py, or
CleanRL's agent exported straight after its initialisation by scripts/gen_fixtures.py, where
PyTorch's exporter shared one initializer among equal zero biases) and

 1. fine-tunes it with towerrl: `train --env ENV --init-policy FIXTURE.onnx --total-steps N --seed 1`,
    which writes policy.onnx: the exported graph with its initializer names and the new weights;
 2. reads policy.onnx's initializers with onnx.numpy_helper into a state_dict keyed by their names
    (less the attribute the export wrapper gave the module, e.g. "policy." for SB3's
    OnnxableSB3Policy(model.policy)) and loads it into a fresh instance of the exporter's module
    (the classes of gen_fixtures_foreign.py, which carry each library's parameter names) with
    strict=True: a missing or unexpected key fails; an initializer left over fails too (it also
    records whether the original export's initializers alone load strictly: not where the
    exporter shared them). A submodule the module registers under several names (SB3's
    pi_/vf_features_extractor) gets the one tensor under each: checked first on SB3's CnnPolicy
    export (testdata/foreign/atari_uint8_cnn.onnx, no Atari env to fine-tune it on);
 3. runs the reloaded module on a fixed batch of observations (the fixture's 16 rows and 16 rows
    of the module's own episodes: for discrete actions the 16 where its two logits are closest,
    where an argmax could flip) and `infer --model policy.onnx` on the same rows: max |difference|
    for each graph output (a fixed-batch export is run one row at a time);
 4. scores the reloaded module over 100 deterministic episodes on the NumPy envs of fixture_envs.py
    (episode i reset with seed 12345 + i) and `eval --policy policy.onnx --episodes 100 --seed 12345`
    on towerrl's Go envs (other start states: the means agree within noise), and, for a
    dynamic-batch export, has `infer` choose the action at every step of PyTorch's episodes:
    when every action agrees, towerrl's policy plays those very episodes and scores PyTorch's mean.

It writes into testdata/pytorch/, for each case NAME (all small; no Python is needed to test them):
    NAME.onnx          towerrl's fine-tuned policy.onnx
    NAME.input.npy     the 32 observations of step 3
    NAME.<out>.npy     the reloaded PyTorch module's value of each graph output on them (output
                       name with characters outside [A-Za-z0-9_] made '_'), and of the inner
                       tensor the json names under "inner" (SB3's logits, SAC's pre-tanh mean)
    NAME.json          the commands, the keys loaded, and the figures (docs/pytorch.md quotes them)
The Go test onnx/edit/pytorch_test.go runs each NAME.onnx with ONNX Runtime and checks it against
the PyTorch outputs, and the initializer names against the fixture's.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import fixture_envs as fe  # noqa: E402
import gen_fixtures_foreign as gff  # noqa: E402  (the SB3 / CleanRL modules, with their parameter names)

TESTDATA = os.path.join(ROOT, "testdata")
OUT = os.path.join(ROOT, "testdata", "pytorch")
EPISODES = 100
SEED = 12345       # bin/eval --seed, and episode i of PyTorch's evaluation resets with SEED + i
TRAIN_SEED = 1
TRAJ_ROWS = 16     # rows of PyTorch's own episodes added to the fixture's 16
TOL = 1e-5         # float32: towerrl (ONNX Runtime) against PyTorch, |a - b| <= TOL * max(1, |b|)


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


# ---------------------------------------------------------------------------------------------
# The cases: which fixture, which module takes its weights back, how the module is run.


class CleanRLCartPole:
    """CleanRL's CartPole Agent (actor/critic Sequentials). The export was the agent itself, so the
    initializer names are the agent's state_dict keys as they are: no prefix."""

    name = "cleanrl_cartpole"
    fixture = "foreign/cleanrl_cartpole_weak"
    env = "CartPole-v1"
    steps = 100_000
    flags = []
    prefix = ""
    module_path = "agent"
    inner = None

    def module(self):
        return gff.MLPActorCritic()

    def outputs(self, m, obs):
        """Every graph output (in the graph's order) as PyTorch computes it, and the inner tensor."""
        logits, value = m(obs)
        return [logits, value], None

    def logits(self, m, obs):
        return m.actor(obs)

    def action(self, outs):
        return outs[0].argmax(1)


class SB3PPOCartPole:
    """Stable-Baselines3 PPO's model.policy (ActorCriticPolicy). The export followed SB3's docs:
    OnnxableSB3Policy(model.policy), whose attribute `policy` put "policy." before every key."""

    name = "sb3_ppo_cartpole"
    fixture = "foreign/sb3_ppo_cartpole_weak"
    env = "CartPole-v1"
    steps = 100_000
    flags = []
    prefix = "policy."
    module_path = "model.policy"
    inner = ("/policy/action_net/Gemm_output_0", "logits")

    def module(self):
        return gff.SB3ActorCriticPolicy(4, ("discrete", 2))

    def outputs(self, m, obs):
        actions, values, log_prob = m(obs, deterministic=True)
        return [actions, values, log_prob], self.logits(m, obs)

    def logits(self, m, obs):
        return m.action_net(m.mlp_extractor.forward_actor(m.extract_features(obs)))

    def action(self, outs):
        return outs[0]


class SB3SACPendulum:
    """Stable-Baselines3 SAC's model.policy.actor (Actor). The export followed SB3's docs:
    OnnxablePolicy(model.policy.actor), whose attribute `actor` put "actor." before every key.
    Its output is tanh(mu) in [-1, 1]; Pendulum's torque is 2 * that."""

    name = "sb3_sac_pendulum"
    fixture = "foreign/sb3_sac_pendulum"
    env = "Pendulum-v1"
    steps = 40_960
    # SAC's actor comes with no critic: towerrl gives it one and trains it alone for the first 30
    # iterations (value_warmup); shorter rollouts than Box's default 2048 steps leave 50 of the
    # 80 iterations to the actor in a short run.
    flags = ["--rollout-steps", "512"]
    prefix = "actor."
    module_path = "model.policy.actor"
    inner = ("/actor/mu/Gemm_output_0", "mu")

    def module(self):
        return gff.SB3SACActor(3, 1)

    def outputs(self, m, obs):
        mu, _, _ = m.get_action_dist_params(obs)
        return [m(obs, deterministic=True)], mu

    logits = None

    def action(self, outs):
        return 2.0 * outs[0]


class CleanRLCartPoleFresh(CleanRLCartPole):
    """CleanRL's CartPole Agent exported straight after layer_init (testdata/mlp_tanh.onnx, by
    scripts/gen_fixtures.py): its biases are all zero, so PyTorch's exporter kept one zero bias and
    read the others through Identity nodes. That export's initializers miss three of the agent's
    keys; towerrl's write-back gives each its own initializer under the parameter's name."""

    name = "cleanrl_cartpole_fresh"
    fixture = "mlp_tanh"


CASES = {c.name: c for c in (CleanRLCartPole(), SB3PPOCartPole(), SB3SACPendulum(), CleanRLCartPoleFresh())}


# ---------------------------------------------------------------------------------------------
# Step 2: the initializers as a state_dict, loaded strictly.


def state_dict_from_onnx(path, prefix, identities=False):
    """{key: tensor} for every initializer of the ONNX file, its name less prefix. An initializer
    whose name lacks the prefix is not one of the module's parameters: that is an error here (the
    fixtures' graphs hold nothing else), so nothing is silently dropped. identities=True also
    reads each Identity node over an initializer as a parameter named after its output: what
    PyTorch's exporter made of parameters with equal values (a towerrl policy.onnx has none)."""
    graph = onnx.load(path).graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    if identities:
        for n in graph.node:
            if n.op_type == "Identity" and n.input[0] in values:
                values[n.output[0]] = values[n.input[0]]
    sd, stray = {}, []
    for name, v in values.items():
        if not name.startswith(prefix):
            stray.append(name)
            continue
        sd[name[len(prefix):]] = torch.from_numpy(v.copy())
    if stray:
        sys.exit(f"{path}: initializers outside {prefix!r}: {stray}; they are not the module's parameters")
    return sd


def with_aliases(module, sd):
    """sd with the module's aliases filled in: a submodule registered under several names (SB3's
    pi_features_extractor and vf_features_extractor are its features_extractor when the policy
    shares it, as CnnPolicy and MlpPolicy do) has its keys once per name in the state_dict, and the
    export holds one of them. Each alias of a key present gets that key's tensor; a key that is no
    alias of one present stays missing, and strict loading refuses it."""
    groups = {}
    for key, v in module.state_dict(keep_vars=True).items():
        groups.setdefault(id(v), []).append(key)
    out = dict(sd)
    for keys in groups.values():
        have = [k for k in keys if k in sd]
        for k in keys:
            if have and k not in out:
                out[k] = sd[have[0]]
    return out


def load_back(case, path, identities=False):
    """A fresh module with the ONNX file's weights, loaded with strict=True; the keys it took."""
    m = case.module()
    sd = state_dict_from_onnx(path, case.prefix, identities)
    m.load_state_dict(with_aliases(m, sd), strict=True)  # raises on any missing or unexpected key
    m.eval()
    return m, sorted(sd)


def strict_on_export(case, path):
    """Whether the original export's initializers alone load strictly: "ok", or the refusal."""
    try:
        load_back(case, path)
    except RuntimeError as e:
        return str(e).splitlines()[1].strip()
    return "ok"


def strict_refuses(case, path):
    """strict=True is the check: the same weights under the wrong names (the wrapper's prefix kept,
    or the first key dropped) must be refused. Returns the first line of each refusal."""
    sd = state_dict_from_onnx(path, case.prefix)
    wrong = {"dropped " + next(iter(sd)): dict(list(sd.items())[1:])}
    if case.prefix:
        wrong["prefix kept"] = {case.prefix + k: v for k, v in sd.items()}
    msgs = {}
    for what, bad in wrong.items():
        try:
            case.module().load_state_dict(bad, strict=True)
        except RuntimeError as e:
            msgs[what] = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
            continue
        sys.exit(f"{case.name}: load_state_dict(strict=True) accepted the wrong names ({what})")
    return msgs


# ---------------------------------------------------------------------------------------------
# towerrl's tools.


def tool(bin_dir, name):
    path = os.path.join(bin_dir, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{path}: not found; build the tools first (make build, or go build -o DIR/ ./cmd/... and --bin DIR)")
    return path


def run(cmd):
    """Runs a tool; returns its last stdout line parsed as JSON (every tool ends with a summary)."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"{' '.join(cmd)}: no JSON summary on stdout:\n{p.stdout[-2000:]}")
    return json.loads(lines[-1])


def infer(bin_dir, model, obs, work, fixed):
    """towerrl's outputs for obs, {output name: array}. A fixed-batch export is run row by row
    (infer refuses a batch the graph does not take) and the rows joined."""
    chunks = [obs[i:i + 1] for i in range(len(obs))] if fixed else [obs]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    got = {}
    for k, chunk in enumerate(chunks):
        d = os.path.join(work, f"infer{k}")
        np.save(d + ".npy", np.ascontiguousarray(chunk))
        summary = run([tool(bin_dir, "infer"), "--model", model, "--input", d + ".npy", "--out", d])
        for o in summary["outputs"]:
            got.setdefault(o["name"], []).append(np.load(o["file"]))
    return {k: np.concatenate(v) for k, v in got.items()}


def fixed_batch(path):
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    return not dims[0].dim_param and dims[0].dim_value == 1


# ---------------------------------------------------------------------------------------------
# Steps 3 and 4.


def episodes(case, m):
    """PyTorch's deterministic evaluation (fixture_envs.rollout, as gen_fixtures_foreign.evaluate
    runs it), recording every step: returns and [T, N, obs] observations with the alive mask."""
    def act(obs, env):
        outs, _ = case.outputs(m, torch.from_numpy(obs))
        return case.action(outs).numpy()
    with torch.no_grad():
        returns, rec = fe.rollout(case.env, act, EPISODES, SEED, record=True)
    return returns, rec["obs"][rec["alive"]]


def trajectory_rows(case, m, steps):
    """TRAJ_ROWS observations of PyTorch's episodes: for discrete actions those whose two logits are
    closest (where PyTorch and ONNX Runtime could pick different actions), else evenly spaced."""
    if case.logits is None:
        return steps[np.linspace(0, len(steps) - 1, TRAJ_ROWS).astype(int)]
    with torch.no_grad():
        lg = case.logits(m, torch.from_numpy(steps)).numpy()
    margin = np.abs(lg[:, 1] - lg[:, 0])
    return steps[np.sort(np.argsort(margin, kind="stable")[:TRAJ_ROWS])]


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def weight_change(fixture_path, tuned_path):
    """Largest |change| of any weight, and the initializers fine-tuning changed. The fine-tuned
    graph must hold the fixture's initializers plus one per Identity the exporter put over one."""
    before = {k: v.numpy() for k, v in state_dict_from_onnx(fixture_path, "", identities=True).items()}
    after = {i.name: numpy_helper.to_array(i) for i in onnx.load(tuned_path).graph.initializer}
    if sorted(before) != sorted(after):
        sys.exit(f"{tuned_path}: initializer names differ from {fixture_path}'s (Identity outputs included): "
                 f"{sorted(set(before) ^ set(after))}")
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    return max(max_diff(before[k], after[k]) for k in before), changed


def do_case(case, bin_dir, work):
    fixture = os.path.join(TESTDATA, case.fixture + ".onnx")
    run_dir = os.path.join(work, case.name)
    train_cmd = [tool(bin_dir, "train"), "--env", case.env, "--init-policy", fixture,
                 "--total-steps", str(case.steps), *case.flags, "--seed", str(TRAIN_SEED), "--out", run_dir]
    train = run(train_cmd)
    tuned = os.path.join(run_dir, "policy.onnx")
    wmax, changed = weight_change(fixture, tuned)

    m, keys = load_back(case, tuned)
    refusals = strict_refuses(case, tuned)
    graph = onnx.load(tuned).graph
    out_names = [o.name for o in graph.output]

    returns, steps = episodes(case, m)
    export_strict = strict_on_export(case, fixture)
    returns_before, _ = episodes(case, load_back(case, fixture, identities=True)[0])  # the fixture
    rows = np.concatenate([np.load(os.path.join(TESTDATA, case.fixture + ".input.npy")),
                           trajectory_rows(case, m, steps)]).astype(np.float32)
    with torch.no_grad():
        outs, inner = case.outputs(m, torch.from_numpy(rows))
        margin = None
        if case.logits is not None:  # how close the committed rows come to an argmax tie
            lg = case.logits(m, torch.from_numpy(rows)).numpy()
            margin = float(np.min(np.abs(lg[:, 1] - lg[:, 0])))
    outs = [o.numpy() for o in outs]
    fixed = fixed_batch(tuned)
    ours = infer(bin_dir, tuned, rows, os.path.join(work, case.name + "_infer"), fixed)
    diffs = {}
    for name, want in zip(out_names, outs):
        got = ours[name]
        if got.shape != want.shape:
            sys.exit(f"{case.name}: output {name}: towerrl {got.shape}, PyTorch {want.shape}")
        diffs[name] = max_diff(got, want)
        scaled = float(np.max(np.abs(got.astype(np.float64) - want) / np.maximum(1.0, np.abs(want))))
        if scaled > TOL:
            sys.exit(f"{case.name}: output {name}: towerrl and PyTorch differ by {diffs[name]:.3g} "
                     f"({scaled:.3g} relative to max(1, |PyTorch|) > {TOL})")

    agree = None
    if not fixed and case.logits is not None:  # every step of PyTorch's episodes, one infer call
        with torch.no_grad():
            mine = case.action(case.outputs(m, torch.from_numpy(steps))[0]).numpy()
            lg = case.logits(m, torch.from_numpy(steps)).numpy()
        theirs = infer(bin_dir, tuned, steps, os.path.join(work, case.name + "_steps"), False)
        theirs = theirs[out_names[0]].argmax(1)
        # A step whose two logits are within float32 rounding of each other is a tie: either
        # action is right, and which one comes out depends on the order of the sums.
        tie = np.abs(lg[:, 1] - lg[:, 0]) <= TOL * np.maximum(1.0, np.abs(lg).max(1))
        differ = mine != theirs
        agree = {"steps": int(len(steps)), "same_action": int((~differ).sum()),
                 "differ_at_ties": int((differ & tie).sum()),
                 "closest_logits": float(np.abs(lg[:, 1] - lg[:, 0]).min())}
        if (differ & ~tie).any():
            sys.exit(f"{case.name}: towerrl's action differs from PyTorch's at {int((differ & ~tie).sum())} "
                     f"of {agree['steps']} steps where the logits are not tied")

    eval_cmd = [tool(bin_dir, "eval"), "--policy", tuned, "--env", case.env,
                "--episodes", str(EPISODES), "--seed", str(SEED)]
    ev = run(eval_cmd)
    before_cmd = [tool(bin_dir, "eval"), "--policy", fixture, "--env", case.env,
                  "--episodes", str(EPISODES), "--seed", str(SEED)]
    before = run(before_cmd)

    os.makedirs(OUT, exist_ok=True)
    shutil.copyfile(tuned, os.path.join(OUT, case.name + ".onnx"))
    np.save(os.path.join(OUT, case.name + ".input.npy"), rows)
    files = {}
    for name, want in zip(out_names, outs):
        files[name] = f"{case.name}.{sanitize(name)}.npy"
        np.save(os.path.join(OUT, files[name]), want)
    meta_inner = None
    if case.inner:
        tensor, short = case.inner
        meta_inner = {"tensor": tensor, "file": f"{case.name}.{short}.npy"}
        np.save(os.path.join(OUT, meta_inner["file"]), inner.numpy())

    def rel(cmd):
        return " ".join(["bin/" + os.path.basename(cmd[0])]
                        + [os.path.relpath(c, ROOT) if os.path.isabs(c) and c.startswith(ROOT) else
                           ("runs/" + case.name + c[len(run_dir):] if c.startswith(run_dir) else c)
                           for c in cmd[1:]])

    meta = {
        "name": case.name,
        "fixture": f"testdata/{case.fixture}.onnx",
        "fixture_strict_load": export_strict,
        "env": case.env,
        "module": f"{type(m).__name__} (scripts/{type(m).__module__}.py), as {case.module_path}",
        "prefix": case.prefix,
        "state_dict_keys": keys,
        "strict_refuses": refusals,
        "fixed_batch": fixed,
        "input_file": case.name + ".input.npy",
        "rows": int(len(rows)),
        "outputs": [{"name": n, "file": files[n]} for n in out_names],
        "inner": meta_inner,
        "tolerance": TOL,
        "min_logit_margin": margin,
        "max_abs_diff": diffs,
        "weights": {"max_abs_change": wmax, "changed": len(changed), "initializers": len(keys)},
        "train": {"command": rel(train_cmd), "env_steps": train["env_steps"],
                  "params_sha256": train.get("params_sha256")},
        "pytorch_return": {"episodes": EPISODES, "seeds": f"{SEED}..{SEED + EPISODES - 1}",
                           "mean": float(returns.mean()), "std": float(returns.std())},
        "pytorch_fixture_return": {"mean": float(returns_before.mean()), "std": float(returns_before.std())},
        "towerrl_eval": {"command": rel(eval_cmd), "mean": ev["return_mean"], "std": ev["return_std"]},
        "fixture_eval": {"command": rel(before_cmd), "mean": before["return_mean"], "std": before["return_std"]},
        "trajectory_actions": agree,
    }
    with open(os.path.join(OUT, case.name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return meta


def check_cnn_aliases():
    """SB3's CnnPolicy (testdata/foreign/atari_uint8_cnn.onnx; towerrl has no Atari env to
    fine-tune it on, and the write-back keeps the same names): the export's initializers alone
    miss the pi_/vf_features_extractor aliases and the bias PyTorch shared through an Identity;
    with both filled in the module loads strictly and reproduces the export's outputs."""
    path = os.path.join(TESTDATA, "foreign", "atari_uint8_cnn")

    def module():
        return gff.SB3ActorCriticPolicy(None, ("discrete", 6), features_extractor=gff.SB3NatureCNN(), image=True)

    try:
        module().load_state_dict(state_dict_from_onnx(path + ".onnx", "policy."), strict=True)
        sys.exit("atari_uint8_cnn: the export's initializers alone loaded strictly; want the aliases refused")
    except RuntimeError as e:
        refusal = str(e).splitlines()[1].strip()
    m = module()
    sd = state_dict_from_onnx(path + ".onnx", "policy.", identities=True)
    m.load_state_dict(with_aliases(m, sd), strict=True)
    m.eval()
    meta = json.load(open(path + ".json"))
    obs = torch.from_numpy(np.load(path + ".input.npy"))
    with torch.no_grad():
        outs = [o.numpy() for o in m(obs, deterministic=True)]
    diffs = [max_diff(o.reshape(-1), np.load(os.path.join(TESTDATA, "foreign", spec["file"])).reshape(-1))
             for o, spec in zip(outs, meta["outputs"])]
    if max(diffs) > TOL:
        sys.exit(f"atari_uint8_cnn: the reloaded CnnPolicy differs from the export's outputs by {max(diffs):.3g}")
    shared = len(sd) - len(onnx.load(path + ".onnx").graph.initializer)
    print(f"atari_uint8_cnn: {len(sd)} parameters ({shared} read through an Identity) fill {len(m.state_dict())} keys of "
          f"SB3ActorCriticPolicy(CnnPolicy); alone they are refused ({refusal[:60]}...); reloaded, its outputs "
          f"on the export's {len(obs)} rows differ from the export's by at most {max(diffs):.2g}")


def report(meta):
    d = ", ".join(f"{k} {v:.2g}" for k, v in meta["max_abs_diff"].items())
    a = meta["trajectory_actions"]
    print(f"{meta['name']}: strict load of {len(meta['state_dict_keys'])} keys into {meta['module']}; "
          f"{meta['weights']['changed']}/{meta['weights']['initializers']} initializers changed "
          f"(max |dw| {meta['weights']['max_abs_change']:.3g}); max |towerrl - PyTorch| over {meta['rows']} rows: {d}; "
          f"return (fixture -> fine-tuned): towerrl eval {meta['fixture_eval']['mean']:.1f} -> "
          f"{meta['towerrl_eval']['mean']:.1f}, PyTorch {meta['pytorch_fixture_return']['mean']:.1f} -> "
          f"{meta['pytorch_return']['mean']:.1f}"
          + (f"; same action at {a['same_action']}/{a['steps']} steps (closest logits "
             f"{a['closest_logits']:.2g} apart)" if a else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin"), help="folder holding train, eval and infer")
    ap.add_argument("--only", default="", help="comma-separated cases: " + ", ".join(CASES))
    ap.add_argument("--work", default="", help="keep the runs in this folder (default: a temporary one)")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit(f"unknown case {n!r}; cases: {', '.join(CASES)}")
    bin_dir = os.path.abspath(a.bin)
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="back_to_pytorch.")
    try:
        check_cnn_aliases()
        for n in names:
            shutil.rmtree(os.path.join(work, n), ignore_errors=True)
            report(do_case(CASES[n], bin_dir, work))
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Fixed-batch policy exports for onnx/edit's tests, written by torch.onnx.export (PyTorch 1.13).

Run with Debian's python3 (python3-torch, python3-onnx, python3-numpy) from the repository root:

    /usr/bin/python3 onnx/edit/testdata/gen.py

CI never runs this; its outputs are committed. Each model NAME is exported *without* dynamic axes,
so its batch is fixed at the export batch (1, or 8 for the *8 models), reproducing what torch 1.13
emits for the idioms that tie a graph to its export batch: x.view(1, -1), x.reshape(x.shape[0], -1),
torch.zeros(1, h), recurrent steps with states shaped [layers, batch, hidden] or [batch, hidden],
internal zero initial states, torch.distributions log-probabilities (Expand via broadcast_tensors),
SB3's OnnxableSB3Policy, Sample Factory's exporter (GRU core, obs normaliser, batch 1), SB3-contrib's
RecurrentPPO step. Some also carry the value_info of ONNX's shape inference (the Go type propagation is
checked against it), metadata_props, or initializers listed among the inputs. For each:

    NAME.onnx            the fixed-batch model
    NAME.json            {"batch", "rows", "expect", "inputs": [{"name", "axis"}], "outputs": [...]}
                         axis is the batch axis of each input/output (-1: not batched); expect is
                         "rewrite" (DynamicBatch must succeed), "dynamic" (already dynamic),
                         "refuse" (analysis must refuse) or "mismatch" (verification must fail)
    NAME.<input>.npy     the rows of input (6, or 2·BATCH; batch axis as in NAME.json)
    NAME.<output>.npy    PyTorch's outputs for those rows, computed BATCH rows at a time (the only
                         batch the module's traced shapes allow) and joined on the batch axis
"""
import json
import os

import numpy as np
import onnx
import onnx.shape_inference
import torch
import torch.nn as nn

OUT = os.path.dirname(os.path.abspath(__file__))
ROWS = 6  # rows per fixture for batch 1; fixed batch B > 1 gets 2B


class ViewCNN(nn.Module):
    """A small conv net flattened with x.view(1, -1): Reshape with the constant [1, -1]."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.pi = nn.Linear(4 * 4 * 4, 3)
        self.v = nn.Linear(4 * 4 * 4, 1)

    def forward(self, obs):
        h = torch.relu(self.conv(obs)).view(1, -1)
        return self.pi(h), self.v(h)


class ReshapeShape0(nn.Module):
    """x.reshape(x.shape[0], -1) on a fixed-shape input (folded to a constant) and value.squeeze(-1)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 16), nn.Tanh())
        self.pi = nn.Linear(16, 2)
        self.v = nn.Linear(16, 1)

    def forward(self, obs):
        h = self.body(obs.reshape(obs.shape[0], -1))
        return self.pi(h), self.v(h).squeeze(-1)


class ZerosCat(nn.Module):
    """torch.cat with torch.zeros(1, 3): a constant row concatenated to every batch row."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(4 + 3, 8)
        self.l2 = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.cat([x, torch.zeros(1, 3)], dim=1)
        return self.l2(torch.tanh(self.l1(h)) + torch.ones(1, 8))


class SampleFactoryGRU(nn.Module):
    """Sample Factory's ONNX export of a GRU policy: obs normaliser, MLP encoder (ELU), GRU core
    stepped with x.unsqueeze(0) / rnn_states.unsqueeze(0), argmax actions unsqueezed to [B, 1],
    inputs obs and rnn_states [B, hidden], outputs output_actions and output_rnn_states."""

    def __init__(self, obs_dim=4, hidden=16, n_actions=2):
        super().__init__()
        self.register_buffer("running_mean", torch.randn(obs_dim) * 0.1)
        self.register_buffer("running_var", torch.rand(obs_dim) + 0.5)
        self.encoder = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ELU())
        self.core = nn.GRU(hidden, hidden)
        self.logits = nn.Linear(hidden, n_actions)

    def forward(self, obs, rnn_states):
        x = (obs - self.running_mean) / torch.sqrt(self.running_var + 1e-5)
        x = torch.clamp(x, -5.0, 5.0)
        x = self.encoder(x)
        y, h = self.core(x.unsqueeze(0), rnn_states.unsqueeze(0).contiguous())
        logits = self.logits(y.squeeze(0))
        actions = torch.argmax(logits, dim=1).unsqueeze(-1)
        return actions, h.squeeze(0)


class RecurrentPPOLSTM(nn.Module):
    """SB3-contrib RecurrentPPO-like step: LSTM states shaped [layers, batch, hidden], reset by
    episode_starts through (1 - episode_starts).view(1, -1, 1)."""

    def __init__(self, obs_dim=4, hidden=8, n_actions=2):
        super().__init__()
        self.lstm = nn.LSTM(obs_dim, hidden)
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    def forward(self, obs, h, c, episode_starts):
        keep = (1.0 - episode_starts).view(1, -1, 1)
        y, (h2, c2) = self.lstm(obs.unsqueeze(0), (h * keep, c * keep))
        f = y.squeeze(0)
        return self.pi(f), self.v(f), h2, c2


class TwoLSTMStep(nn.Module):
    """SB3-contrib RecurrentPPO's step as its sequence processing traces at batch 1: features
    reshaped to (n_seq, -1, features) and swapped to sequence-first, episode starts likewise, a
    per-step loop resetting the states by (1 - start).view(1, n_seq, 1), separate actor and critic
    LSTMs with states [layers, batch, hidden] (batch on axis 1). Ten decisions are ambiguous at
    batch 1 (four state inputs, six Reshapes)."""

    def __init__(self, obs_dim=4, hidden=8, n_actions=2):
        super().__init__()
        self.lstm_actor = nn.LSTM(obs_dim, hidden)
        self.lstm_critic = nn.LSTM(obs_dim, hidden)
        self.pi = nn.Linear(hidden, n_actions)
        self.v = nn.Linear(hidden, 1)

    @staticmethod
    def run(features, h, c, starts, lstm):
        n_seq = h.shape[1]
        steps = features.reshape((n_seq, -1, lstm.input_size)).swapaxes(0, 1)
        starts = starts.reshape((n_seq, -1)).swapaxes(0, 1)
        outs = []
        for x, start in zip(steps, starts):
            keep = (1.0 - start).view(1, n_seq, 1)
            y, (h, c) = lstm(x.unsqueeze(0), (keep * h, keep * c))
            outs.append(y)
        return torch.flatten(torch.cat(outs).transpose(0, 1), start_dim=0, end_dim=1), h, c

    def forward(self, obs, pi_h, pi_c, vf_h, vf_c, episode_starts):
        a, pi_h, pi_c = self.run(obs, pi_h, pi_c, episode_starts, self.lstm_actor)
        v, vf_h, vf_c = self.run(obs, vf_h, vf_c, episode_starts, self.lstm_critic)
        return self.pi(a), self.v(v), pi_h, pi_c, vf_h, vf_c


class GRUZeroState(nn.Module):
    """A batch-first GRU over x.view(x.size(0), 1, -1) with an internal zero initial state."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 8, batch_first=True)
        self.pi = nn.Linear(8, 2)

    def forward(self, x):
        h0 = torch.zeros(1, x.size(0), 8)
        y, _ = self.gru(x.view(x.size(0), 1, -1), h0)
        return self.pi(y[:, -1])


class GRUViewSeq(nn.Module):
    """An older idiom: a sequence-first GRU fed x.view(1, 1, -1) (sequence 1, batch 1), a state
    input shaped [layers, batch, hidden], and y.view(1, -1) after it. The batch is the middle 1 of
    the first Reshape and dimension 1 of the GRU's output."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 8)
        self.pi = nn.Linear(8, 2)

    def forward(self, x, h):
        y, h2 = self.gru(x.view(1, 1, -1), h)
        return self.pi(y.view(1, -1)), h2


class SB3Discrete(nn.Module):
    """SB3's documented export (OnnxableSB3Policy around policy(obs, deterministic=True)) of a
    discrete PPO policy: preprocess_obs (float, flatten), separate tanh trunks, Categorical
    distribution; outputs actions (int64), values and log-probabilities."""

    def __init__(self, obs_dim=4, n_actions=2):
        super().__init__()
        self.pi_net = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh())
        self.vf_net = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh())
        self.action_net = nn.Linear(16, n_actions)
        self.value_net = nn.Linear(16, 1)

    def forward(self, observation):
        obs = torch.flatten(observation.float(), 1)
        dist = torch.distributions.Categorical(logits=self.action_net(self.pi_net(obs)))
        actions = torch.argmax(dist.probs, dim=1)
        return actions, self.value_net(self.vf_net(obs)), dist.log_prob(actions)


class SB3Gaussian(nn.Module):
    """The same export for a continuous policy: DiagGaussian with a state-independent log_std."""

    def __init__(self, obs_dim=3, act_dim=2):
        super().__init__()
        self.pi_net = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh())
        self.vf_net = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh())
        self.action_net = nn.Linear(16, act_dim)
        self.value_net = nn.Linear(16, 1)
        self.log_std = nn.Parameter(torch.full((act_dim,), -0.5))

    def forward(self, observation):
        obs = observation.float()
        mean = self.action_net(self.pi_net(obs))
        std = torch.ones_like(mean) * self.log_std.exp()
        dist = torch.distributions.Normal(mean, std)
        actions = dist.mean
        return actions, self.value_net(self.vf_net(obs)), dist.log_prob(actions).sum(dim=1)


class Fixed8(nn.Module):
    """Exported with batch 8: x.view(8, -1), torch.zeros(8, 3) concatenated, an expand(8, 3),
    and a Categorical log-probability."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6 + 3, 8)
        self.pi = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.cat([x.view(8, -1), torch.zeros(8, 3)], dim=1)
        logits = self.pi(torch.tanh(self.l1(h))) + x[:, :1, 0].expand(8, 3)
        dist = torch.distributions.Categorical(logits=logits)
        return logits, dist.log_prob(torch.argmax(logits, dim=1))


class Uint8CNN(nn.Module):
    """Atari-style: uint8 pixels divided by 255 in the graph, torch.flatten(x, 1), x.view(-1, n)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 4, stride=2)
        self.fc = nn.Linear(4 * 7 * 7, 8)
        self.pi = nn.Linear(8, 3)

    def forward(self, pixels):
        h = torch.relu(self.conv(pixels.float() / 255.0))
        h = torch.relu(self.fc(torch.flatten(h, 1)))
        return self.pi(h.view(-1, 8))


class EmbedInt(nn.Module):
    """A discrete (int64) observation through an embedding: Gather with batched indices."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(2, 8)
        self.pi = nn.Linear(8, 2)

    def forward(self, state):
        return self.pi(torch.tanh(self.emb(state)))


class BatchMean(nn.Module):
    """Centres each row on the batch mean: a reduction over the batch, which cannot be batched."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)

    def forward(self, x):
        return self.l(x - x.mean(0, keepdim=True))


class FirstRow(nn.Module):
    """Returns logits[0]: the batch is indexed away, so the output has no batch dimension."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 2)

    def forward(self, x):
        return self.l(x)[0]


class Table8(nn.Module):
    """Batch 8 with a learned [8, h] table added row by row: row i of the batch depends on which
    slot it sits in, so no dynamic batch reproduces it (verification must catch this)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 4))
        self.l = nn.Linear(4, 2)

    def forward(self, x):
        return self.l(x + self.table)


def seeded(cls, seed, *args):
    torch.manual_seed(seed)
    m = cls(*args)
    m.eval()
    return m


def row_shape(shape, axis):
    return [d for i, d in enumerate(shape) if i != axis]


def make_inputs(spec, rng, rows):
    """spec: list of (name, row_shape, axis, kind). Returns {name: array of rows rows}."""
    out = {}
    for name, row, axis, kind in spec:
        full = list(row)
        full.insert(axis, rows)
        if kind == "float":
            a = rng.uniform(-1.5, 1.5, size=full).astype(np.float32)
        elif kind == "uint8":
            a = rng.integers(0, 256, size=full).astype(np.uint8)
        elif kind == "int64":
            a = rng.integers(0, 2, size=full).astype(np.int64)
        elif kind == "starts":
            a = (rng.uniform(size=full) < 0.5).astype(np.float32)
        else:
            raise ValueError(kind)
        out[name] = a
    return out


def export(name, model, spec, out_specs, batch=1, expect="rewrite", dynamic=False, opset=13, seed=0,
           value_info=False, metadata=None, inits_as_inputs=False):
    """spec: inputs (name, row_shape, axis, kind); out_specs: outputs (name, axis).
    value_info: run ONNX shape inference so the graph carries value_info with the fixed batch;
    metadata: metadata_props to add; inits_as_inputs: list initializers among the graph inputs."""
    rows = ROWS if batch == 1 else 2 * batch
    rng = np.random.default_rng(seed)
    inputs = make_inputs(spec, rng, rows)
    names = [s[0] for s in spec]
    example = tuple(torch.from_numpy(np.take(inputs[n], range(batch), axis=s[2])) for n, s in zip(names, spec))
    path = os.path.join(OUT, name + ".onnx")
    dyn = None
    if dynamic:
        dyn = {s[0]: {s[2]: "batch"} for s in spec}
        dyn.update({o: {a: "batch"} for o, a in out_specs})
    with torch.no_grad():
        torch.onnx.export(model, example, path, input_names=names, output_names=[o for o, _ in out_specs],
                          opset_version=opset, dynamic_axes=dyn, do_constant_folding=True,
                          keep_initializers_as_inputs=inits_as_inputs)
        # PyTorch's outputs, BATCH rows at a time.
        chunks = []
        for start in range(0, rows, batch):
            args = tuple(torch.from_numpy(np.take(inputs[n], range(start, start + batch), axis=s[2]))
                         for n, s in zip(names, spec))
            res = model(*args)
            if isinstance(res, torch.Tensor):
                res = (res,)
            chunks.append([r.numpy() for r in res])
    if value_info or metadata:
        mp = onnx.load(path)
        if value_info:
            mp = onnx.shape_inference.infer_shapes(mp)
        for k, v in (metadata or {}).items():
            mp.metadata_props.add(key=k, value=v)
        onnx.save(mp, path)
    for n in names:
        np.save(os.path.join(OUT, f"{name}.{n}.npy"), inputs[n])
    for k, (o, axis) in enumerate(out_specs):
        parts = [c[k] for c in chunks]
        joined = np.concatenate(parts, axis=axis) if axis >= 0 else parts[0]
        np.save(os.path.join(OUT, f"{name}.{o}.npy"), joined)
    meta = {
        "batch": batch,
        "rows": rows,
        "expect": expect,
        "opset": opset,
        "inputs": [{"name": s[0], "axis": s[2]} for s in spec],
        "outputs": [{"name": o, "axis": a} for o, a in out_specs],
    }
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print("wrote", name)


def main():
    export("view_cnn", seeded(ViewCNN, 1), [("obs", [2, 6, 6], 0, "float")], [("logits", 0), ("value", 0)])
    export("reshape_shape0", seeded(ReshapeShape0, 2), [("obs", [3, 4], 0, "float")],
           [("logits", 0), ("value", 0)], opset=11)
    export("zeros_cat", seeded(ZerosCat, 3), [("x", [4], 0, "float")], [("out", 0)])
    export("sf_gru", seeded(SampleFactoryGRU, 4), [("obs", [4], 0, "float"), ("rnn_states", [16], 0, "float")],
           [("output_actions", 0), ("output_rnn_states", 0)])
    export("rppo_lstm", seeded(RecurrentPPOLSTM, 5),
           [("obs", [4], 0, "float"), ("h", [1, 8], 1, "float"), ("c", [1, 8], 1, "float"),
            ("episode_starts", [], 0, "starts")],
           [("logits", 0), ("values", 0), ("h_out", 1), ("c_out", 1)], opset=14, value_info=True)
    export("two_lstm_step", seeded(TwoLSTMStep, 20),
           [("obs", [4], 0, "float")] + [(n, [1, 8], 1, "float") for n in ("pi_h", "pi_c", "vf_h", "vf_c")]
           + [("episode_starts", [], 0, "starts")],
           [("logits", 0), ("values", 0), ("pi_h_out", 1), ("pi_c_out", 1), ("vf_h_out", 1), ("vf_c_out", 1)],
           opset=17)
    export("gru_zero_h0", seeded(GRUZeroState, 6), [("x", [4], 0, "float")], [("logits", 0)])
    export("gru_view_seq", seeded(GRUViewSeq, 19), [("x", [4], 0, "float"), ("h", [1, 8], 1, "float")],
           [("logits", 0), ("h_out", 1)])
    export("sb3_discrete", seeded(SB3Discrete, 7), [("observation", [4], 0, "float")],
           [("actions", 0), ("values", 0), ("log_prob", 0)], value_info=True)
    export("sb3_gaussian", seeded(SB3Gaussian, 8), [("observation", [3], 0, "float")],
           [("actions", 0), ("values", 0), ("log_prob", 0)])
    export("uint8_cnn", seeded(Uint8CNN, 9), [("pixels", [2, 16, 16], 0, "uint8")], [("logits", 0)], opset=17, value_info=True)
    export("embed_int", seeded(EmbedInt, 10), [("state", [], 0, "int64")], [("logits", 0)])
    export("sf_gru8", seeded(SampleFactoryGRU, 21), [("obs", [4], 0, "float"), ("rnn_states", [16], 0, "float")],
           [("output_actions", 0), ("output_rnn_states", 0)], batch=8)
    export("fixed8", seeded(Fixed8, 11), [("x", [2, 3], 0, "float")], [("logits", 0), ("logp", 0)], batch=8,
           value_info=True)
    export("view_cnn_value_info", seeded(ViewCNN, 16), [("obs", [2, 6, 6], 0, "float")], [("logits", 0), ("value", 0)],
           value_info=True, metadata={"towerrl.env_id": "Test-v0", "towerrl.head": "categorical"})
    export("inits_as_inputs", seeded(ZerosCat, 17), [("x", [4], 0, "float")], [("out", 0)], opset=9,
           inits_as_inputs=True)
    export("dynamic_mlp", seeded(ReshapeShape0, 12), [("obs", [3, 4], 0, "float")],
           [("logits", 0), ("value", 0)], expect="dynamic", dynamic=True)
    export("dynamic_gru", seeded(SampleFactoryGRU, 18), [("obs", [4], 0, "float"), ("rnn_states", [16], 0, "float")],
           [("output_actions", 0), ("output_rnn_states", 0)], expect="dynamic", dynamic=True)
    export("batch_mean", seeded(BatchMean, 13), [("x", [4], 0, "float")], [("out", 0)], expect="refuse")
    export("first_row", seeded(FirstRow, 14), [("x", [4], 0, "float")], [("out", -1)], expect="refuse")
    export("table8", seeded(Table8, 15), [("x", [4], 0, "float")], [("out", 0)], batch=8, expect="mismatch")


if __name__ == "__main__":
    main()

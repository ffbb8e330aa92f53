package layout

import (
	"fmt"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Synthetic models, each laid out as one exporter lays it out (module names, output names,
// fixed or dynamic batch), with random weights so that ONNX Runtime can run them.

// sb3Discrete is SB3's documented export, OnnxableSB3Policy around policy(obs,
// deterministic=True), with the batch fixed at 1: outputs actions (int64), values and
// log-probabilities, auto-named as torch names them.
func sb3Discrete(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("input", f32, 1, 4)
	pi, vf := b.sb3Trunk(obs, 4, 8)
	b.rename(b.linear("/policy/value_net", "policy.value_net", vf, 8, 1), "24")
	logits := b.linear("/policy/action_net", "policy.action_net", pi, 8, n)
	lse := b.node("/policy", "ReduceLogSumExp", []string{logits}, attrIs("axes", -1), attrI("keepdims", 1))
	norm := b.node("/policy", "Sub", []string{logits, lse})
	probs := b.node("/policy", "Softmax", []string{norm}, attrI("axis", -1))
	am := b.node("/policy", "ArgMax", []string{probs}, attrI("axis", 1), attrI("keepdims", 0))
	a := b.rename(b.node("/policy", "Cast", []string{am}, attrI("to", 7)), "a")
	idx := b.node("/policy", "Unsqueeze", []string{a, b.constant("/policy", intTensor("", []int64{1}, 1))})
	g := b.node("/policy", "GatherElements", []string{norm, idx}, attrI("axis", 1))
	b.rename(b.node("/policy", "Squeeze", []string{g, b.constant("/policy", intTensor("", []int64{1}, 1))}), "49")
	b.output("a", i64, 1)
	b.output("24", f32, 1, 1)
	b.output("49", f32, 1)
	return b.model()
}

// sb3Continuous is the same export of a Box policy: the actions are the mean (through Expand),
// the log_std a parameter of [D] read by Exp.
func sb3Continuous(d int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("input", f32, 1, 3)
	pi, vf := b.sb3Trunk(obs, 3, 8)
	b.rename(b.linear("/policy/value_net", "policy.value_net", vf, 8, 1), "24")
	mean := b.linear("/policy/action_net", "policy.action_net", pi, 8, d)
	ls := b.param("policy.log_std", nil, int64(d))
	std := b.node("/policy", "Mul", []string{b.constant("/policy", scalar(1)), b.node("/policy", "Exp", []string{ls})})
	zeros := b.node("/policy", "ConstantOfShape", []string{b.node("/policy", "Shape", []string{mean})})
	sum := b.node("/policy", "Add", []string{b.node("/policy", "Add", []string{zeros, mean}), std})
	m := b.rename(b.node("/policy", "Expand", []string{mean, b.node("/policy", "Shape", []string{sum})}), "m")
	stdE := b.node("/policy", "Expand", []string{std, b.node("/policy", "Shape", []string{sum})})
	logStdE := b.node("/policy", "Log", []string{stdE})
	z := b.node("/policy", "Sub", []string{m, m})
	sq := b.node("/policy", "Neg", []string{b.node("/policy", "Mul", []string{z, z})})
	v2 := b.node("/policy", "Mul", []string{b.node("/policy", "Mul", []string{stdE, stdE}), b.constant("/policy", scalar(2))})
	lp := b.node("/policy", "Sub", []string{b.node("/policy", "Div", []string{sq, v2}), logStdE})
	lp = b.node("/policy", "Sub", []string{lp, b.constant("/policy", scalar(0.9189385))})
	b.rename(b.node("/policy", "ReduceSum", []string{lp, b.constant("", intTensor("", []int64{1}, 1))}, attrI("keepdims", 0)), "51")
	b.output(m, f32, 1, d)
	b.output("24", f32, 1, 1)
	b.output("51", f32, 1)
	return b.model()
}

// sb3Older is SB3's older recipe: a wrapper returning action_net(mlp_extractor(obs)) and
// value_net(...), dynamic batch.
func sb3Older(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("input", f32, "batch_size", 4)
	pi, vf := b.sb3Trunk(obs, 4, 8)
	b.rename(b.linear("/action_net", "action_net", pi, 8, n), "17")
	b.rename(b.linear("/value_net", "value_net", vf, 8, 1), "18")
	b.output("17", f32, "batch_size", n)
	b.output("18", f32, "batch_size", 1)
	return b.model()
}

// sb3SAC is SB3's SAC actor exported deterministically: tanh(mu(latent_pi(obs))); the log_std
// layer is pruned since nothing reads it. affine, when not nil, rescales the tanh by
// constants: a list of (op, value) steps.
func sb3SAC(d int, affine ...any) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("input", f32, "batch_size", 3)
	x := b.node("/actor", "Cast", []string{obs}, attrI("to", 1))
	x = b.node("/actor", "Flatten", []string{x}, attrI("axis", 1))
	for k, in := range []int{3, 16} {
		x = b.linear(fmt.Sprintf("/actor/latent_pi/latent_pi.%d", 2*k), fmt.Sprintf("actor.latent_pi.%d", 2*k), x, in, 16)
		x = b.node(fmt.Sprintf("/actor/latent_pi/latent_pi.%d", 2*k+1), "Relu", []string{x})
	}
	mu := b.linear("/actor/mu", "actor.mu", x, 16, d)
	a := b.node("/actor", "Tanh", []string{mu})
	for k := 0; k+1 < len(affine); k += 2 {
		var c string
		switch v := affine[k+1].(type) {
		case float32:
			c = b.constant("", scalar(v))
		case []float32:
			c = b.param(fmt.Sprintf("action_%d", k), v, int64(len(v)))
		}
		a = b.node("", affine[k].(string), []string{a, c})
	}
	b.rename(a, "16")
	b.output("16", f32, "batch_size", d)
	return b.model()
}

// cleanRLDiscrete is CleanRL's Agent (actor and critic sequentials) exported by a wrapper
// returning its logits and value, auto-named.
func cleanRLDiscrete(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, "batch", 4)
	for _, net := range []string{"actor", "critic"} {
		x := obs
		for k, w := range [][2]int{{4, 64}, {64, 64}} {
			x = b.linear(fmt.Sprintf("/%s/%s.%d", net, net, 2*k), fmt.Sprintf("%s.%d", net, 2*k), x, w[0], w[1])
			x = b.node(fmt.Sprintf("/%s/%s.%d", net, net, 2*k+1), "Tanh", []string{x})
		}
		out := n
		if net == "critic" {
			out = 1
		}
		name := map[string]string{"actor": "19", "critic": "20"}[net]
		b.rename(b.linear(fmt.Sprintf("/%s/%s.4", net, net), net+".4", x, 64, out), name)
		b.output(name, f32, "batch", out)
	}
	return b.model()
}

// cleanRLContinuous is CleanRL's continuous Agent: actor_mean, an actor_logstd parameter of
// [1, D] expanded to the mean's shape and read by Exp, and the critic; the export returns the
// mean, the std and the value.
func cleanRLContinuous(d int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, "batch", 3)
	x := obs
	for k, w := range [][2]int{{3, 64}, {64, 64}} {
		x = b.linear(fmt.Sprintf("/actor_mean/actor_mean.%d", 2*k), fmt.Sprintf("actor_mean.%d", 2*k), x, w[0], w[1])
		x = b.node(fmt.Sprintf("/actor_mean/actor_mean.%d", 2*k+1), "Tanh", []string{x})
	}
	mean := b.rename(b.linear("/actor_mean/actor_mean.4", "actor_mean.4", x, 64, d), "mean")
	ls := b.param("actor_logstd", nil, 1, int64(d))
	lsE := b.node("", "Expand", []string{ls, b.node("", "Shape", []string{mean})})
	b.rename(b.node("", "Exp", []string{lsE}), "std")
	v := b.linear("/critic/critic.0", "critic.0", obs, 3, 64)
	v = b.node("/critic/critic.1", "Tanh", []string{v})
	b.rename(b.linear("/critic/critic.2", "critic.2", v, 64, 1), "value")
	b.output("mean", f32, "batch", d)
	b.output("std", f32, "batch", d)
	b.output("value", f32, "batch", 1)
	return b.model()
}

// rllibMLP is RLlib's export_model of a FullyConnectedNetwork: inputs obs, an unread
// state_ins and seq_lens; output "output" (the _logits layer); no value.
func rllibMLP(width int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, "batch_size", 4)
	b.input("state_ins", f32, 1)
	b.input("seq_lens", onnxpb.TensorProto_INT32, "batch_size")
	x := b.linear("/_hidden_layers/_hidden_layers.0/_model/_model.0", "_hidden_layers.0._model.0", obs, 4, 32)
	x = b.node("/_hidden_layers/_hidden_layers.0/_model/_model.1", "Tanh", []string{x})
	b.rename(b.linear("/_logits/_model/_model.0", "_logits._model.0", x, 32, width), "output")
	b.output("output", f32, "batch_size", width)
	return b.model()
}

// lstm adds a torch LSTM (batch_first) over x [batch, 1, in] with initial states h0, c0 as
// [1, batch, hidden]; it returns Y squeezed to [batch, hidden], Y_h and Y_c.
func (b *builder) lstm(scope string, x string, in, hidden int, h0, c0 string, gru bool) (y, yh, yc string) {
	gates := 4
	op := "LSTM"
	if gru {
		gates, op = 3, "GRU"
	}
	w := b.param(fmt.Sprintf("onnx::%s_%d", op, 100+len(b.g.Node)), nil, 1, int64(gates*hidden), int64(in))
	r := b.param(fmt.Sprintf("onnx::%s_%d", op, 101+len(b.g.Node)), nil, 1, int64(gates*hidden), int64(hidden))
	bias := b.param(fmt.Sprintf("onnx::%s_%d", op, 102+len(b.g.Node)), nil, 1, int64(2*gates*hidden))
	xt := b.node(scope, "Transpose", []string{x}, attrIs("perm", 1, 0, 2))
	inputs := []string{xt, w, r, bias, "", h0}
	nOut := 3
	if gru {
		nOut = 2
	} else {
		inputs = append(inputs, c0)
	}
	outs := b.nodeN(scope, op, nOut, inputs, attrI("hidden_size", int64(hidden)), attrS("direction", "forward"))
	y = b.node(scope, "Squeeze", []string{outs[0], b.constant(scope, intTensor("", []int64{0, 1}, 2))})
	yc = ""
	if !gru {
		yc = outs[2]
	}
	return y, outs[1], yc
}

// rllibLSTM is RLlib's LSTMWrapper export: state_in_0 and state_in_1 [batch, hidden]
// unsqueezed into the LSTM, its final states squeezed into state_outs and an auto-named
// second output, seq_lens; _logits_branch and _value_branch on the LSTM's output.
func rllibLSTM(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, "batch_size", 2)
	s0 := b.input("state_in_0", f32, "batch_size", 16)
	s1 := b.input("state_in_1", f32, "batch_size", 16)
	b.input("seq_lens", onnxpb.TensorProto_INT32, "batch_size")
	x := b.linear("/_hidden_layers/_hidden_layers.0/_model/_model.0", "_hidden_layers.0._model.0", obs, 2, 16)
	x = b.node("/_hidden_layers/_hidden_layers.0/_model/_model.1", "Tanh", []string{x})
	x = b.node("", "Unsqueeze", []string{x, b.constant("", intTensor("", []int64{1}, 1))})
	zero := b.constant("", intTensor("", []int64{0}, 1))
	h0 := b.node("", "Unsqueeze", []string{s0, zero})
	c0 := b.node("", "Unsqueeze", []string{s1, zero})
	y, yh, yc := b.lstm("/lstm", x, 16, 16, h0, c0, false)
	b.rename(b.linear("/_logits_branch/_model/_model.0", "_logits_branch._model.0", y, 16, n), "output")
	b.rename(b.node("", "Squeeze", []string{yh, zero}), "state_outs")
	b.rename(b.node("", "Squeeze", []string{yc, zero}), "42")
	b.output("output", f32, "batch_size", n)
	b.output("state_outs", f32, "batch_size", 16)
	b.output("42", f32, "batch_size", 16)
	return b.model()
}

// sampleFactoryGRU is Sample Factory's export with use_rnn and eval_deterministic: batch fixed
// at 1, inputs obs and rnn_states, outputs output_actions (argmax, unsqueezed) and
// output_rnn_states; the critic is pruned.
func sampleFactoryGRU(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, 1, 4)
	rnn := b.input("rnn_states", f32, 1, 16)
	mean := b.param("actor_critic.obs_normalizer.running_mean_std.running_mean", nil, 4)
	x := b.node("/actor_critic/obs_normalizer", "Sub", []string{obs, mean})
	x = b.linear("/actor_critic/encoder/basic_encoder/mlp_head/mlp_head.0", "actor_critic.encoder.basic_encoder.mlp_head.0", x, 4, 16)
	x = b.node("/actor_critic/encoder/basic_encoder/mlp_head/mlp_head.1", "Elu", []string{x})
	x = b.node("/actor_critic/core", "Unsqueeze", []string{x, b.constant("", intTensor("", []int64{1}, 1))})
	h0 := b.node("/actor_critic/core", "Unsqueeze", []string{rnn, b.constant("", intTensor("", []int64{0}, 1))})
	y, yh, _ := b.lstm("/actor_critic/core/core", x, 16, 16, h0, "", true)
	logits := b.linear("/actor_critic/action_parameterization/distribution_linear", "actor_critic.action_parameterization.distribution_linear", y, 16, n)
	am := b.node("/actor_critic", "ArgMax", []string{logits}, attrI("axis", 1), attrI("keepdims", 0))
	b.rename(b.node("", "Unsqueeze", []string{am, b.constant("", intTensor("", []int64{-1}, 1))}), "output_actions")
	b.rename(b.node("/actor_critic/core", "Squeeze", []string{yh, b.constant("", intTensor("", []int64{0}, 1))}), "output_rnn_states")
	b.output("output_actions", i64, 1, 1)
	b.output("output_rnn_states", f32, 1, 16)
	return b.model()
}

// recurrentPPO is SB3-contrib's RecurrentPPO exported deterministically: states h and c of the
// actor's LSTM shaped [layers, batch, hidden], masked by 1 − episode_starts.
func recurrentPPO(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, "batch", 2)
	h := b.input("lstm_h", f32, 1, "batch", 16)
	c := b.input("lstm_c", f32, 1, "batch", 16)
	starts := b.input("episode_starts", f32, "batch")
	keep := b.node("/policy", "Sub", []string{b.constant("", scalar(1)), starts})
	keep = b.node("/policy", "Reshape", []string{keep, b.constant("", intTensor("", []int64{1, -1, 1}, 3))})
	h0 := b.node("/policy", "Mul", []string{keep, h})
	c0 := b.node("/policy", "Mul", []string{keep, c})
	x := b.node("/policy/features_extractor", "Flatten", []string{obs}, attrI("axis", 1))
	x = b.node("/policy", "Unsqueeze", []string{x, b.constant("", intTensor("", []int64{1}, 1))})
	y, yh, yc := b.lstm("/policy/lstm_actor", x, 2, 16, h0, c0, false)
	pi := b.linear("/policy/mlp_extractor/policy_net/policy_net.0", "policy.mlp_extractor.policy_net.0", y, 16, 16)
	pi = b.node("/policy/mlp_extractor/policy_net/policy_net.1", "Tanh", []string{pi})
	logits := b.linear("/policy/action_net", "policy.action_net", pi, 16, n)
	b.rename(b.linear("/policy/value_net", "policy.value_net", y, 16, 1), "values")
	am := b.node("/policy", "ArgMax", []string{logits}, attrI("axis", 1), attrI("keepdims", 0))
	b.rename(am, "actions")
	b.rename(b.node("", "Identity", []string{yh}), "lstm_h_out")
	b.rename(b.node("", "Identity", []string{yc}), "lstm_c_out")
	b.output("actions", i64, "batch")
	b.output("values", f32, "batch", 1)
	b.output("lstm_h_out", f32, 1, "batch", 16)
	b.output("lstm_c_out", f32, 1, "batch", 16)
	return b.model()
}

// conventional is a graph with unnamed layers whose outputs are named logits and value.
func conventional(n int, meta map[string]string) *onnxpb.ModelProto {
	b := newBuilder()
	b.meta = meta
	obs := b.input("obs", f32, "batch", 4)
	w := b.param("w0", nil, 4, 16)
	x := b.node("", "Relu", []string{b.node("", "MatMul", []string{obs, w})})
	b.rename(b.node("", "MatMul", []string{x, b.param("w1", nil, 16, int64(n))}), "logits")
	b.rename(b.node("", "MatMul", []string{x, b.param("w2", nil, 16, 1)}), "value")
	b.output("logits", f32, "batch", n)
	b.output("value", f32, "batch", 1)
	return b.model()
}

// drawnWithMemory samples its actions in the graph (Multinomial over log-softmax logits) and
// carries a memory input to an output of the same shape whose names say nothing.
func drawnWithMemory(n int) *onnxpb.ModelProto {
	b := newBuilder()
	obs := b.input("obs", f32, "batch", 4)
	mem := b.input("mem", f32, "batch", 8)
	x := b.node("", "Concat", []string{obs, mem}, attrI("axis", 1))
	h := b.rename(b.node("/core", "Tanh", []string{b.linear("/core/fc", "core.fc", x, 12, 8)}), "next")
	logits := b.linear("/head/fc", "head.fc", h, 8, n)
	lp := b.node("", "LogSoftmax", []string{logits}, attrI("axis", 1))
	b.rename(b.node("", "Multinomial", []string{lp}, attrI("sample_size", 1), attrI("dtype", 7)), "sampled")
	b.output("sampled", i64, "batch", 1)
	b.output("next", f32, "batch", 8)
	return b.model()
}

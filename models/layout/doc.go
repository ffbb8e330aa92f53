// Package layout recognises how a policy exported to ONNX by another library lays out its
// head: which tensors hold the logits or the Gaussian mean, the log standard deviation, the
// state value and the policy's own deterministic actions; which head it is (categorical,
// gaussian, or tanh-gaussian for SAC); whether the graph already maps squashed actions onto
// the env's bounds; and how its inputs are fed: the observations, recurrent states carried
// from one step to the next, sequence lengths and episode starts.
//
// It reads the ONNX protobuf only (package onnxpb): no ONNX Runtime is needed or linked (the
// package builds without cgo, for any GOARCH), and nothing is modified. [Recognise] returns a [Binding]; [Expose] returns a copy of the model whose
// outputs include the inner tensors the binding names, so that a session computes them; its
// [Binding.Names] then go to head.Bind over the session's outputs.
//
// # What is recognised
//
// Exporters name modules and parameters after the Python attributes (torch ≥ 1.13 names a node
// "/policy/action_net/Gemm" and its weight "policy.action_net.weight"), so module names
// identify the family and the roles:
//
//   - sb3: Stable-Baselines3's ActorCriticPolicy (mlp_extractor, action_net, value_net and a
//     log_std parameter of [D]), from the documented OnnxableSB3Policy export (outputs
//     actions, values, log-probabilities, auto-named) or the older one (action_net and
//     value_net outputs);
//   - sb3-sac: SB3's SAC actor (latent_pi, mu, log_std); a deterministic export keeps only
//     tanh(mu), so the policy is deterministic-only;
//   - sb3-dqn: SB3's DQN (DQNPolicy's q_net, a QNetwork of features_extractor and q_net),
//     exported whole by the documented OnnxableSB3Policy (greedy actions out, the Q-values
//     inside, behind the ArgMax) or as the Q-network alone (the Q-values out): the qvalues
//     head, which acts greedily (ε-greedily with towerrl.epsilon), never sampling a softmax of
//     the Q-values;
//   - cleanrl-dqn: CleanRL's DQN QNetwork (one nn.Sequential, network) exported alone: one
//     output of one Q-value per action, the qvalues head as for sb3-dqn;
//   - sb3-contrib-recurrent: RecurrentPPO (lstm_actor), states shaped [layers, batch, hidden]
//     and an episode_starts input;
//   - rllib: ModelV2 exports (_hidden_layers, _logits, _value_branch; inputs obs, state_ins /
//     state_in_N, seq_lens; outputs output, state_outs); a Box head's output holds the mean
//     and the log_std side by side (Binding.Split);
//   - sample-factory: action_parameterization.distribution_linear, critic_linear; inputs
//     obs and rnn_states, outputs output_actions and output_rnn_states;
//   - cleanrl: actor / critic sequentials, actor_mean with an actor_logstd parameter of
//     [1, D], SAC's fc_mean / fc_logstd with its action_scale and action_bias;
//   - towerrl: towerrl.* metadata;
//   - convention: none of those; output names (logits, value, log_std, actions) as
//     head.Conventional reads them.
//
// Structure confirms and completes names: the logits are what an ArgMax (or a Multinomial
// draw) reads, back through Softmax, LogSoftmax and x − logsumexp(x); the actions are what the
// ArgMax gives. A Tanh of a D-wide layer whose result reaches an output through affine maps by
// constants is SAC's tanh(mean): tanh-gaussian, and the affine map, when there is one, is
// checked against the env's bounds (scaled in the graph, or not). The log_std is what an Exp
// reads: a parameter of D values, or a D-wide layer after its clamp. A width-1 layer that
// reaches an output is the value. Recurrent states are the initial and final states of LSTM,
// GRU and RNN nodes traced to graph inputs and outputs, then inputs and outputs whose names
// differ only by in/out/new/next (state_in_0/state_out_0, rnn_states/output_rnn_states,
// state_ins/state_outs), then inputs and outputs of equal shape. A state shaped [layers,
// batch, hidden] has its batch on axis 1, one shaped [batch, hidden] on axis 0.
//
// # Precedence
//
// User names (Overrides: --logits-output, --logstd-output, --value-output, --actions-output,
// --head, --action-scale; inner tensors and initializers included) win over towerrl.*
// metadata, which wins over an exporter's layout, which wins over naming conventions. When
// nothing gives the logits or mean, nor deterministic actions, Recognise returns an
// *UnrecognisedError (wrapping ErrNotRecognised) listing the candidate tensors with their
// shapes and the flags to pass. A binding without a distribution (actions only, or a mean
// without a log_std) is DeterministicOnly: it runs with --deterministic and cannot be
// fine-tuned.
//
// Binding.Notes say, one line each, what was bound and why, for the log.
//
// The package holds no state; its functions are safe for concurrent use and do not retain
// the models passed to them.
package layout

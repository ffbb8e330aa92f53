// Package head turns a policy network's outputs into actions: a categorical distribution over
// logits (sampled, or argmax), a diagonal Gaussian over actions (mean and log standard
// deviation; sampled, or the mean) with clipping to the action space's bounds, and a
// tanh-squashed Gaussian ([TanhGaussian], Soft Actor-Critic's policy) whose actions in
// [−1, 1] are mapped onto the bounds, each with log-probabilities.
//
// A [Spec] says which head a policy has and the spaces it acts in. It comes from the
// towerrl.* metadata of the ONNX file ([FromMetadata]) or, for foreign models, from the caller
// (package models/layout recognises the common exporters' layouts). [Bind] finds which of the
// model's outputs carry the distribution's parameters, the value and the policy's own
// deterministic actions. It reads the outputs as [Tensor]s, this package's own description of
// a session's outputs, so that the package links no ONNX Runtime and builds anywhere Go does
// (a batcher converts onnx.TensorInfo field by field). A policy with no recoverable distribution (actions only, or a mean
// without a log_std) binds as DeterministicOnly: it runs deterministically, and
// [Outputs.Stochastic] says so with an error naming --deterministic.
//
// One rule reads a Gaussian's log_std everywhere, in batchers and trainers alike:
// [LogStdLayout]. A log_std is shared when it holds D values and does not follow the batch
// ([D] as SB3's parameter, [1] for one dimension, [1, D] as CleanRL's), and per row when it is
// [batch, D]; RLlib's layout puts the mean and log_std side by side in one [batch, 2·D] output
// (Outputs.Split).
//
// Sampling works a whole batch in one call: Sample draws every row from one stream,
// SampleRows row i from rngs[i] (a batcher keeps one stream per env, so an env's actions do
// not depend on how envs are spread over workers). A categorical row costs one pass of float32
// exps, one uniform number and one log; a Gaussian works exp(log_std) out once per call when
// the log_std is shared and once per row otherwise. The draws follow the distributions
// exactly, and log-probabilities are within 1e-6 of float64 ones (the tests check both).
//
// The distribution maths learners and loss ops need is here too, once, in float64 over one
// row: [LogSumExp], [LogSoftmax] and [LogSoftmaxBackward]; [CategoricalForward] and
// [CategoricalBackward] (log-probability, entropy and their gradients with respect to the
// logits); [GaussianForward], [GaussianBackward], [GaussianLogProb] and [GaussianEntropy] (with
// respect to the mean and log_std).
//
// Randomness comes only from the *rand.Rand the caller passes, so a seed reproduces the
// actions exactly. The head values are immutable and safe for concurrent use; the buffers
// passed to them belong to the caller, and a stream passed to a call belongs to it until it
// returns. Sample, SampleRows, Mode and LogProb allocate nothing (a Gaussian over more than 64
// dimensions works exp(log_std) out per element instead).
package head

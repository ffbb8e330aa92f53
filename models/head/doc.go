// Package head turns a policy network's outputs into actions: a categorical distribution over
// logits (sampled, or argmax) and a diagonal Gaussian over actions (mean and log standard
// deviation; sampled, or the mean), with log-probabilities, and clipping of Gaussian actions to
// the action space's bounds.
//
// A [Spec] says which head a policy has and the spaces it acts in. It comes from the
// towerrl.* metadata of the ONNX file ([FromMetadata]) or, for foreign models, from the caller.
// [Bind] finds which of the model's outputs carry the distribution's parameters and the value.
//
// Randomness comes only from the *rand.Rand the caller passes, so a seed reproduces the
// actions exactly. The head values are immutable and safe for concurrent use; the buffers
// passed to them belong to the caller. Sample and Mode allocate nothing.
package head

// Package bind binds an ONNX policy to an environment and runs it: it takes the model bytes
// (towerrl's own export or another library's), checks them against the env's spaces before any
// step, rewrites what a batched, batch-first session needs, and makes one [Runner] per worker
// that runs the session and samples the head. Package batcher drives Runners behind its Agent
// interface; cmd/eval and cmd/batcher bind a file with [Load].
//
// # Lifecycle
//
// [New] (or [Load]) returns an immutable [Policy], safe for concurrent use. The bytes are parsed
// and checked once (onnx.Parse) and the parsed model handed on to the edits and every session;
// a caller that has parsed them already passes the onnx.Model to [FromModel]. [Policy.NewRunner]
// opens one session for n envs; a Runner belongs to one goroutine (a worker's), except
// [Runner.Stage], and [Runner.Close] releases its session. [Policy.WithModel] gives the same
// binding over other weights without recognising or verifying anything again.
//
// # Policies from other libraries
//
// [New] binds a policy without flags. A fixed batch (an export without dynamic axes) is made
// dynamic by edit.DynamicBatch and verified against the original; when it cannot be, the
// Runners run the model one fixed batch per call and the log says so. layout.Recognise finds
// the head (categorical, gaussian, tanh-gaussian) and its tensors — logits or mean, log_std,
// value, the graph's own actions — from towerrl metadata, an exporter's layout or naming
// conventions, and how the inputs are fed; layout.Expose makes inner tensors outputs. A
// recurrent state whose batch is on axis 1 (torch's [layers, batch, hidden]) is transposed to
// batch-first at the graph's edge, so a worker keeps each env's state as one contiguous row.
// Config's Spec, Head, Names and ActionScale override any of it. Every note of the binding and
// every rewrite goes to Config.Session.Logger. A towerrl model is used as it is. A graph that
// fits no head is refused with layout's error, which lists the candidate tensors and the flags
// to pass.
//
// A Runner feeds the observation input, zeros to the inputs the binding lists as Zeros, ones
// to seq_lens and 1 to episode_starts at an episode's first step. RLlib's Split rows hold the
// mean then the log_std. A tanh-gaussian head (SAC) draws u ~ N(mean, σ) and the env takes
// tanh(u) mapped onto its bounds (head.ScaleEnv) or as it is (head.ScaleNone); the actions
// hold u and the log-probability is the Gaussian log-density of u without the tanh correction,
// which depends on u alone and cancels in PPO's ratio: a learner treats the head as a Gaussian
// over u (see batcher.Rollout). A DeterministicOnly binding (no logits, or a mean without a
// log_std) acts with the graph's own actions or the mean, with log-probabilities 0, and needs a
// deterministic Runner.
//
// # New weights
//
// [Policy.WithModel] takes a re-export of the original graph (a trainer's, or onnx/graph's
// write-back): the edits made at load (batch freed, tensors exposed, states transposed) are
// applied to it by taking its initializers by name into the edited graph. A policy bound with
// Config.Publish instead makes sessions that read the named weights from two sets of buffers
// per Runner (package onnx's fed weights): [Runner.Stage] copies a flat parameter vector into
// the set the session is not reading, from any goroutine, and [Runner.TakeWeights] swaps the
// sets between two steps. Names that are Identity outputs over an initializer (PyTorch's shared
// equal initializers) become initializers of their own; New warns when a published weight feeds
// a convolution, which ONNX Runtime then runs without its constant-weight layout.
//
// # Steady state
//
// [Runner.Step] and [Runner.Values] allocate nothing; [Runner.Run] with Output, Params,
// LogProb, Value and NextState read one inference back for checks and replays.
package bind

// Package batcher collects experience with ONNX policies, in the manner of rlstructures'
// batchers: W worker goroutines, each owning a vectorised environment of M envs and its own
// ONNX Runtime session, make one inference call per step over their M observations, sample
// actions with the policy head, and write T steps into a columnar [Rollout] allocated once.
//
// # Lifecycle
//
// [NewPolicy] (or [LoadPolicy]) binds a model and checks it against the environment before
// any step: its observation input must take the env's observation rows and its head must act
// in the env's action space. [New]
// makes the envs and agents, resets the envs and starts the workers; [Batcher.Collect] runs
// T steps on every env and returns the rollout, valid until the next Collect, or
// [Batcher.Stream] keeps collecting into a ring of rollouts handed out by ownership until its
// Close; [Batcher.Close] stops and waits for the workers and releases envs and sessions.
// [Evaluate] runs whole episodes; [Dataset] writes rollouts as .npz shards into a folder it
// holds locked, recorded in its manifest.json.
//
// # Policies from other libraries
//
// [NewPolicy] binds a policy without flags. A fixed batch (an export without dynamic axes) is
// made dynamic by edit.DynamicBatch and verified against the original; when it cannot be, the
// agents run the model one fixed batch per call and the log says so. layout.Recognise finds
// the head (categorical, gaussian, tanh-gaussian) and its tensors — logits or mean, log_std,
// value, the graph's own actions — from towerrl metadata, an exporter's layout or naming
// conventions, and how the inputs are fed; layout.Expose makes inner tensors outputs.
// PolicyConfig's Spec, Head, Names and ActionScale override any of it. Every note of the
// binding and every rewrite goes to PolicyConfig.Session.Logger. A towerrl model is used as
// it is. A graph that fits no head is refused with layout's error, which lists the candidate
// tensors and the flags to pass.
//
// The agent feeds the observation input, zeros to the inputs the binding lists as Zeros,
// ones to seq_lens and 1 to episode_starts at an episode's first step. RLlib's Split rows
// hold the mean then the log_std. A tanh-gaussian head (SAC) draws u ~ N(mean, σ) and the env
// takes tanh(u) mapped onto its bounds (head.ScaleEnv) or as it is (head.ScaleNone); the
// rollout's Actions hold u and LogP the Gaussian log-density of u without the tanh
// correction, which depends on u alone and cancels in PPO's ratio: a learner treats the head
// as a Gaussian over u (see [Rollout]). A DeterministicOnly binding (no logits, or a mean
// without a log_std) acts with the graph's own actions or the mean, with log-probabilities 0,
// and needs Config.Deterministic.
//
// # Recurrent policies
//
// For each recurrent state of the binding the worker keeps one row per env, double-buffered
// (the step's output becomes the next step's input by swapping buffers): preallocated, no
// allocation per step. A state whose batch is on axis 1 (torch's [layers, batch, hidden]) is
// transposed to batch-first at the graph's edge when the policy is loaded. An env's state is
// zeroed when its episode ends (the env is reset in the same step), so every episode starts
// from zeros. Each rollout carries every env's state before its first step
// (Rollout.InitialState) and the episode starts (Rollout.EpisodeStarts), so a learner can
// replay whole sequences. Snapshots include the states. Bootstrap values of a recurrent
// policy use the state the env had at that observation.
//
// # Hot policy swap
//
// [Batcher.UpdatePolicy] builds one session per worker from the new model, then hands each
// worker its agent; a worker installs it between two steps (an atomic flag read per step), so
// collection does not pause and a step never mixes versions. Every row carries the version of
// the policy that chose its action. A policy a worker has not yet picked up is replaced (and
// closed) by a newer one. Recurrent states carry over a swap; a policy with other states is
// refused. A trainer publishing new weights calls [Policy.WithModel] with a re-export of the
// original graph: the edits made at load (batch freed, tensors exposed, states transposed)
// are applied to it by taking its initializers by name, without recognising or verifying
// anything again.
//
// # Publishing weights in place
//
// Within one process a trainer publishes a new version without exporting a model or building
// a session: a policy loaded with PolicyConfig.Publish (the initializers the trainer owns and
// where each lies in its flat parameter vector; [ContiguousParams] for the usual back-to-back
// layout) makes sessions that read those weights from buffers each worker owns (package onnx's
// fed weights), two sets per worker. [Batcher.Publish] copies the flat vector into every
// worker's set not in use — its session may be running a step on the other — and flags it;
// at its next step boundary, where it would install an UpdatePolicy agent, the worker swaps
// the sets and its rows from then on carry the new version. So when Publish returns every
// step started afterwards runs the new weights, no step mixes versions, recurrent states
// carry over, and Publish costs a copy: microseconds, against milliseconds for an export,
// WithModel and UpdatePolicy (BenchmarkPublish); the worker's swap then rebinds the weights at
// its next inference (package onnx's BenchmarkFedWeights, fed+switch; the figures are in
// docs/benchmarks.md). Names that
// are Identity outputs over an initializer (PyTorch's shared equal initializers, which
// onnx/graph trains as untied parameters) become initializers of their own. Publish and
// UpdatePolicy are ordered: the later one wins, also on a worker that has not installed the
// earlier; a policy from WithModel keeps the layout and starts from the model's weights.
//
// The sessions then run with weights ONNX Runtime can neither fold nor pre-pack, which costs
// the MLPs and the LSTM of the fixtures a few percent at batch 1024 (BenchmarkPublishInference,
// the two sessions alternating call by call; docs/benchmarks.md). That is why this design was
// chosen over the other two measured (see package onnx): user-owned initializers cost the
// same where they work and are silently half-ignored where ONNX Runtime optimises them;
// sessions rebuilt per publish cost milliseconds each, per worker. Convolutions are the
// exception: fed, they lose ONNX Runtime's NCHWc layout and run several times slower (an Atari
// CNN at batch 64), so NewPolicy warns when a published weight feeds a Conv, and such a policy is
// better published with WithModel and UpdatePolicy.
//
// # Continuous collection
//
// For an asynchronous learner (IMPALA, APPO) the workers need not wait for the consumer
// between rollouts. [Batcher.Stream] allocates StreamConfig.Slots whole rollouts (default 2)
// and switches the workers to filling them: each worker takes the next slot from a channel
// of slot indices as soon as it has written its rows of the previous one, so workers do not
// wait for each other at rollout boundaries. [Stream.Next] returns the oldest filled rollout
// with its slot, and the caller owns it — nothing writes it — until [Stream.Release] gives
// the slot back, which the workers then fill with a later rollout. No rollout data is copied
// (Next gathers the workers' episode summaries into Rollout.Episodes) and nothing is
// allocated in steady state.
//
// Backpressure: when every slot is filled or held, a worker waits for a free one; memory
// never grows beyond the slots, and StreamStats.Blocked counts the waiting time summed over
// workers (StreamStats.IdleFraction: Blocked / (workers × elapsed)).
//
// Continuity: the workers keep envs, episode counters, recurrent states and sampling streams
// from one rollout to the next, as between Collects, so consecutive rollouts of a stream are
// exactly the consecutive Collects of StreamConfig.Steps a batcher with the same seed gives
// (bootstrap values, initial states, episode starts and episodes included), and rollouts of
// k steps concatenate to one of n·k. Publish and UpdatePolicy reach the workers between two
// steps, as during Collect; every row carries its version.
//
// Policy lag: a rollout's lag is V − v at hand-out, V the version of the latest policy given
// to the batcher (New's, then Publish's or UpdatePolicy's, installed by the workers or not)
// and v the oldest version among its rows. With StreamConfig.MaxPolicyLag > 0, Next drops a
// filled rollout whose lag exceeds it (the slot goes straight back to the workers, counted
// in StreamStats.Dropped, its episodes lost) and waits for the next. StreamStats reports the
// mean and largest lag of the rollouts handed out, and the slots ready and held.
//
// Lifecycle: while a stream runs, Collect, Snapshot, Restore and a second Stream are refused
// with ErrStreaming. [Stream.Close] (or the end of the context given to Stream) stops the
// workers after their current step — the rollout they were filling is lost — and Close
// returns them to Collect mode, continuing from where the envs are. Rollouts still held stay
// valid after Close. [Batcher.Close] closes a running stream first.
//
// # Threading and ownership
//
// Collect calls are serialised; Stream, UpdatePolicy, Publish and Close may be called from
// other goroutines (Publish and UpdatePolicy are serialised with each other). A Stream's
// methods may be called from any goroutine; Next calls are served one at a time.
// Worker w writes only rows of envs [w·M, (w+1)·M) of the rollout, so no memory is written by
// two goroutines; a stream's slot passes between the workers and the caller through channels
// and the stream's lock, so it has one owner at a time. Agents, envs and their buffers belong to their worker. Steady-state
// collection allocates nothing.
//
// # Seeding
//
// Env i's reset stream and its action-sampling stream depend on (Seed, i) alone, so the same
// seed gives the same rollout whatever the number of workers the envs are spread over.
//
// # Autoreset
//
// As in package envs, an env whose episode ends is reset in the same step; the rollout keeps
// the episode's final observation in FinalObs, and [Rollout.NextObs] gives the observation
// that followed any step. For bootstrapping, each worker also evaluates, with the policy that
// collected the rollout and without drawing random numbers, the value of every final
// observation of a truncated episode (Rollout.FinalValues) and of the last observations
// (Rollout.LastValues).
package batcher

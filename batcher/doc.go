// Package batcher collects experience with ONNX policies, in the manner of rlstructures'
// batchers: W worker goroutines, each owning a vectorised environment of M envs and its own
// [Agent] (for a policy, a bind.Runner: its own ONNX Runtime session), make one inference call
// per step over their M observations, sample actions with the policy head, and write T steps
// into a columnar [Rollout] allocated once.
//
// Three jobs live elsewhere: package bind binds a model to the environment and runs it (the
// agents of a bind.Policy), package dataset writes rollouts as .npz shards. Batcher keeps the
// workers, the rollouts, the stream, evaluation and the memory checks.
//
// # Lifecycle
//
// bind.New (or bind.Load) binds a model and checks it against the environment before any step:
// its observation input must take the env's observation rows and its head must act in the
// env's action space. [New] makes the envs and agents, resets the envs and starts the workers; [Batcher.Collect] runs
// T steps on every env and returns the rollout, valid until the next Collect, or
// [Batcher.Stream] keeps collecting into a ring of rollouts handed out by ownership until its
// Close; [Batcher.Close] stops and waits for the workers and releases envs and sessions.
// [Evaluate] runs whole episodes.
//
// # Recurrent policies
//
// For each recurrent state of the binding the worker keeps one row per env, double-buffered
// (the step's output becomes the next step's input by swapping buffers): preallocated, no
// allocation per step (package bind gives every state batch-first). An env's state is
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
// refused. A trainer publishing new weights calls bind.Policy.WithModel with a re-export of the
// original graph (package bind carries the edits made at load over to it).
//
// # Publishing weights in place
//
// Within one process a trainer publishes a new version without exporting a model or building
// a session: a policy bound with bind.Config.Publish (the initializers the trainer owns and
// where each lies in its flat parameter vector; bind.ContiguousParams for the usual
// back-to-back layout) makes sessions that read those weights from buffers each worker owns
// (package onnx's fed weights), two sets per worker. [Batcher.Publish] copies the flat vector into every
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
// CNN at batch 64), so bind.New warns when a published weight feeds a Conv, and such a policy is
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

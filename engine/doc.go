// Package engine is the training loop that wires batchers to the learner, with run
// directories, checkpoints and metrics; the algorithms live in their own packages (engine/ppo,
// which also registers ddppo; engine/impala and engine/appo, over engine/vtrace) and register
// themselves with engine/algo, which Config.Algo names, with their capabilities (on-policy,
// trains across ranks) that the engine and the tools decide from. The engine names and links
// no algorithm: a program that trains imports package engine/algos. It holds no device code.
//
// # The loop
//
// [Train] runs synchronous PPO (Schulman et al. 2017, with CleanRL's ppo.py and
// ppo_continuous_action.py as the reference for behaviour and defaults): the batchers collect
// Workers×Envs×RolloutSteps steps with policy version v; the algorithm computes the training
// targets (PPO: GAE advantages, ppo.GAE), bootstrapping
// from the final observation's value at truncation and not at termination; the learner's
// towers make Epochs passes of Minibatches shuffled minibatches (advantages standardised per
// minibatch, gradients averaged over towers and clipped by global norm, Adam with the learning
// rate annealed linearly per iteration); the new weights are published in place into the
// batchers' sessions as version v+1 (batcher.Batcher.Publish: no export, no new session). The loss is CleanRL's: clipped surrogate, value loss clipped
// around the old values, entropy bonus. Each tower computes it as one gorgonia op over the
// head's outputs (the logits, or the Gaussian mean and log std) with its analytic gradient:
// the log-probability, entropy and loss in float64 per row, with no per-run allocation, so
// towers run in parallel without waking the garbage collector (tests compare it with the graph
// of models' LogProb and Entropy, with ONNX Runtime in float64 and with finite differences).
//
// The policy trained is a policy.Model (package engine/policy): one of towerrl's own
// architectures, or with Config.InitPolicy a foreign ONNX policy (PyTorch, SB3, CleanRL,
// RLlib, Sample Factory exports) imported with package onnx/graph and trained in its own
// graph; the trainer never asks which, the Model answers for its binding, its recurrent
// states and a new critic's warm-up. The exported
// policy.onnx keeps its graph, names and opset with new weights. A recurrent policy is trained
// with backpropagation through time: each env's rollout is cut into sequences of SeqLen steps,
// each replayed from the state the batcher fed at its first step, the one-step graph built
// once per step over shared parameters (states zeroed where an episode ends), so the first
// epoch's probability ratios are 1.
//
// # Normalisation
//
// With Config.NormObs, observations are normalised by their running mean and variance
// (package engine/normalize), and the map is part of the policy: ops in front of the network
// in every export (models.PrependObsNorm), its mean and scale published in place with the
// weights, so the batchers, policy.onnx and remote batchers all take raw observations. The
// statistics stay fixed while a rollout is collected and trained on (each row is normalised
// with the map of the version that collected it, as the batchers' sessions did) and take the
// rollout's raw observations after the update (summed over DD-PPO's ranks). With
// Config.NormReward the learner's rewards are divided by the running standard deviation of
// each env's discounted return and clipped (VecNormalize's reward scaling); metrics and
// evaluation use raw rewards. Both states are in the checkpoint. See normalization.go and
// docs/presets.md.
//
// # Asynchronous algorithms
//
// An algorithm that trains on whole sequences (algo.Sequential: impala, appo) runs
// asynchronously: the batchers stream rollouts into a ring of Config.QueueSize buffers
// (batcher.Batcher.Stream) and never wait for the learner, which takes each rollout as it is
// filled, copies it into its batch as whole sequences of SeqLen steps of each env (with the
// behaviour's value of each row's successor, learner.SampleBatch.NextValues), hands the buffer
// back and trains; the loss computes V-trace from the current policy per minibatch. Weights
// are published in place every BroadcastInterval iterations; the metrics gain the policy lag
// and who waited for whom ([AsyncMetrics]). Checkpoints hold the learner's state only (see
// streamCollector).
//
// # Strategies
//
// The trainer chooses its strategies once, when it is made: where rollouts come from (a
// collector: its own batchers, their asynchronous stream, or a RolloutSource; collect.go),
// how its work combines with the other ranks of a DD-PPO job (a reducer; reduce.go), and how
// a rollout fills the learner's batch (as it comes, or as whole sequences for V-trace and
// recurrent policies). An off-policy algorithm (a replay buffer, many small updates per
// collection) plugs in as a collector of its own, chosen from the capabilities its package
// registers with engine/algo; see collector.
//
// # DD-PPO
//
// With Options.Ranks (an MPI job, package learner/mpi) and Config.Algo "ddppo", each rank runs
// this loop with its own batchers and towers, the towers' gradients averaged across the ranks
// at every minibatch and advantages standardised over every rank's rows; rank 0 owns the run
// directory (see ddppo.go).
//
// # Run directory
//
// Options.Out receives config.json (the full Config, defaults filled), metrics.jsonl (one
// [Metrics] object per iteration), policy.onnx (the latest policy, replaced atomically every
// CheckpointEvery iterations, at a stop and at the end; the batchers get every version in
// place, batcher.Batcher.Publish, without an export), checkpoint/state.ckpt (parameters, Adam state, counters and the batchers' env and
// random-stream snapshots, every CheckpointEvery iterations and at the end) and curve.png (when
// Options.Plot is set: package engine/curve draws it, so the engine links no plotting library)
// and TensorBoard event files, events.out.tfevents.* (the metrics with CleanRL's tags at step =
// env steps, one event per iteration, and the config as the text "hyperparameters"; a resume
// cuts them back to its checkpoint and writes a new file; Options.NoTensorBoard: none; written
// by package internal/tfevent); with Config.EvalEvery, best_policy.onnx and best.json (the
// best policy the evaluations during training found, and its record: evaluate.go, whose
// evaluator an off-policy loop calls as well, counting env steps). Train refuses a folder that already holds a run; [Resume] continues one from its checkpoint
// and finishes with exactly the metrics and policy an uninterrupted run would have.
//
// # Threading
//
// Train and Resume block until the run ends or ctx is cancelled; Options.Progress is called on
// their goroutine. The batchers' workers and the learner's towers and loaders run on goroutines
// owned by the run and stopped before Train returns.
package engine

// Package batcher collects experience with ONNX policies, in the manner of rlstructures'
// batchers: W worker goroutines, each owning a vectorised environment of M envs and its own
// ONNX Runtime session, make one inference call per step over their M observations, sample
// actions with the policy head, and write T steps into a columnar [Rollout] allocated once.
//
// # Lifecycle
//
// [NewPolicy] (or [LoadPolicy]) checks a model against the environment before any step: its
// input must take the env's observation rows and its head (from towerrl.* metadata, the
// caller's head.Spec, or the env's action space) must act in the env's action space. [New]
// makes the envs and agents, resets the envs and starts the workers; [Batcher.Collect] runs
// T steps on every env and returns the rollout, valid until the next Collect;
// [Batcher.Close] stops and waits for the workers and releases envs and sessions.
// [Evaluate] runs whole episodes; [Dataset] writes rollouts as .npz shards into a folder it
// holds locked, recorded in its manifest.json.
//
// # Hot policy swap
//
// [Batcher.UpdatePolicy] builds one session per worker from the new model, then hands each
// worker its agent; a worker installs it between two steps (an atomic flag read per step), so
// collection does not pause and a step never mixes versions. Every row carries the version of
// the policy that chose its action. A policy a worker has not yet picked up is replaced (and
// closed) by a newer one.
//
// # Threading and ownership
//
// Collect calls are serialised; UpdatePolicy and Close may be called from other goroutines.
// Worker w writes only rows of envs [w·M, (w+1)·M) of the rollout, so no memory is written by
// two goroutines. Agents, envs and their buffers belong to their worker. Steady-state
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

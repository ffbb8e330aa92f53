// Package dataset writes rollouts (batcher.Rollout) as .npz shards with D4RL's keys into a
// folder it holds locked, and records every run that wrote into the folder in its
// manifest.json ([Manifest]).
//
// # Lifecycle
//
// [Open] takes the folder for one run of an env (an envs.Spec resolved where the tool starts):
// it locks the folder, puts right what a killed writer left, and refuses a folder that already
// holds a dataset unless the run appends. [Writer.Write] writes one rollout as one shard,
// whole under its final name, then records it; [Writer.Finish] marks the run complete;
// [Writer.Close] releases the lock. A kill at any moment leaves a consistent folder (see
// [Writer]). [ReadManifest] reads a folder's record.
//
// # Threading and ownership
//
// A Writer belongs to one goroutine. Write reads the rollout and keeps nothing of it; its
// scratch buffers are reused from shard to shard.
package dataset

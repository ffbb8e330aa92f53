// Package replay is the replay buffer of the off-policy algorithms (engine/dqn, engine/sac): a
// ring of a configured capacity of transitions (observation, action, reward, terminated,
// truncated, next observation), stored columnar in float32 arrays allocated once, sampled
// uniformly with replacement from a *rand.Rand the caller seeds (as SB3's ReplayBuffer and
// CleanRL's scripts sample), and written to and read from a snapshot, bit for bit, for a
// run's checkpoint.
//
// # Time limits
//
// [Buffer.Add] takes one step of a VecEnv (envs.Buffers' same-step autoreset): where an
// episode ended, the observation after the step is the next episode's first, so the
// transition's next observation is taken from the final observation instead. Terminated is
// kept as the flag that stops bootstrapping; an episode cut by its time limit (Truncated
// only) keeps bootstrapping from its final observation, as SB3's handle_timeout_termination
// and CleanRL's real_next_obs do.
//
// # Memory
//
// [New] works out the bytes the buffer needs ([Bytes]: 4·(2·ObsDim + ActDim + 3) per
// transition) before allocating anything, and refuses a capacity that would take more than
// Config.MaxBytes (by default the memory the system reports available) with an error naming
// the capacity and the bytes: a typo in a capacity is an error, never an out-of-memory death.
//
// # Snapshots
//
// [Buffer.WriteTo] writes the buffer's filled rows and its position ([Buffer.SnapshotSize]
// bytes, stated before writing: a header, 4·(2·ObsDim + ActDim + 3) bytes per stored
// transition, a CRC-32C); [Buffer.ReadFrom] restores them into a buffer of the same shape,
// after which sampling with the same RNG state draws the same batches.
//
// Threading: a Buffer belongs to one goroutine at a time; Add, Sample and the snapshots
// allocate nothing (WriteTo and ReadFrom allocate one 64 KiB staging buffer per call).
package replay

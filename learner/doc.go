// Package learner trains policies on sample batches: columnar [SampleBatch]es, [Towers] that
// split each minibatch over several devices and average their gradients through a
// [Collective], optimisers ([Adam], [SGD]) with learning-rate schedules, and the asynchronous
// [Learner] loop that keeps tower stacks loaded. It never steps environments.
//
// # Towers
//
// A [Tower] is one graph on one device, built for a fixed slice size, reading the single
// shared flat parameter vector in place (no per-step weight copies on the CPU). Per minibatch,
// [Towers.Update] truncates the rows to a multiple of N (an error when a tower would get
// none), optionally standardises the advantages over the whole minibatch (so N towers compute
// what one would), copies one slice to each tower, runs the towers in parallel on their own
// goroutines, averages their gradients in tower order through the Collective (deterministic
// for a seed), clips the average by global norm, and applies it once through the optimiser.
// Recurrent data is split in whole sequences, never through time.
//
// Tower 0 runs on the goroutine calling Update; towers 1..N-1 each have their own, or a
// [Crew]'s that several Towers updating in turn share (SAC's critics and actor). What
// follows the gradients is shared by the towers too, each on its shard of the parameters
// (with Adam or SGD): averaging (with the default Local, only the shard each applies), the
// square sums of the global norm, clipping and the optimiser's step. One tower doing all of
// it would leave the others idle for as long as it takes (it reads every other tower's
// gradient from another CPU's cache), and an update of a small minibatch is only a few
// hundred µs. The norm is summed in blocks of 512 values, added in block order, so the
// results have the same bits for any number of towers and either way of stepping.
//
// Hand-offs between the towers (a job, the averaging, the norm, the result) spin for up to
// 500 µs before they park, when GOMAXPROCS leaves each tower a P: waking a parked thread costs
// tens of µs on a VM, a large share of a small minibatch's step, while an update's serial
// part is far shorter than the spin. Towers idle longer than that park and cost nothing.
//
// # The asynchronous learner
//
// As RLlib's MultiGPULearnerThread: [Learner.Submit] puts a batch on a bounded inqueue; K
// loader goroutines take a batch and an idle stack and load it (on a device, the host-to-device
// copy); the learner goroutine takes a loaded stack, runs SGDIters shuffled passes of
// minibatches over it without reloading, returns the stack to idle and posts a [Result] on the
// outqueue. A stack of rows stays where it was loaded: each pass draws a permutation, and each
// tower gathers its slice of a minibatch from the stack in the order the passes' permutations
// compose to, in parallel; a stack of sequences is shuffled in place, whole sequences. [Learner.Weights] reads the latest parameters and their version without stopping
// training. [Timers] report queue wait, load, gradient and stack-wait time.
//
// # Ownership and threading
//
// Channels carry ownership: a submitted batch belongs to the learner until it comes back on
// Released; a stack index belongs to whoever took it from the idle or ready channel. Towers
// write only their own gradient buffers; the parameters are written only by the optimiser
// (from several towers at once, each on its shard), under a lock that Weights also takes.
// Close stops every goroutine and waits for them. Shuffling, slicing, concatenation and the
// towers' averaging and step allocate nothing in steady state.
//
// # Collectives
//
// [Collective] is an all-reduce (mean) of a flat float32 buffer. [Local] serves towers in one
// process; a multi-process implementation (DD-PPO) plugs in through TowersConfig.Collective
// without touching tower code.
package learner

// Package mpi is the multi-process side of DD-PPO: a [World] of MPI ranks with the collective
// calls a decentralised trainer needs, and [Collective], the two-level [learner.Collective] of
// one rank. Each rank's towers average their gradients in process (a [learner.Local]); the
// last tower to arrive then runs one all-reduce across the ranks that weights each rank by its
// sample count, so ranks whose batches were cut short by straggler preemption count for the
// samples they have.
//
// # Building and launching
//
// MPI code is behind the build tag mpi (cgo; Open MPI through `pkg-config ompi-c`, or MPICH
// through `pkg-config mpich` with -tags mpi,mpich). Without the tag, [Init] returns
// [ErrNotBuilt], whose message says what to install and how to build. `make mpi` builds the
// tools with the tag into bin/. Launch one process per rank:
//
//	mpirun -np 4 --bind-to none bin/train …   (or srun under Slurm)
//
// --bind-to none matters: for np ≤ 2 Open MPI binds each rank to one core, and Go then runs
// with GOMAXPROCS=1. As root add --allow-run-as-root; for more ranks than cores,
// --oversubscribe. A binary built with the tag also runs without mpirun, as a job of one rank,
// but needs Open MPI's shared libraries to start at all.
//
// # Lifecycle
//
// [Init] once per process (MPI initialises once), pass the World along, and call
// [World.Finalize] on every rank at the end. After a [*StallError], [ErrOutOfStep] or an MPI
// error the World is broken (every later call returns [ErrBroken]): call [World.Abort], which
// ends every rank of the job. A refused argument and a CheckSame mismatch leave it usable (every
// rank gets the same error).
//
// Every rank must make the same collective calls, in the same order, with buffers of the same
// length. A World numbers its calls; the weighted all-reduce checks that the ranks meet with
// the same number ([ErrOutOfStep] otherwise), and every stall report says where each rank is.
//
// # Deadlines and failures
//
// Collective calls are non-blocking MPI operations polled until they complete, so each call
// honours its context's deadline, bounded further by Config.Timeout (10 minutes by default).
// The all-reduces are the exception that keeps the rule: the ranks meet first in a polled
// barrier (the deadline applies there, where a late rank is waited for) and then make
// Open MPI's blocking all-reduce, which every rank has by then reached and which is about
// twice as fast as the polled MPI_Iallreduce.
// A rank that gives up tells the others, listens for up to Config.Grace (250 ms) for where they are,
// and returns a [*StallError] naming the ranks that never arrived (busy or hung outside MPI, or
// dead), the ranks waiting elsewhere (out of step), and its own operation and call number.
// Ranks still waiting in the call hear that it gave up and fail at once the same way, so every
// waiting rank reports within about one Grace of the first deadline. MPI cannot cancel a
// started collective, so the job must then end: [World.Abort] kills every rank, the hung one
// included, and mpirun exits with the code given. Measured here (the hang scenario of
// scripts/mpi_test.sh, 2 and 3 ranks): with a 1 s deadline the waiting ranks return their
// errors after 1.25 s, and mpirun exits about 0.15 s after the first abort.
//
// A rank that dies (kill -9) makes Open MPI's mpirun kill the others about 1 s later, exiting
// 137; no error reaches Go (Open MPI's error handlers do not turn it into one).
//
// # Straggler preemption
//
// [World.FinishRollout] is DD-PPO's "my rollout is done" exchange: one small message from every
// rank to every other per call, on a communicator of the control messages, so a rank still
// collecting can count with [World.RolloutsFinished] (non-blocking, allocation-free, from any
// goroutine) how many ranks have finished, and stop early. FinishRollout then waits for every
// rank like a collective, under the same deadlines and stall reports, and returns every rank's
// step count. A rank cut short trains with a smaller weight ([Collective.SetWeight]), or with
// weight 0 in an update it has no rows for: [Collective.AllReduceSum] then adds zeros.
//
// # Determinism
//
// The weighted all-reduce sends w_r·x_r as float64 and sums in one MPI_Allreduce; every rank
// then divides the same sums by Σw_r the same way. Results are the same bits on every rank as
// long as MPI hands every rank the same sums, which Open MPI's algorithms do (each chunk is
// reduced once and distributed; the tests check it with [World.CheckSame]). The order of the
// sum, and so the last bit, may change with the number of ranks.
//
// # Threading and ownership
//
// A World serialises its calls and may be used from any goroutine, but concurrent calls
// would reach MPI in an order that differs between ranks: make them from one goroutine (a
// Collective's towers take turns by design). A Collective is safe for concurrent use by its
// members. A buffer belongs to MPI only during the call that was given it, except after a
// StallError: MPI may then still write into it until the job is aborted.
//
// While waiting a rank polls MPI back to back (yielding the CPU to other runnable threads) for
// Config.Spin (100 ms), then sleeps between polls; collectives move data only while every
// rank polls, so a rank still sleeping when the last one arrives adds a few ms.
package mpi

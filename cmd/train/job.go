package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/towerrl/towerrl/learner/mpi"
)

// launchedRanks is the number of ranks the job launcher (mpirun, mpiexec, srun) started, read
// from the environment it gives each rank; 0 when the process was not launched by one.
func launchedRanks() int {
	for _, v := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"} {
		if n, err := strconv.Atoi(os.Getenv(v)); err == nil && n > 0 {
			return n
		}
	}
	return 0
}

// joinJob returns this process's place in a DD-PPO job and how to leave it: the MPI world when
// the process was launched by mpirun or srun, or asked for ddppo, in a build with MPI (make
// mpi); nil for a single process. A launched job of several ranks in a build without MPI is
// refused: its ranks would each train alone and write over each other's run. leave's failed
// says whether the process will exit with an error.
func joinJob(ddppo bool) (mpi.Group, func(ctx context.Context, failed bool) error, error) {
	launched := launchedRanks()
	if launched == 0 && !ddppo {
		return nil, nil, nil
	}
	w, err := mpi.Init(mpi.Config{})
	switch {
	case errors.Is(err, mpi.ErrNotBuilt) && launched > 1:
		return nil, nil, fmt.Errorf("%d ranks were launched but this train was built without MPI: build it with `make mpi` and launch bin/train (mpirun -np N --bind-to none bin/train --algo ddppo ...)", launched)
	case errors.Is(err, mpi.ErrNotBuilt):
		return nil, nil, nil // ddppo as one process
	case err != nil:
		return nil, nil, fmt.Errorf("joining the MPI job: %w", err)
	}
	leave := func(ctx context.Context, failed bool) error {
		if err := w.Finalize(ctx); err != nil {
			return err
		}
		if failed && w.Size() > 1 {
			// Open MPI's mpirun aborts the job at the first rank that exits non-zero, and a
			// rank still inside MPI_Finalize then waits for the abort to reach it (2 s): a rank
			// about to fail lets the others, a moment behind it after Finalize's barrier, leave
			// MPI first. A signal (mpirun's abort, a second Ctrl-C) ends the wait.
			select {
			case <-time.After(exitGrace):
			case <-ctx.Done():
			}
		}
		return nil
	}
	return w, leave, nil
}

// exitGrace is how long a rank of a job of several ranks waits after Finalize before it exits
// with an error (joinJob).
const exitGrace = 500 * time.Millisecond

// slowdownEnv is a test hook for measuring DD-PPO's straggler preemption: RANK:FACTOR makes
// rank RANK's batchers collect FACTOR times slower (engine.Options.Slowdown).
const slowdownEnv = "TOWERRL_TEST_SLOWDOWN"

// testSlowdown is this rank's slowdown under slowdownEnv (0: none).
func testSlowdown(rank int) (float64, error) {
	v := os.Getenv(slowdownEnv)
	if v == "" {
		return 0, nil
	}
	rs, fs, ok := strings.Cut(v, ":")
	r, err1 := strconv.Atoi(rs)
	f, err2 := strconv.ParseFloat(fs, 64)
	if !ok || err1 != nil || err2 != nil || r < 0 || !(f >= 1) {
		return 0, fmt.Errorf("%s=%q: want RANK:FACTOR with FACTOR ≥ 1, e.g. 1:3 (rank 1 collects 3 times slower)", slowdownEnv, v)
	}
	if r != rank {
		return 0, nil
	}
	return f, nil
}

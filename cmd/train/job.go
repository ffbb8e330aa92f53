package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

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
// refused: its ranks would each train alone and write over each other's run.
func joinJob(ddppo bool) (mpi.Group, func(context.Context) error, error) {
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
	return w, w.Finalize, nil
}

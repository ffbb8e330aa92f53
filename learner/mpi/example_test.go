package mpi_test

import (
	"context"
	"crypto/sha256"
	"log"
	"time"

	"github.com/towerrl/towerrl/learner/mpi"
)

// A DD-PPO rank: join the job, start from rank 0's parameters, average each minibatch's
// gradients over the towers and the ranks weighted by the samples each rank collected, compare
// the ranks' parameters now and then, and leave together. (Without the mpi build tag, Init
// returns mpi.ErrNotBuilt.)
func Example() {
	world, err := mpi.Init(mpi.Config{Timeout: 5 * time.Minute})
	if err != nil {
		log.Fatal(err) // says how to build with MPI
	}
	ctx := context.Background()
	params := make([]float32, 1000)
	if err := world.BcastFloat32(ctx, 0, params); err != nil {
		world.Abort(1)
	}
	// The Collective goes into learner.TowersConfig.Collective; here one tower calls it.
	coll, err := mpi.NewCollective(world, 1)
	if err != nil {
		log.Fatal(err)
	}
	collected := 2048.0 // this rank's rows this iteration (fewer after preemption)
	if err := coll.SetWeight(collected); err != nil {
		log.Fatal(err)
	}
	grad := make([]float32, len(params))
	if err := coll.AllReduce(ctx, 0, grad); err != nil {
		log.Print(err) // a *mpi.StallError names the ranks that never arrived
		world.Abort(1)
	}
	// Advantage statistics over every rank: Σx, Σx², n.
	stats := []float64{12.5, 40.25, collected}
	if err := world.AllReduceFloat64(ctx, mpi.Sum, stats); err != nil {
		world.Abort(1)
	}
	var h [32]byte = sha256.Sum256([]byte("parameters"))
	if err := world.CheckSame(ctx, h); err != nil {
		log.Print(err) // a *mpi.MismatchError names the ranks that diverged
		world.Abort(1)
	}
	if err := world.Finalize(ctx); err != nil {
		world.Abort(1)
	}
}

//go:build !mpi || !cgo

package mpi

import (
	"context"
	"os"
)

// World is this process's place in an MPI job. This build has no MPI support (build tag mpi,
// with cgo): Init returns ErrNotBuilt, and so does every method.
type World struct{}

// Init returns ErrNotBuilt in this build: build with `make mpi` (go build -tags mpi).
func Init(cfg Config) (*World, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrNotBuilt
}

// Rank is 0 in this build.
func (w *World) Rank() int { return 0 }

// Size is 1 in this build.
func (w *World) Size() int { return 1 }

// Finalize returns ErrNotBuilt.
func (w *World) Finalize(ctx context.Context) error { return ErrNotBuilt }

// Abort exits the process with code.
func (w *World) Abort(code int) { os.Exit(code) }

// AllReduceWeighted returns ErrNotBuilt.
func (w *World) AllReduceWeighted(ctx context.Context, buf []float32, weight float64) error {
	return ErrNotBuilt
}

// AllReduceFloat64 returns ErrNotBuilt.
func (w *World) AllReduceFloat64(ctx context.Context, op Op, buf []float64) error {
	return ErrNotBuilt
}

// Bcast returns ErrNotBuilt.
func (w *World) Bcast(ctx context.Context, root int, buf []byte) error { return ErrNotBuilt }

// BcastFloat32 returns ErrNotBuilt.
func (w *World) BcastFloat32(ctx context.Context, root int, buf []float32) error { return ErrNotBuilt }

// Barrier returns ErrNotBuilt.
func (w *World) Barrier(ctx context.Context) error { return ErrNotBuilt }

// CheckSame returns ErrNotBuilt.
func (w *World) CheckSame(ctx context.Context, hash [32]byte) error { return ErrNotBuilt }

// Gather returns ErrNotBuilt.
func (w *World) Gather(ctx context.Context, root int, data []byte) ([][]byte, error) {
	return nil, ErrNotBuilt
}

// FinishRollout returns ErrNotBuilt.
func (w *World) FinishRollout(ctx context.Context, steps int64) ([]int64, error) {
	return nil, ErrNotBuilt
}

// RolloutsFinished returns ErrNotBuilt.
func (w *World) RolloutsFinished() (int, error) { return 0, ErrNotBuilt }

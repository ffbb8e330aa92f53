//go:build !mpi || !cgo

package mpi

import (
	"errors"
	"strings"
	"testing"
)

// Without the mpi tag every entry point says how to get MPI support.
func TestStub(t *testing.T) {
	w, err := Init(Config{})
	if w != nil || !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Init: got %v, %v, want nil, ErrNotBuilt", w, err)
	}
	for _, want := range []string{"make mpi", "apt-get install openmpi-bin libopenmpi-dev", "-tags mpi", "mpirun"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if _, err := Init(Config{Grace: -1}); !errors.Is(err, ErrArgument) {
		t.Errorf("a bad Config: got %v, want ErrArgument", err)
	}
	var world World
	ctx := t.Context()
	for name, err := range map[string]error{
		"AllReduceWeighted": world.AllReduceWeighted(ctx, []float32{1}, 1),
		"AllReduceFloat64":  world.AllReduceFloat64(ctx, Sum, []float64{1}),
		"Bcast":             world.Bcast(ctx, 0, []byte{1}),
		"BcastFloat32":      world.BcastFloat32(ctx, 0, []float32{1}),
		"Barrier":           world.Barrier(ctx),
		"CheckSame":         world.CheckSame(ctx, [32]byte{}),
		"Finalize":          world.Finalize(ctx),
	} {
		if !errors.Is(err, ErrNotBuilt) {
			t.Errorf("%s: got %v, want ErrNotBuilt", name, err)
		}
	}
	if _, err := world.Gather(ctx, 0, nil); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Gather: got %v, want ErrNotBuilt", err)
	}
	c, err := NewCollective(&world, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(ctx, 0, []float32{1}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Collective.AllReduce: got %v, want ErrNotBuilt", err)
	}
}

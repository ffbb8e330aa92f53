//go:build cuda || towerrl_runall

package tape

import (
	"errors"
	"unsafe"
)

// fastBuild: this build may run a program through runall. Builds tagged cuda never do (the
// CUDA engine needs RunAll's service loop), nor builds tagged towerrl_runall, which link no
// gorgonia internals at all: every Run is RunAll.
const fastBuild = false

// errBuild is why this build never takes the fast path.
var errBuild = errors.New("tape: built with the cuda or towerrl_runall tag: every Run is gorgonia's RunAll")

// runall is never called in these builds.
func runall(unsafe.Pointer, chan error, chan struct{}) {
	panic("tape: runall in a cuda or towerrl_runall build")
}

//go:build !cuda && !towerrl_runall

package tape

import "unsafe"

// fastBuild: this build may run a program through runall (see nofast.go for the builds that
// never do).
const fastBuild = true

// errBuild is nil: the build allows the fast path.
var errBuild error

// runall is gorgonia's (*tapeMachine).runall(errChan, doneChan): the loop RunAll starts on its
// own goroutine. It sends exactly once, on errChan or on doneChan.
//
//go:linkname runall gorgonia.org/gorgonia.(*tapeMachine).runall
func runall(m unsafe.Pointer, errChan chan error, doneChan chan struct{})

//go:build !cuda

package tape

import (
	"unsafe"
)

// runall is gorgonia's (*tapeMachine).runall(errChan, doneChan): the loop RunAll starts on its
// own goroutine. It sends exactly once, on errChan or on doneChan.
//
//go:linkname runall gorgonia.org/gorgonia.(*tapeMachine).runall
func runall(m unsafe.Pointer, errChan chan error, doneChan chan struct{})

func fastAllowed() bool { return versionOK() }

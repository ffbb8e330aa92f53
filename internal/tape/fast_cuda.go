//go:build cuda

package tape

import "unsafe"

// runall is never called in CUDA builds: the CUDA engine needs RunAll's service loop.
func runall(unsafe.Pointer, chan error, chan struct{}) { panic("tape: runall in a cuda build") }

func fastAllowed() bool { return false }

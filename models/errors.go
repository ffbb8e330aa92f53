package models

import (
	"errors"
	"fmt"
	"sync"
)

// graphMu serialises graph construction and compilation across all graphs: gorgonia shares
// package-level constant nodes (such as the gradient seed of G.Grad) between graphs and caches
// their hashes lazily, which races when two goroutines build at once.
var graphMu sync.Mutex

var (
	// ErrConfig is wrapped by every error about an invalid Config; the message names the field.
	ErrConfig = errors.New("models: invalid config")
	// ErrShape is wrapped by errors about buffers or tensors of the wrong size or shape.
	ErrShape = errors.New("models: shape mismatch")
	// ErrGraph is wrapped by errors gorgonia reported (or panicked with) while building,
	// compiling or running a graph.
	ErrGraph = errors.New("models: graph")
	// ErrState is wrapped by errors about calling a Policy method at the wrong point of its
	// lifecycle (for example Run before Compile, or LogProb after Compile).
	ErrState = errors.New("models: wrong lifecycle state")
	// ErrCheckpoint is wrapped by every error about a malformed, truncated or corrupt checkpoint.
	ErrCheckpoint = errors.New("models: bad checkpoint")
)

// guard turns a gorgonia panic into an error wrapping ErrGraph. Use as
// `defer guard(&err, "what")` at every API boundary that calls into gorgonia.
func guard(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: gorgonia panicked: %v", ErrGraph, what, r)
	}
}

// Package tape runs gorgonia tape machines on the calling goroutine.
//
// gorgonia's TapeMachine.RunAll (v0.9.18) locks the calling goroutine to its OS thread, starts
// a new goroutine that executes the program, and waits for it on channels. The program then
// runs on another OS thread, and every run costs two thread hand-offs (golang/go#21827): tens
// of µs on a VM (docs/benchmarks.md), and worse when several towers run at once, because the
// hand-offs bounce threads between cores. A Machine runs the same program
// on the goroutine that calls Run instead, through gorgonia's own unexported execution loop
// (reached by go:linkname), when that is exactly what RunAll would do:
//
//   - the build is tagged neither cuda (the CUDA engine feeds RunAll work through channels)
//     nor towerrl_runall (which forces RunAll and links no gorgonia internals);
//   - gorgonia's tape machine is the one this package was written against: in every binary,
//     its structure as reflect sees it (the field names, types and offsets of tapeMachine, its
//     ExternMetadata and its program) is v0.9.18's, and where the binary lists its
//     dependencies (test binaries do not), gorgonia is v0.9.18, unreplaced;
//   - the machine has no batched extern work (ExternMetadata.WorkAvailable is nil);
//   - the graph has no identity (Iop) nodes, whose gradients RunAll applies in closures after
//     the loop.
//
// Otherwise Run is RunAll. Fast reports which path a Machine takes. Results are identical
// either way (the loop is the same code); the package's tests check it bit for bit, and
// check that a machine whose structure differs takes RunAll.
//
// A Machine, like the tape machine it wraps, belongs to one goroutine at a time.
package tape

import (
	"reflect"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// Machine is a gorgonia tape machine with a Run that executes on the calling goroutine where
// that is safe. Like the tape machine, it belongs to one goroutine at a time.
type Machine struct {
	G.VM
	fast unsafe.Pointer // the *gorgonia.tapeMachine when Run drives it directly, else nil
	errc chan error     // runall's error, capacity 1 so it never blocks
	done chan struct{}  // runall's completion, capacity 1
}

// New compiles g into a gorgonia tape machine with opts, as G.NewTapeMachine does (it panics
// where that panics).
func New(g *G.ExprGraph, opts ...G.VMOpt) *Machine { return newMachine(g, fastErr(), opts...) }

// newMachine is New with the fast path refused when refuse is not nil.
func newMachine(g *G.ExprGraph, refuse error, opts ...G.VMOpt) *Machine {
	vm := G.NewTapeMachine(g, opts...)
	m := &Machine{VM: vm}
	if refuse == nil && noExternWork(vm) && !hasIop(g) {
		m.fast = reflect.ValueOf(vm).UnsafePointer()
		m.errc = make(chan error, 1)
		m.done = make(chan struct{}, 1)
	}
	return m
}

// Check returns nil when this binary's Machines may run on the calling goroutine (each one
// still takes RunAll for a graph with identity ops or extern work), else why none does: a
// build tagged cuda or towerrl_runall, or a gorgonia other than the one this package was
// written against. Tests that expect the fast path ask it first.
func Check() error { return fastErr() }

// Fast reports whether Run executes on the calling goroutine (true) or through RunAll.
func (m *Machine) Fast() bool { return m.fast != nil }

// Run executes the program once, like RunAll. Call Reset before running again.
func (m *Machine) Run() error {
	if m.fast == nil {
		return m.VM.RunAll()
	}
	runall(m.fast, m.errc, m.done)
	select {
	case err := <-m.errc:
		return err
	case <-m.done:
		return nil
	}
}

// noExternWork reports whether vm has no batched extern (BLAS or CUDA) work for RunAll to
// service while the program runs.
func noExternWork(vm G.VM) bool {
	w, ok := vm.(interface{ WorkAvailable() <-chan bool })
	return ok && w.WorkAvailable() == nil
}

// hasIop reports whether g holds an identity op, whose gradient RunAll applies after the loop.
func hasIop(g *G.ExprGraph) bool {
	for _, n := range g.AllNodes() {
		if _, ok := n.Op().(G.Iop); ok {
			return true
		}
	}
	return false
}

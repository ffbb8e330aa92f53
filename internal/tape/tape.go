// Package tape runs gorgonia tape machines on the calling goroutine.
//
// gorgonia's TapeMachine.RunAll (v0.9.18) locks the calling goroutine to its OS thread, starts
// a new goroutine that executes the program, and waits for it on channels. The program then
// runs on another OS thread, and every run costs two thread hand-offs (golang/go#21827): about
// 25 µs on the 2-core VM this project is measured on, and worse when several towers run at
// once, because the hand-offs bounce threads between cores. A Machine runs the same program
// on the goroutine that calls Run instead, through gorgonia's own unexported execution loop,
// when that is exactly what RunAll would do:
//
//   - the build is not tagged cuda (the CUDA engine feeds RunAll work through channels);
//   - the gorgonia module is the version whose internals this package was written against;
//   - the machine has no batched extern work (ExternMetadata.WorkAvailable is nil);
//   - the graph has no identity (Iop) nodes, whose gradients RunAll applies in closures after
//     the loop.
//
// Otherwise Run is RunAll. Fast reports which path a Machine takes. Results are identical
// either way (the loop is the same code); the package's tests check it bit for bit.
package tape

import (
	"reflect"
	"runtime/debug"
	"sync"
	"testing"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// gorgoniaVersion is the gorgonia release whose unexported (*tapeMachine).runall the fast path
// calls; any other version takes RunAll.
const gorgoniaVersion = "v0.9.18"

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
func New(g *G.ExprGraph, opts ...G.VMOpt) *Machine {
	vm := G.NewTapeMachine(g, opts...)
	m := &Machine{VM: vm}
	if fastAllowed() && noExternWork(vm) && !hasIop(g) {
		m.fast = reflect.ValueOf(vm).UnsafePointer()
		m.errc = make(chan error, 1)
		m.done = make(chan struct{}, 1)
	}
	return m
}

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

// versionOK reports whether the gorgonia module linked into this binary is gorgoniaVersion,
// unreplaced. Test binaries carry no dependency list; for them TestGoModPinsGorgonia checks
// go.mod instead.
var versionOK = sync.OnceValue(func() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	if len(info.Deps) == 0 {
		return testing.Testing()
	}
	for _, d := range info.Deps {
		if d.Path == "gorgonia.org/gorgonia" {
			return d.Replace == nil && d.Version == gorgoniaVersion
		}
	}
	return false
})

//go:build mujoco && cgo

package mujoco

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// MuJoCo's internal errors, which would end the process under its default handler, come back
// as Go errors: a model file that does not compile, and a step that runs out of MuJoCo's stack.
func TestLibraryErrorsAreErrors(t *testing.T) {
	if _, err := loadModel("bad.xml", []byte("<mujoco><worldbody><body><geom type='sphere'/></body>")); err == nil {
		t.Fatal("a truncated model compiled")
	} else if !strings.Contains(err.Error(), "bad.xml") {
		t.Errorf("error %q does not name the file", err)
	}
	// A stack of 100 numbers holds a free box's steps in the air, not once it lands: mj_step
	// then calls mju_error ("Stack overflow").
	md, err := loadModel("tiny.xml", []byte(`<mujoco><size nstack="100"/><worldbody>
		<body pos="0 0 0.3"><joint type="free"/><geom type="box" size="0.1 0.1 0.1"/></body>
		<geom type="plane" size="1 1 0.1"/></worldbody></mujoco>`))
	if err != nil {
		t.Fatal(err)
	}
	d, err := newData(md)
	if err != nil {
		t.Fatal(err)
	}
	defer d.free()
	ptrs := newDataPtrs([]*data{d, d})
	defer ptrs.free()
	k, err := md.step(ptrs, 0, 2, 500, false)
	if !errors.Is(err, errMuJoCo) || k != 0 || !strings.Contains(err.Error(), "Stack overflow") {
		t.Fatalf("step on an exhausted stack: env %d, %v; want env 0 and MuJoCo's message", k, err)
	}
	// The guard is released and set again: a later call fails the same way instead of jumping
	// into a stale frame.
	if _, err := md.step(ptrs, 1, 1, 500, false); err == nil {
		t.Fatal("the second step succeeded on an exhausted stack")
	}
}

// TestLibraryErrorsAcrossThreads: MuJoCo's message reaches the error however the goroutines
// move between OS threads. The message is thread-local in C; read by a second cgo call, it
// came from whatever thread the goroutine resumed on, and was once empty in make test on a
// loaded machine (TestLibraryErrorsAreErrors). The failed call now copies the message into the
// caller's buffer itself. This test did not make the old code fail on a quiet machine; it holds
// the message under thread hand-offs.
func TestLibraryErrorsAcrossThreads(t *testing.T) {
	md, err := loadModel("tiny.xml", []byte(`<mujoco><size nstack="100"/><worldbody>
		<body pos="0 0 0.3"><joint type="free"/><geom type="box" size="0.1 0.1 0.1"/></body>
		<geom type="plane" size="1 1 0.1"/></worldbody></mujoco>`))
	if err != nil {
		t.Fatal(err)
	}
	// More goroutines than Ps: a goroutine whose P was handed off during a long cgo call
	// waits for one when the call returns, and may then resume on another thread.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const workers, rounds = 8, 40
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			d, err := newData(md)
			if err != nil {
				errs <- err
				return
			}
			defer d.free()
			ptrs := newDataPtrs([]*data{d})
			defer ptrs.free()
			for range rounds {
				_, err := md.step(ptrs, 0, 1, 500, false)
				if err == nil || !strings.Contains(err.Error(), "Stack overflow") {
					errs <- err
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Errorf("step on an exhausted stack: %v; want MuJoCo's message", err)
		}
	}
	if n > 3 {
		t.Errorf("... %d such steps in all", n)
	}
}

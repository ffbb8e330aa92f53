package onnx

import (
	"os"
	goruntime "runtime"
	"testing"
)

// TestReserveProcs: GOMAXPROCS rises to callers + 1 only when it leaves no spare P and the
// GOMAXPROCS environment variable does not set it; the previous value comes back.
func TestReserveProcs(t *testing.T) {
	orig := goruntime.GOMAXPROCS(0)
	t.Cleanup(func() { goruntime.GOMAXPROCS(orig) })
	if v, ok := os.LookupEnv("GOMAXPROCS"); ok { // restored after the test
		t.Setenv("GOMAXPROCS", v)
	}
	os.Unsetenv("GOMAXPROCS")
	for _, c := range []struct {
		procs, callers, want int
		changed              bool
	}{
		{2, 1, 2, false}, // one caller on two Ps: the spare P is there
		{2, 2, 3, true},
		{1, 1, 2, true},
		{2, 4, 5, true},
		{8, 2, 8, false},
		{2, 0, 2, false}, // no callers: nothing to reserve for
	} {
		goruntime.GOMAXPROCS(c.procs)
		was, changed := ReserveProcs(c.callers)
		if got := goruntime.GOMAXPROCS(0); got != c.want || was != c.procs || changed != c.changed {
			t.Errorf("GOMAXPROCS %d, %d callers: now %d, returned (%d, %v); want %d, (%d, %v)",
				c.procs, c.callers, got, was, changed, c.want, c.procs, c.changed)
		}
	}
	t.Setenv("GOMAXPROCS", "2")
	goruntime.GOMAXPROCS(2)
	if _, changed := ReserveProcs(2); changed || goruntime.GOMAXPROCS(0) != 2 {
		t.Errorf("GOMAXPROCS=2 in the environment: ReserveProcs(2) changed it to %d", goruntime.GOMAXPROCS(0))
	}
}

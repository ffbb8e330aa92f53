package onnx

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestKeepGoSignals: a handler a C library installs inside keepGoSignals (as ONNX Runtime's
// CUDA provider does) takes the signal away from Go while it is there, and is replaced by Go's
// again afterwards, so signal.Notify gets the signal.
func TestKeepGoSignals(t *testing.T) {
	got := make(chan os.Signal, 1)
	signal.Notify(got, syscall.SIGUSR1)
	defer signal.Stop(got)
	kill := func() {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	wantErr := errors.New("f's error")
	n, err := keepGoSignals(func() error {
		stealSIGUSR1()
		// Control: while the C handler is in place the signal never reaches Go (otherwise
		// the test could not tell a restore from none).
		kill()
		select {
		case <-got:
			t.Error("the stolen handler did not take SIGUSR1")
		case <-time.After(100 * time.Millisecond):
		}
		return wantErr
	})
	if !errors.Is(err, wantErr) || n != 1 {
		t.Fatalf("keepGoSignals = %d, %v; want 1 restored and f's error", n, err)
	}
	kill()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGUSR1 did not reach signal.Notify after the restore")
	}
	if n, err := keepGoSignals(func() error { return nil }); n != 0 || err != nil {
		t.Fatalf("keepGoSignals with no change = %d, %v", n, err)
	}
}

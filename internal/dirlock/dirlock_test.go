package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTake: a second take of a held folder (another open file description, as another process
// would have) is refused naming this process's PID; after release it succeeds; a removed lock
// file is made again.
func TestTake(t *testing.T) {
	dir := t.TempDir()
	l, err := Take(dir, ".lock")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Take(dir, ".lock")
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) || he.PID != os.Getpid() ||
		!strings.Contains(err.Error(), "locked by process") || he.Path != filepath.Join(dir, ".lock") {
		t.Fatalf("second take: %v", err)
	}
	if err := l.Release(false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".lock")); err != nil {
		t.Fatalf("the lock file went with the release: %v", err)
	}
	l, err = Take(dir, ".lock")
	if err != nil {
		t.Fatalf("take after release: %v", err)
	}
	if err := l.Release(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Release(true) left the lock file: %v", err)
	}
	var none *Lock
	if err := none.Release(true); err != nil {
		t.Fatal(err)
	}
}

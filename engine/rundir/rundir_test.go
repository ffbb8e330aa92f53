package rundir

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDiscardLeavesNothing: a fresh run that failed before its first checkpoint (train --serve
// with its port taken, --out on a full filesystem) removed its own files but left what was
// written beside them (batcher.creds, the NATS store nats/), and the same command was then
// refused: the folder was not empty and held no config.json to resume. Discard removes every
// entry; the folder can be taken again, and one made by the run is removed.
func TestDiscardLeavesNothing(t *testing.T) {
	for _, made := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "run")
		if !made {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		r, err := Create[int](dir, []byte("{}\n"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"batcher.creds", "nats/jetstream/stream/x", "checkpoint/state.ckpt", "events.out.tfevents.1"} {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Discard(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(dir)
		if made && !os.IsNotExist(err) {
			t.Errorf("the folder the run made is still there: %v", err)
		}
		if !made {
			for _, e := range entries {
				if e.Name() != LockFile {
					t.Errorf("left %s", e.Name())
				}
			}
		}
		r, err = Create[int](dir, []byte("{}\n"))
		if err != nil {
			t.Fatalf("the same folder again: %v", err)
		}
		r.Close()
	}
}

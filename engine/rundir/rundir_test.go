package rundir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// TestReadInitPolicy: the policy's SHA-256 is the one sha256sum prints for its bytes (worked
// here for "abc", FIPS 180-2's example), a recorded SHA-256 that differs is
// ErrInitPolicyChanged naming both, and a folder is refused before reading.
func TestReadInitPolicy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.onnx")
	if err := os.WriteFile(path, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	data, sum, err := ReadInitPolicy(path, "")
	if err != nil || string(data) != "abc" || sum != abc {
		t.Fatalf("ReadInitPolicy = %q, %s, %v; want abc, %s", data, sum, err, abc)
	}
	if _, _, err := ReadInitPolicy(path, abc); err != nil {
		t.Fatalf("with the recorded SHA-256: %v", err)
	}
	other := strings.Repeat("0", 64)
	_, _, err = ReadInitPolicy(path, other)
	if !errors.Is(err, ErrInitPolicyChanged) || !strings.Contains(err.Error(), abc) || !strings.Contains(err.Error(), other) {
		t.Fatalf("changed file: %v, want ErrInitPolicyChanged naming both sums", err)
	}
	if _, _, err := ReadInitPolicy(dir, ""); err == nil {
		t.Fatal("a folder was read as a policy")
	}
	if _, err := ReadConfig(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadConfig of a folder without config.json: %v, want fs.ErrNotExist", err)
	}
}

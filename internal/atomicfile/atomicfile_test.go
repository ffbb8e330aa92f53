package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// names lists dir's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFile(t *testing.T) {
	tests := []struct {
		name     string
		previous []byte // nil: no file before
		data     []byte
	}{
		{"new file", nil, []byte("hello\n")},
		{"replaces a longer file", bytes.Repeat([]byte("x"), 1<<16), []byte("short")},
		{"replaces a shorter file", []byte("a"), bytes.Repeat([]byte("yz"), 1<<15)},
		{"empty", []byte("old"), []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.bin")
			if tt.previous != nil {
				if err := os.WriteFile(path, tt.previous, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.data) {
				t.Fatalf("read back %d bytes, want %d", len(got), len(tt.data))
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 { // no umask clears bits of 0600 but the owner's own
				t.Errorf("mode %v, want -rw-------", fi.Mode())
			}
			if diff := cmp.Diff([]string{"f.bin"}, names(t, dir)); diff != "" {
				t.Errorf("folder after the write (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteFailure: whatever fails, the destination keeps its previous content (or stays
// absent), no temporary file is left, and the error names the destination and wraps the cause.
func TestWriteFailure(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name     string
		previous bool
		setup    func(t *testing.T, dir string) string // returns the destination
		write    func(io.Writer) error
		want     error // errors.Is target
	}{
		{
			name:     "write fails after writing part",
			previous: true,
			setup:    func(t *testing.T, dir string) string { return filepath.Join(dir, "f") },
			write: func(w io.Writer) error {
				if _, err := w.Write([]byte("partial new content")); err != nil {
					return err
				}
				return errBoom
			},
			want: errBoom,
		},
		{
			name:  "write fails on a new file",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "f") },
			write: func(io.Writer) error { return errBoom },
			want:  errBoom,
		},
		{
			name:  "folder missing",
			setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "no", "f") },
			write: func(io.Writer) error { return nil },
			want:  fs.ErrNotExist,
		},
		{
			name: "destination is a folder",
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "f")
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(p, "inside"), []byte("kept"), 0o644); err != nil {
					t.Fatal(err)
				}
				return p
			},
			write: func(w io.Writer) error { _, err := w.Write([]byte("x")); return err },
		},
		{
			name:     "write closes the file under Write",
			previous: true,
			setup:    func(t *testing.T, dir string) string { return filepath.Join(dir, "f") },
			write:    func(w io.Writer) error { return w.(io.Closer).Close() },
			want:     fs.ErrClosed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			if tt.previous {
				if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := names(t, dir)
			err := Write(path, 0o644, tt.write)
			if err == nil {
				t.Fatal("Write succeeded")
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v does not wrap %v", err, tt.want)
			}
			if diff := cmp.Diff(before, names(t, dir)); diff != "" {
				t.Errorf("folder changed (-before +after):\n%s", diff)
			}
			if tt.previous {
				if got, err := os.ReadFile(path); err != nil || string(got) != "previous" {
					t.Errorf("destination now %q, %v; want it unchanged", got, err)
				}
			}
		})
	}
}

// TestWritePanic: a panicking write leaves neither a temporary file nor a changed destination,
// and the panic reaches the caller.
func TestWritePanic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the write's panic", r)
			}
		}()
		Write(path, 0o644, func(w io.Writer) error {
			w.Write([]byte("partial"))
			panic("boom")
		})
	}()
	if diff := cmp.Diff([]string{"f"}, names(t, dir)); diff != "" {
		t.Errorf("folder (-want +got):\n%s", diff)
	}
	if got, _ := os.ReadFile(path); string(got) != "previous" {
		t.Errorf("destination now %q", got)
	}
}

func TestWriteEmptyName(t *testing.T) {
	if err := WriteFile("", nil, 0o644); err == nil || !strings.Contains(err.Error(), "empty name") {
		t.Fatalf("WriteFile(\"\"): %v", err)
	}
}

// TestConcurrent: readers racing writers of one path only ever see a whole file, and every
// write's temporary file is gone at the end.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	const size, writers, rounds = 1 << 16, 4, 20
	if err := WriteFile(path, bytes.Repeat([]byte{'a'}, size), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				data := bytes.Repeat([]byte{byte('b' + (w*rounds+r)%24)}, size)
				if err := WriteFile(path, data, 0o644); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil {
				errs <- err
				return
			}
			if len(got) != size || bytes.Count(got, got[:1]) != size {
				errs <- fmt.Errorf("read a torn file: %d bytes, %d of them %q", len(got), bytes.Count(got, got[:1]), got[:1])
				return
			}
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if diff := cmp.Diff([]string{"f"}, names(t, dir)); diff != "" {
		t.Errorf("folder (-want +got):\n%s", diff)
	}
}

func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	files := []string{
		".policy.onnx.tmp-123",    // a leftover of Write (os.CreateTemp's suffix too)
		".state.ckpt.tmp-4294967", // likewise
		"policy.onnx",             // a destination
		".lock",                   // hidden, not a temporary file
		".x.tmp-abc",              // not Write's suffix
		"a.tmp-123",               // not hidden
		".tmp-123",                // no destination name
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".d.tmp-1"), 0o755); err != nil { // a folder stays
		t.Fatal(err)
	}
	if err := RemoveTemps(dir); err != nil {
		t.Fatal(err)
	}
	want := []string{".d.tmp-1", ".lock", ".tmp-123", ".x.tmp-abc", "a.tmp-123", "policy.onnx"}
	if diff := cmp.Diff(want, names(t, dir)); diff != "" {
		t.Errorf("left (-want +got):\n%s", diff)
	}
	if err := RemoveTemps(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing folder: %v", err)
	}
}

// TestTempNameRecognised: the temporary files Write makes are the ones RemoveTemps removes.
func TestTempNameRecognised(t *testing.T) {
	dir := t.TempDir()
	var seen []string
	err := Write(filepath.Join(dir, "out.npy"), 0o644, func(io.Writer) error {
		seen = names(t, dir)
		return RemoveTemps(dir)
	})
	if len(seen) != 1 || !isTemp(seen[0]) || !strings.HasPrefix(seen[0], ".out.npy.tmp-") {
		t.Fatalf("temporary file while writing: %v", seen)
	}
	// RemoveTemps removed the live temporary file (which is why callers must own the
	// folder): the write then fails and nothing is created.
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write after its temporary file was removed: %v", err)
	}
	if got := names(t, dir); len(got) != 0 {
		t.Errorf("folder holds %v", got)
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if err := SyncDir(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("SyncDir(missing): %v", err)
	}
}

// TestIsTempOf: only the temporary-file names Write makes for that destination.
func TestIsTempOf(t *testing.T) {
	for _, tc := range []struct {
		name, base string
		want       bool
	}{
		{".config.json.tmp-2990714932", "config.json", true},
		{".config.json.tmp-", "config.json", false},
		{".config.json.tmp-12a", "config.json", false},
		{".policy.onnx.tmp-5", "config.json", false},
		{"config.json.tmp-5", "config.json", false},
		{".x.config.json.tmp-5", "config.json", false},
	} {
		if got := IsTempOf(tc.name, tc.base); got != tc.want {
			t.Errorf("IsTempOf(%q, %q) = %v, want %v", tc.name, tc.base, got, tc.want)
		}
	}
}

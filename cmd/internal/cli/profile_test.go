package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartProfile writes both profiles, and refuses a folder that holds one already without
// touching it.
func TestStartProfile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prof")
	stop, err := StartProfile(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for i := range 1_000_000 {
		sum += i % 7
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CPUProfile, HeapProfile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v (size %v)", f, err, st)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, CPUProfile))
	if _, err := StartProfile(dir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second profile into the same folder: %v, want a refusal", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CPUProfile))
	if string(before) != string(after) {
		t.Fatal("the refused profile changed the existing one")
	}
	_ = sum
}

package onnx

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// childEnv marks a test binary started by TestLibraryErrors to attempt one library load.
const childEnv = "TOWERRL_TEST_LOAD_CHILD"

// TestLoadChild is the child side of TestLibraryErrors: it loads the library named by
// TOWERRL_TEST_LOAD_CHILD_PATH (empty: the default search) and prints the outcome.
func TestLoadChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		return // only meaningful in a child process
	}
	err := Init(os.Getenv(childEnv + "_PATH"))
	fmt.Printf("\nRESULT errors.Is(ErrLibrary)=%v: %v\n", errors.Is(err, ErrLibrary), err)
}

// compile builds a shared library from C source with the system C compiler (cgo needs one).
func compile(t *testing.T, src, out string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("%s -shared %s: %v\n%s", cc, src, err, b)
	}
	return out
}

// TestLibraryErrors checks the message for each way the ONNX Runtime library can be missing
// or wrong. Each case runs in a fresh process: a process loads ONNX Runtime once.
func TestLibraryErrors(t *testing.T) {
	dir := t.TempDir()
	old := compile(t, "testdata/fakeort.c", filepath.Join(dir, "libold.so"))
	src := filepath.Join(dir, "plain.c")
	os.WriteFile(src, []byte("int towerrl_not_ort = 1;\n"), 0o644)
	plain := compile(t, src, filepath.Join(dir, "libplain.so"))
	text := filepath.Join(dir, "libtext.so")
	os.WriteFile(text, []byte("not a library\n"), 0o644)
	emptyCache := filepath.Join(dir, "cache")

	for _, tc := range []struct {
		name string
		path string   // configured path
		env  []string // extra environment
		want []string
	}{
		{"configured path missing", filepath.Join(dir, "nope.so"), nil, []string{"from config", "nope.so not found"}},
		{"env path missing", "", []string{LibraryEnv + "=" + filepath.Join(dir, "gone.so")}, []string{"from " + LibraryEnv, "gone.so not found"}},
		{"cache empty", "", []string{LibraryEnv + "=", "XDG_CACHE_HOME=" + emptyCache}, []string{"from cache", emptyCache, "make setup"}},
		{"not a shared library", text, nil, []string{"cannot load", "libtext.so"}},
		{"not ONNX Runtime", plain, nil, []string{"libplain.so is not an ONNX Runtime library"}},
		{"wrong version", old, nil, []string{"ONNX Runtime 1.10.0", "C API version 29", "needs ONNX Runtime 1.29.0 or newer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLoadChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"=1", childEnv+"_PATH="+tc.path)
			cmd.Env = append(cmd.Env, tc.env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child failed (a crash is a bug): %v\n%s", err, out)
			}
			s := string(out)
			i := strings.Index(s, "RESULT ")
			if i < 0 {
				t.Fatalf("child printed no result:\n%s", s)
			}
			line := s[i:]
			if !strings.HasPrefix(line, "RESULT errors.Is(ErrLibrary)=true") {
				t.Errorf("not an ErrLibrary: %s", line)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("message does not mention %q:\n%s", w, line)
				}
			}
		})
	}
}

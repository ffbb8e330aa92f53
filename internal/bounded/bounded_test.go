package bounded

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadFileRefuses: /dev/zero and /dev/urandom (a read that never ends: the defect's
// "fatal error: out of memory" after 7.7 GB), a FIFO with no writer (an open that waits for
// ever), a folder and a file past the limit are refused at once, naming the path and why; a
// regular file within the limit is read whole.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.onnx")
	if err := os.WriteFile(big, make([]byte, 2048), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
		text string
	}{
		{"/dev/zero", ErrNotRegular, "a character device"},
		{"/dev/urandom", ErrNotRegular, "a character device"},
		{fifo, ErrNotRegular, "a FIFO"},
		{dir, ErrNotRegular, "a folder"},
		{big, ErrTooLarge, "2.0 KiB, more than the 1.0 KiB"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := ReadFile("--init-policy", tc.path, 1024)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.text) ||
				!strings.HasPrefix(err.Error(), "--init-policy") {
				t.Errorf("%s: %v; want %v saying %q", tc.path, err, tc.want, tc.text)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFile still waiting after 5 s", tc.path)
		}
	}
	data, err := ReadFile("--init-policy", big, 2048)
	if err != nil || len(data) != 2048 {
		t.Fatalf("a file at the limit: %d bytes, %v", len(data), err)
	}
	if _, err := ReadFile("--init-policy", filepath.Join(dir, "none"), 1024); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

// TestCheck: sizes within the memory pass; past it, or overflowing, an ErrTooLarge error
// names what, the size and the memory.
func TestCheck(t *testing.T) {
	if err := Check("a buffer", 1<<20, "ask for less"); err != nil {
		t.Fatal(err)
	}
	err := Check("--envs 5000000: the envs' states", 1<<62, "use fewer envs")
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--envs 5000000") || !strings.Contains(err.Error(), "4.0 EiB") ||
		!strings.Contains(err.Error(), "use fewer envs") {
		t.Fatalf("4 EiB: %v", err)
	}
	if err := Check("x", Product(1<<40, 1<<40), "less"); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "2^63") {
		t.Fatalf("an overflowing product: %v", err)
	}
	for _, tc := range []struct {
		f    []int64
		want int64
	}{{[]int64{3, 4, 5}, 60}, {[]int64{0, math.MaxInt64}, 0}, {[]int64{math.MaxInt64, 2}, -1}, {[]int64{-1, 2}, -1}, {nil, 1}} {
		if got := Product(tc.f...); got != tc.want {
			t.Errorf("Product(%v) = %d, want %d", tc.f, got, tc.want)
		}
	}
}

func TestParseMemAvailable(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int64
		err  bool
	}{
		{"MemTotal:       32774756 kB\nMemFree:         1234 kB\nMemAvailable:   24108080 kB\n", 24108080 * 1024, false},
		{"MemTotal:       32774756 kB\n", 0, true},
		{"MemAvailable:   lots kB\n", 0, true},
		{"MemAvailable:   12 MB\n", 0, true},
		{"MemAvailable:   99999999999999999 kB\n", 0, true},
	} {
		got, err := parseMemAvailable(strings.NewReader(tc.text))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%q: got %d, %v; want %d (error %v)", tc.text, got, err, tc.want, tc.err)
		}
	}
	if m := Available(); m.Bytes <= 0 || m.Source == "" {
		t.Errorf("Available() = %+v", m)
	}
	for n, want := range map[int64]string{512: "512 B", 1536: "1.5 KiB", 4 << 40: "4.0 TiB", math.MaxInt64: "8.0 EiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestAvailableCgroup: in a container, what the memory cgroup leaves (limit less usage, v2
// then v1) lowers MemAvailable; "max" and v1's huge number mean no limit.
func TestAvailableCgroup(t *testing.T) {
	meminfo := "MemTotal: 32000000 kB\nMemAvailable:   8000000 kB\n"
	for _, tc := range []struct {
		files  map[string]string
		want   int64
		source string
	}{
		{map[string]string{}, 8000000 * 1024, "MemAvailable"},
		{map[string]string{"/sys/fs/cgroup/memory.max": "2147483648\n", "/sys/fs/cgroup/memory.current": "1073741824\n"}, 1 << 30, "memory.max"},
		{map[string]string{"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/memory.current": "1073741824\n"}, 8000000 * 1024, "MemAvailable"},
		{map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712", "/sys/fs/cgroup/memory/memory.usage_in_bytes": "5"}, 8000000 * 1024, "MemAvailable"},
		{map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1000", "/sys/fs/cgroup/memory/memory.usage_in_bytes": "2000"}, 0, "limit_in_bytes"},
	} {
		tc.files["/proc/meminfo"] = meminfo
		m := available(func(p string) ([]byte, error) {
			if s, ok := tc.files[p]; ok {
				return []byte(s), nil
			}
			return nil, os.ErrNotExist
		})
		if want := min(tc.want, debug.SetMemoryLimit(-1)); m.Bytes != want || (want == tc.want && !strings.Contains(m.Source, tc.source)) {
			t.Errorf("%v: %+v, want %d from %s", tc.files, m, tc.want, tc.source)
		}
	}
}

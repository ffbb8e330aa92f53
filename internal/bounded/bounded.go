// Package bounded is the one path by which towerrl's tools take in what a user names: a file
// is read only when it is a regular file of a bounded size that fits in memory, and a buffer a
// flag or a config asks for is checked against the memory available before it is allocated.
// A typo-sized input (--init-policy /dev/zero, a FIFO, --envs 5000000) then gives an error that
// names it and the limit, never Go's "fatal error: out of memory" or a read that never ends.
//
// The memory available is MemAvailable in /proc/meminfo, lowered to what the process's memory
// cgroup leaves (a container's limit less its usage) and to the Go runtime's memory limit
// (GOMEMLIMIT) when they are lower; every function is safe for concurrent use. (Package
// batcher's memory checks read it through Available.)
package bounded

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// ErrTooLarge is wrapped by the errors of inputs larger than their limit or the memory.
var ErrTooLarge = errors.New("too large")

// ErrNotRegular is wrapped by the errors of paths that are not regular files (a device such
// as /dev/zero, a FIFO, a socket, a folder).
var ErrNotRegular = errors.New("not a regular file")

// Limits on the files the tools read, besides the memory available.
const (
	// ModelLimit is an ONNX model's: protobuf messages are at most 2 GiB.
	ModelLimit = 2 << 30
	// ConfigLimit is a JSON config's, a preset's or config.json's: a config of every field
	// with long names is a few KiB.
	ConfigLimit = 1 << 20
)

// memoryFallback is the memory assumed available when /proc/meminfo cannot be read (a system
// other than Linux, or /proc not mounted).
const memoryFallback = 16 << 30

// Memory is the host memory a process may still allocate, and where that figure comes from.
type Memory struct {
	Bytes  int64
	Source string // "MemAvailable in /proc/meminfo", "the Go memory limit, GOMEMLIMIT", ...
}

// Available reads MemAvailable from /proc/meminfo (falling back to 16 GiB when it cannot be
// read), lowered to what the memory cgroup leaves and to the Go runtime's memory limit.
func Available() Memory { return available(os.ReadFile) }

// available is Available reading the files through read.
func available(read func(string) ([]byte, error)) Memory {
	m := Memory{memoryFallback, fmt.Sprintf("assumed: /proc/meminfo is unreadable, so %s", FormatBytes(memoryFallback))}
	if b, err := read("/proc/meminfo"); err == nil {
		if n, err := parseMemAvailable(bytes.NewReader(b)); err == nil {
			m = Memory{n, "MemAvailable in /proc/meminfo"}
		}
	}
	// A container's memory cgroup (v2, then v1) may leave less than the host has.
	for _, c := range []struct{ limit, usage string }{
		{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
	} {
		limit, ok := readInt(read, c.limit) // "max" (no limit) does not parse
		usage, ok2 := readInt(read, c.usage)
		if !ok || !ok2 || limit >= 1<<60 { // v1 writes a huge number for no limit
			continue
		}
		if left := limit - min(usage, limit); left < m.Bytes {
			m = Memory{left, "the cgroup's " + c.limit + " less " + c.usage}
		}
		break
	}
	if limit := debug.SetMemoryLimit(-1); limit < m.Bytes {
		m = Memory{limit, "the Go memory limit, GOMEMLIMIT"}
	}
	return m
}

// readInt reads a file holding one non-negative integer.
func readInt(read func(string) ([]byte, error), path string) (int64, bool) {
	b, err := read(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil && n >= 0
}

// Check returns nil when n bytes fit in the memory available, else an [ErrTooLarge] error
// naming what (say, `--envs 5000000: the envs' states`), the size, the memory and advice.
// A negative n (a product that overflowed) is refused too.
func Check(what string, n int64, advice string) error {
	if n < 0 {
		return fmt.Errorf("%s: %w: needs more than 2^63 bytes; %s", what, ErrTooLarge, advice)
	}
	m := Available()
	if n <= m.Bytes {
		return nil
	}
	return fmt.Errorf("%s: %w: needs %s, more than the %s available (%s); %s", what, ErrTooLarge, FormatBytes(n),
		FormatBytes(m.Bytes), m.Source, advice)
}

// Product multiplies sizes (element counts, bytes per element), returning -1 when the product
// overflows an int64 or a factor is negative: Check refuses it.
func Product(factors ...int64) int64 {
	p := int64(1)
	for _, f := range factors {
		if f < 0 {
			return -1
		}
		if f != 0 && p > math.MaxInt64/f {
			return -1
		}
		p *= f
	}
	return p
}

// ReadFile reads the file at path when it is a regular file of at most limit bytes that fits
// in the memory available. Anything else is refused before a byte is read: a device, FIFO,
// socket or folder ([ErrNotRegular]; a FIFO is opened without waiting for a writer), a file
// larger than limit or than the memory ([ErrTooLarge]). what names the file in errors
// ("--init-policy", "config.json"); errors from the file system keep their *fs.PathError.
func ReadFile(what, path string, limit int64) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: %w (it is %s): name an ONNX, JSON or other file saved on disk", what, path, ErrNotRegular, kind(st.Mode()))
	}
	size := st.Size()
	if size > limit {
		return nil, fmt.Errorf("%s %s: %w: the file holds %s, more than the %s such a file may hold; is it the file you meant?",
			what, path, ErrTooLarge, FormatBytes(size), FormatBytes(limit))
	}
	if err := Check(fmt.Sprintf("%s %s", what, path), size, "free memory, or name a smaller file"); err != nil {
		return nil, err
	}
	// Regular files block no reads; the flag only matters for what it kept from waiting.
	data := make([]byte, size)
	n, err := io.ReadFull(f, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	data = data[:n] // the file shrank meanwhile: what is there
	// A file that grew meanwhile is read up to its size at the Stat: no more than the limit.
	return data, nil
}

// kind names a file mode's type for errors.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	default:
		return "not a regular file: " + m.Type().String()
	}
}

// parseMemAvailable reads the MemAvailable line ("MemAvailable:   23456789 kB") of a
// /proc/meminfo listing, in bytes.
func parseMemAvailable(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected MemAvailable line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > math.MaxInt64/1024 {
			return 0, fmt.Errorf("unexpected MemAvailable line %q", sc.Text())
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no MemAvailable line (Linux before 3.14?)")
}

// FormatBytes writes n bytes with a binary unit: "512 B", "1.5 KiB", "4.0 TiB".
func FormatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 5 {
		v, unit = v/1024, unit+1
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[unit])
}

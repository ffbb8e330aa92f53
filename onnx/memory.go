package onnx

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryFallback is the memory assumed available when /proc/meminfo cannot be read (a
// system other than Linux, or /proc not mounted).
const memoryFallback = 16 << 30

// memory is the host memory a Session may allocate, and where that figure comes from.
type memory struct {
	avail  int64
	source string
}

// availableMemory reads MemAvailable from /proc/meminfo (falling back to [memoryFallback]),
// lowered to the Go runtime's memory limit (GOMEMLIMIT) when one is set.
func availableMemory() memory {
	m := memory{memoryFallback, fmt.Sprintf("assumed: /proc/meminfo is unreadable, so %s", formatBytes(memoryFallback))}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		n, err := parseMemAvailable(f)
		f.Close()
		if err == nil {
			m = memory{n, "MemAvailable in /proc/meminfo"}
		}
	}
	if limit := debug.SetMemoryLimit(-1); limit < m.avail {
		m = memory{limit, "the Go memory limit, GOMEMLIMIT"}
	}
	return m
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

// formatBytes writes n bytes with a binary unit: "512 B", "1.5 KiB", "4.0 TiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 5 {
		v, unit = v/1024, unit+1
	}
	return fmt.Sprintf("%.1f %s", v, [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[unit])
}

package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// Profile files StartProfile writes in its folder.
const (
	CPUProfile  = "cpu.pprof"
	HeapProfile = "heap.pprof"
)

// StartProfile starts a CPU profile of the process into dir/cpu.pprof (dir is created when
// missing) and returns stop, which ends it and writes the heap profile dir/heap.pprof. Either
// file existing already is an error, before anything is written: a profile never replaces
// another. Read them with `go tool pprof BINARY DIR/cpu.pprof`.
func StartProfile(dir string) (stop func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	cpuPath, heapPath := filepath.Join(dir, CPUProfile), filepath.Join(dir, HeapProfile)
	for _, p := range []string{cpuPath, heapPath} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("--profile: %s exists; give another folder (profiles are never overwritten)", p)
		}
	}
	f, err := os.OpenFile(cpuPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("--profile: %w", err), f.Close(), os.Remove(cpuPath))
	}
	return func() error {
		pprof.StopCPUProfile()
		errs := []error{f.Close()}
		h, err := os.OpenFile(heapPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("--profile: %w", err))...)
		}
		errs = append(errs, pprof.WriteHeapProfile(h), h.Close())
		return errors.Join(errs...)
	}, nil
}

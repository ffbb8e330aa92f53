//go:build !unix

package dirlock

import "fmt"

// Lock is a held folder lock.
type Lock struct{}

// Take needs flock(2), which only Unix systems have.
func Take(dir, name string) (*Lock, error) {
	return nil, fmt.Errorf("locking %s needs flock(2), a Unix system call: run on Linux or macOS", dir)
}

// Release does nothing.
func (l *Lock) Release(bool) error { return nil }

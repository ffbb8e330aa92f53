//go:build !unix

package batcher

import "fmt"

type dirLock struct{}

// lockDir needs flock(2), which only Unix systems have.
func lockDir(dir string) (*dirLock, error) {
	return nil, fmt.Errorf("batcher: locking the output folder %s needs flock(2), a Unix system call: write datasets on Linux or macOS", dir)
}

func (l *dirLock) unlock(bool) error { return nil }

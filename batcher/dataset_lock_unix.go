//go:build unix

package batcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dirLock is an exclusive flock(2) on DIR/.lock, held for a writer's life. The file holds the
// holder's PID so that a refused writer can name it. flock locks belong to the open file
// description, so two opens in one process exclude each other as two processes do, and the
// kernel drops the lock when its holder dies, however it dies.
type dirLock struct {
	f *os.File
}

// lockDir takes DIR/.lock without waiting. When another writer holds it the error wraps
// ErrDatasetLocked and names that writer's PID.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockName)
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("batcher: output folder %s is not writable: %w", dir, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder := readHolder(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s is locked by %s (%s); wait for it to finish, or write into another folder",
					ErrDatasetLocked, dir, holder, path)
			}
			return nil, fmt.Errorf("batcher: locking %s: %w", path, err)
		}
		// The lock is on the file we opened; a writer that removed .lock (an empty folder
		// it created) between our open and flock leaves us holding a lock nobody else sees.
		if same, err := samePath(f, path); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("batcher: locking %s: %w", path, err)
			}
			continue
		}
		if err := f.Truncate(0); err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("batcher: writing the PID into %s: %w", path, err)
		}
		return &dirLock{f: f}, nil
	}
	return nil, fmt.Errorf("%w: %s keeps being removed while this writer takes it", ErrDatasetLocked, path)
}

// readHolder reads the PID a lock's holder wrote, as words for an error.
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && pid > 0 {
		return "another writer, PID " + strconv.Itoa(pid)
	}
	return "another writer (it has not written its PID yet)"
}

func samePath(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

// unlock releases the lock; removeFile also removes DIR/.lock first (a folder being removed).
func (l *dirLock) unlock(removeFile bool) error {
	if removeFile {
		os.Remove(l.f.Name())
	}
	return l.f.Close()
}

//go:build unix

package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Lock is a held folder lock.
type Lock struct{ f *os.File }

// Take takes dir's lock file (named name) without waiting, creating it if needed, and writes
// this process's PID into it. When another writer holds it the error is a *HeldError.
func Take(dir, name string) (*Lock, error) {
	path := filepath.Join(dir, name)
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			pid := readPID(f)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, &HeldError{Dir: dir, Path: path, PID: pid}
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		// The lock is on the file we opened; a writer that removed the lock file (a folder it
		// is removing) between our open and flock leaves us holding a lock nobody else sees.
		if same, err := samePath(f, path); err != nil || !same {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("locking %s: %w", path, err)
			}
			continue
		}
		if err := f.Truncate(0); err == nil {
			_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("writing the PID into %s: %w", path, err)
		}
		return &Lock{f: f}, nil
	}
	return nil, fmt.Errorf("locking %s: it keeps being removed while this writer takes it", path)
}

// readPID reads the PID a lock's holder wrote; 0 when there is none yet.
func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && pid > 0 {
		return pid
	}
	return 0
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

// Release drops the lock; with removeFile it first removes the lock file (the folder is being
// removed). The file otherwise stays: it belongs to the folder. Release of a nil Lock does
// nothing.
func (l *Lock) Release(removeFile bool) error {
	if l == nil {
		return nil
	}
	if removeFile {
		os.Remove(l.f.Name())
	}
	return l.f.Close()
}

// Package dirlock holds folders exclusively for one writer at a time: an flock(2) on a lock
// file inside the folder, held for the writer's life and dropped by the kernel when the
// writer dies, however it dies. The file holds the holder's PID, so a refused writer can be
// told who holds the folder. flock locks belong to the open file description, so two takes in
// one process exclude each other as two processes do.
//
// Run directories (engine) and datasets (batcher) use it; each words its own refusal from
// the *HeldError.
package dirlock

import (
	"errors"
	"fmt"
)

// ErrHeld is wrapped by the error of a Take refused because another writer holds the lock.
var ErrHeld = errors.New("dirlock: the folder is held by another writer")

// HeldError says who holds a folder's lock.
type HeldError struct {
	Dir, Path string // the folder and its lock file
	PID       int    // the holder's process ID; 0 when it has not written it yet
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is locked by %s (%s)", e.Dir, e.Holder(), e.Path)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Holder names the holder in words: "process N", or "another process" before it wrote its
// PID.
func (e *HeldError) Holder() string {
	if e.PID > 0 {
		return fmt.Sprintf("process %d", e.PID)
	}
	return "another process (it has not written its PID yet)"
}

// Package atomicfile replaces a file all at once: a reader (or the next run after a crash)
// sees either the previous file or the complete new one, never a torn or partial one.
//
// A write goes to a temporary file in the destination's folder, named ".NAME.tmp-RANDOM",
// which is synced, closed and renamed over the destination; the folder is then synced so
// that the rename itself survives a crash. On any error, and if the caller's function
// panics, the temporary file is removed and the destination is left as it was. The
// temporary file lives in the same folder because a rename is atomic only within one file
// system.
//
// A process killed between creating and renaming the temporary file leaves it behind;
// [RemoveTemps] deletes such leftovers and is for a caller that owns the folder (it holds
// the folder's lock), since it would also remove the temporary file of a write under way.
//
// The functions are safe for concurrent use: concurrent writes to one path each produce a
// whole file, and the last rename wins.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// tempMarker sits between a destination's name and the random suffix of its temporary files.
const tempMarker = ".tmp-"

// WriteFile writes data to path atomically. Like [os.WriteFile], the file gets perm (before
// the umask); it does so even when it replaces a file with other permissions, and a
// symbolic link at path is replaced by the file, not followed.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes what write writes to path atomically (see [WriteFile] for perm). write gets
// the temporary file, unbuffered; when it returns an error, path is left as it was and the
// error is returned wrapped, naming path. A write that must give up on cancellation checks
// its context and returns ctx.Err().
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	if path == "" {
		return errors.New("atomicfile: writing a file with an empty name")
	}
	dir := filepath.Dir(path)
	f, err := createTemp(dir, filepath.Base(path), perm)
	if err != nil {
		return fmt.Errorf("atomicfile: writing %s: creating a temporary file in %s: %w", path, dir, err)
	}
	renamed := false
	defer func() { // also runs when write panics
		if !renamed {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("atomicfile: %s not written (any previous file is unchanged): %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("atomicfile: %s not written (any previous file is unchanged): syncing: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("atomicfile: %s not written (any previous file is unchanged): closing: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("atomicfile: %s not written (any previous file is unchanged): %w", path, err)
	}
	renamed = true
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("atomicfile: %s is written, but a crash may still undo it: %w", path, err)
	}
	return nil
}

// createTemp creates ".NAME.tmp-RANDOM" in dir with perm, as os.CreateTemp does with 0600.
func createTemp(dir, name string, perm fs.FileMode) (*os.File, error) {
	prefix := filepath.Join(dir, "."+name+tempMarker)
	for range 10000 {
		f, err := os.OpenFile(prefix+strconv.FormatUint(uint64(rand.Uint32()), 10), os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no free name %s*: %w", prefix, fs.ErrExist)
}

// SyncDir makes the renames and removals done in dir durable (fsync of the folder). On
// Windows, which cannot sync a folder, and on file systems that do not support it, it does
// nothing.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: syncing folder %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("atomicfile: syncing folder %s: %w", dir, err)
	}
	return nil
}

// RemoveTemps removes the temporary files that writes into dir left when their process was
// killed. Call it only while no other write into dir can be under way (for example while
// holding the folder's lock): it cannot tell a leftover from the temporary file of a live
// write.
func RemoveTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("atomicfile: removing temporary files: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !isTemp(e.Name()) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("atomicfile: removing a leftover temporary file: %w", err))
		}
	}
	return errors.Join(errs...)
}

// isTemp reports whether name (a base name) is that of a temporary file [Write] creates:
// ".NAME.tmp-" followed by decimal digits (os.CreateTemp's suffix, which older writers used).
// IsTempOf reports whether name (a file name, no folder) is a temporary file a write of a file
// named base made: one its process left behind if it was killed mid-write.
func IsTempOf(name, base string) bool {
	return strings.HasPrefix(name, "."+base+tempMarker) && isTemp(name)
}

func isTemp(name string) bool {
	i := strings.LastIndex(name, tempMarker)
	if i < 2 || name[0] != '.' || i+len(tempMarker) == len(name) {
		return false
	}
	for _, c := range name[i+len(tempMarker):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

package engine

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/internal/atomicfile"
	"github.com/towerrl/towerrl/internal/dirlock"
)

// ErrRunDir is wrapped by errors about a run directory that cannot be used: not empty, locked
// by another process, or holding another run's files.
var ErrRunDir = errors.New("engine: run directory")

// The files of a run directory. Train creates every one of them; nothing else is written there.
const (
	configFile  = "config.json"
	metricsFile = "metrics.jsonl"
	policyFile  = "policy.onnx"
	curveFile   = "curve.png"
	trainedFile = "policy_with_critic.onnx"
	lockFile    = ".lock"
)

// checkpointFile is the checkpoint's path inside a run directory.
var checkpointFile = filepath.Join("checkpoint", "state.ckpt")

// runDir writes a run directory: config.json at the start, then after every iteration a line of
// metrics.jsonl and the latest policy.onnx (written under a temporary name, then renamed). It
// holds the directory's lock (an exclusive flock on .lock) from creation to close, so no other
// train or resume writes into the directory meanwhile.
type runDir struct {
	dir     string
	created bool // Train made the folder
	// resumable: a checkpoint exists. A fresh run that fails before its first checkpoint (a
	// policy that does not fit, a bad flag) removes what it wrote, so the same command can be
	// run again once fixed.
	resumable bool
	lock      *dirlock.Lock
	metrics   *os.File
	history   []Metrics // for the learning curve
}

// lockRunDir takes dir's exclusive lock (internal/dirlock), or says which process holds it.
func lockRunDir(dir string) (*dirlock.Lock, error) {
	l, err := dirlock.Take(dir, lockFile)
	var held *dirlock.HeldError
	switch {
	case errors.As(err, &held):
		return nil, fmt.Errorf("%w %s is in use by %s (it holds %s); wait for it to finish or stop it", ErrRunDir, dir, held.Holder(), held.Path)
	case err != nil:
		return nil, fmt.Errorf("%w %s: %v", ErrRunDir, dir, err)
	}
	return l, nil
}

// newRunDir makes the run directory of a fresh run. dir must not exist or be empty: train never
// writes over files it did not create, so a folder holding anything else (the user's own
// policy.onnx, another run) is refused before anything is written.
func newRunDir(dir string, cfg Config) (_ *runDir, err error) {
	if dir == "" {
		return &runDir{}, nil
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	if err := checkEmpty(dir); err != nil {
		return nil, err
	}
	r := &runDir{dir: dir, created: errors.Is(statErr, os.ErrNotExist)}
	if r.lock, err = lockRunDir(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.close())
		}
	}()
	// Another process may have created the folder's files between the check and the lock.
	if err := checkEmpty(dir); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, configFile), append(b, '\n')); err != nil {
		return nil, err
	}
	if r.metrics, err = os.OpenFile(filepath.Join(dir, metricsFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	return r, nil
}

// checkEmpty refuses a folder holding anything but a lock file nobody holds.
func checkEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != lockFile {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil
	}
	if slices.Contains(names, configFile) && slices.Contains(names, metricsFile) {
		return fmt.Errorf("%w %s already holds a run (config.json, metrics.jsonl); continue it with --resume %s, or choose another --out",
			ErrRunDir, dir, dir)
	}
	shown := names
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return fmt.Errorf("%w %s is not empty (it holds %s); a new run goes into a new or empty folder, so that no file train did not create is overwritten: choose another --out",
		ErrRunDir, dir, strings.Join(shown, ", "))
}

// removeTemps deletes the temporary files a killed process left behind (internal/atomicfile's,
// which config.json, policy.onnx and the checkpoints are written through) in dir and its
// checkpoint folder. The caller holds the run's lock.
func removeTemps(dir string) error {
	var errs []error
	for _, d := range []string{dir, filepath.Join(dir, filepath.Dir(checkpointFile))} {
		if err := atomicfile.RemoveTemps(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err) // no checkpoint folder yet: nothing to remove
		}
	}
	return errors.Join(errs...)
}

// openRunDir reopens a run directory to resume after iteration iterations: metrics.jsonl keeps
// its first iteration lines (later ones are dropped) and they seed the learning curve. The
// caller holds the lock and passes it in; the runDir owns it from then on.
func openRunDir(dir string, lock *dirlock.Lock, iterations int) (*runDir, error) {
	path := filepath.Join(dir, metricsFile)
	data, err := os.ReadFile(path)
	if err != nil && !(errors.Is(err, os.ErrNotExist) && iterations == 0) {
		return nil, fmt.Errorf("engine: resuming: %w", err)
	}
	r := &runDir{dir: dir}
	keep := 0
	for line := range bytes.Lines(data) {
		if len(r.history) == iterations {
			break
		}
		var m Metrics
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("engine: resuming: %s line %d: %w", path, len(r.history)+1, err)
		}
		r.history = append(r.history, m)
		keep += len(line)
	}
	if len(r.history) < iterations {
		return nil, fmt.Errorf("engine: resuming: %s has %d lines, the checkpoint is at iteration %d", path, len(r.history), iterations)
	}
	if r.metrics, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("engine: resuming: %w", err)
	}
	if err := r.metrics.Truncate(int64(keep)); err != nil {
		r.metrics.Close()
		return nil, fmt.Errorf("engine: resuming: %w", err)
	}
	r.lock, r.resumable = lock, true
	return r, nil
}

func (r *runDir) policyPath() string {
	if r.dir == "" {
		return ""
	}
	return filepath.Join(r.dir, policyFile)
}

// metricsLine appends m to metrics.jsonl.
func (r *runDir) metricsLine(m Metrics) error {
	if r.dir == "" {
		return nil
	}
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := r.metrics.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("engine: writing metrics: %w", err)
	}
	r.history = append(r.history, m)
	return nil
}

// policy writes policy.onnx, and trained, when not nil, as policy_with_critic.onnx (the graph
// with the new critic a value-less policy was given).
func (r *runDir) policy(model, trained []byte) error {
	if r.dir == "" {
		return nil
	}
	if trained != nil {
		if err := writeFile(filepath.Join(r.dir, trainedFile), trained); err != nil {
			return err
		}
	}
	return writeFile(r.policyPath(), model)
}

// curve draws curve.png from the iterations of this process with plot, when given.
func (r *runDir) curve(plot func(path, title string, ms []Metrics) error, title string) (string, error) {
	if r.dir == "" || plot == nil {
		return "", nil
	}
	path := filepath.Join(r.dir, curveFile)
	return path, plot(path, title, r.history)
}

// discard removes what a fresh run wrote before its first checkpoint (and the folder, when it
// made it), so that nothing half-made is left to resume.
func (r *runDir) discard() error {
	if r.dir == "" || r.resumable {
		return nil
	}
	var errs []error
	for _, name := range []string{configFile, metricsFile, policyFile, trainedFile, curveFile, filepath.Dir(checkpointFile)} {
		if err := os.RemoveAll(filepath.Join(r.dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, removeTemps(r.dir))
	if r.created {
		errs = append(errs, r.close())
		os.Remove(filepath.Join(r.dir, lockFile))
		os.Remove(r.dir) // only if empty
	}
	return errors.Join(errs...)
}

// close closes metrics.jsonl and releases the lock.
func (r *runDir) close() error {
	var errs []error
	if r.metrics != nil {
		errs = append(errs, r.metrics.Close())
		r.metrics = nil
	}
	errs = append(errs, r.lock.Release(false)) // the .lock file stays: it belongs to the run
	r.lock = nil
	return errors.Join(errs...)
}

// newRunID is a fresh random run identity (128 bits, hex).
func newRunID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// sha256Hex is the hex SHA-256 of data.
func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// writeFile writes data to path atomically (internal/atomicfile).
func writeFile(path string, data []byte) error { return atomicfile.WriteFile(path, data, 0o644) }

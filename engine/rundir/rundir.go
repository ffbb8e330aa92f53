// Package rundir is a training run's folder: config.json, metrics.jsonl (one JSON line per
// iteration, and the same metrics in an attached [Log]: TensorBoard's event files),
// policy.onnx, checkpoint/, curve.png, best_policy.onnx and best.json (the evaluations during
// training), held under an exclusive lock (package
// internal/dirlock) for the run's life and written through the one atomic writer (package
// internal/atomicfile). A new run takes only a new or empty folder; a resumed one keeps the
// metrics lines its checkpoint covers. Package engine drives it; it knows nothing of training.
package rundir

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
	"github.com/towerrl/towerrl/internal/tfevent"
)

// ErrRunDir is wrapped by errors about a run directory that cannot be used: not empty, locked
// by another process, or holding another run's files.
var ErrRunDir = errors.New("engine: run directory") // engine re-exports it

// The files of a run directory. A run creates every one of them; nothing else is written there
// but the attached Log's (TensorBoard's events.out.tfevents.*, whose names start with
// tfevent.Prefix).
const (
	ConfigFile  = "config.json"
	MetricsFile = "metrics.jsonl"
	PolicyFile  = "policy.onnx"
	CurveFile   = "curve.png"
	TrainedFile = "policy_with_critic.onnx"
	// BestPolicyFile is the best policy the evaluations during training found, BestFile its
	// record (the step and score; the caller's JSON).
	BestPolicyFile = "best_policy.onnx"
	BestFile       = "best.json"
	// GIFDir holds the episodes drawn during training, one GIF each (EpisodeGIF).
	GIFDir   = "gifs"
	LockFile = ".lock"
)

// CheckpointFile is the checkpoint's path inside a run directory.
var CheckpointFile = filepath.Join("checkpoint", "state.ckpt")

// Dir writes a run directory: config.json at the start, then after every iteration a line of
// metrics.jsonl (an M as JSON) and the latest policy.onnx (atomically). It holds the
// directory's lock (an exclusive flock on .lock) from creation to close, so no other train or
// resume writes into the directory meanwhile. A Dir made for no folder ("") writes nothing.
// Not safe for concurrent use.
type Dir[M any] struct {
	dir     string
	created bool // Train made the folder
	// resumable: a checkpoint exists. A fresh run that fails before its first checkpoint (a
	// policy that does not fit, a bad flag) removes what it wrote, so the same command can be
	// run again once fixed.
	resumable bool
	lock      *dirlock.Lock
	metrics   *os.File
	history   []M    // for the learning curve
	log       Log[M] // nil: none
}

// A Log is a second record of a run's metrics, written after each line of metrics.jsonl
// (package engine's TensorBoard event files, whose names start with tfevent.Prefix).
type Log[M any] interface {
	Write(m M) error
	Close() error
}

// Attach makes l receive every metrics line from now on; Close closes it.
func (r *Dir[M]) Attach(l Log[M]) { r.log = l }

// Lock takes dir's exclusive lock (internal/dirlock), or says which process holds it.
func Lock(dir string) (*dirlock.Lock, error) {
	l, err := dirlock.Take(dir, LockFile)
	var held *dirlock.HeldError
	switch {
	case errors.As(err, &held):
		return nil, fmt.Errorf("%w %s is in use by %s (it holds %s); wait for it to finish or stop it", ErrRunDir, dir, held.Holder(), held.Path)
	case err != nil:
		return nil, fmt.Errorf("%w %s: %v", ErrRunDir, dir, err)
	}
	return l, nil
}

// Create makes the run directory of a fresh run and writes config (config.json). dir must not
// exist or be empty: a run never writes over files it did not create, so a folder holding
// anything else (the user's own policy.onnx, another run) is refused before anything is
// written.
func Create[M any](dir string, config []byte) (_ *Dir[M], err error) {
	if dir == "" {
		return &Dir[M]{}, nil
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	if err := CheckEmpty(dir); err != nil {
		return nil, err
	}
	r := &Dir[M]{dir: dir, created: errors.Is(statErr, os.ErrNotExist)}
	if r.lock, err = Lock(dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Close())
		}
	}()
	// Another process may have created the folder's files between the check and the lock.
	if err := CheckEmpty(dir); err != nil {
		return nil, err
	}
	// What a run killed while writing its config.json left (CheckEmpty lets it through): no
	// other process can be writing it while this one holds the lock.
	if err := removeConfigTemps(dir); err != nil {
		return nil, err
	}
	if err := WriteFile(filepath.Join(dir, ConfigFile), config); err != nil {
		return nil, err
	}
	if r.metrics, err = os.OpenFile(filepath.Join(dir, MetricsFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	return r, nil
}

// CheckEmpty refuses a folder holding anything but a lock file nobody holds and the temporary
// files of a config.json whose writer was killed (a fresh run stopped while it set up its
// folder: the same command must be able to start it again).
func CheckEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != LockFile && !isConfigTemp(e) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil
	}
	if slices.Contains(names, ConfigFile) && slices.Contains(names, MetricsFile) {
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

// isConfigTemp reports whether e is a temporary file a write of config.json left.
func isConfigTemp(e fs.DirEntry) bool {
	return e.Type().IsRegular() && atomicfile.IsTempOf(e.Name(), ConfigFile)
}

// removeConfigTemps removes the temporary files of config.json in dir (isConfigTemp).
func removeConfigTemps(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRunDir, err)
	}
	for _, e := range entries {
		if isConfigTemp(e) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: removing a leftover temporary file: %v", ErrRunDir, err)
			}
		}
	}
	return nil
}

// RemoveTemps deletes the temporary files a killed process left behind (internal/atomicfile's,
// which config.json, policy.onnx and the checkpoints are written through) in dir and its
// checkpoint folder. The caller holds the run's lock.
func RemoveTemps(dir string) error {
	var errs []error
	for _, d := range []string{dir, filepath.Join(dir, filepath.Dir(CheckpointFile))} {
		if err := atomicfile.RemoveTemps(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err) // no checkpoint folder yet: nothing to remove
		}
	}
	return errors.Join(errs...)
}

// Open reopens a run directory to resume after iteration iterations: metrics.jsonl keeps its
// first iteration lines (later ones are dropped) and they seed the learning curve. The caller
// holds the lock and passes it in; the Dir owns it from then on.
func Open[M any](dir string, lock *dirlock.Lock, iterations int) (*Dir[M], error) {
	path := filepath.Join(dir, MetricsFile)
	data, err := os.ReadFile(path)
	if err != nil && !(errors.Is(err, os.ErrNotExist) && iterations == 0) {
		return nil, fmt.Errorf("engine: resuming: %w", err)
	}
	r := &Dir[M]{dir: dir}
	keep := 0
	for line := range bytes.Lines(data) {
		if len(r.history) == iterations {
			break
		}
		var m M
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

// Path is the folder ("" for none).
func (r *Dir[M]) Path() string { return r.dir }

// History is the metrics of this run's iterations so far.
func (r *Dir[M]) History() []M { return r.history }

// Resumable records that a checkpoint exists: Discard keeps the run from now on.
func (r *Dir[M]) Resumable() { r.resumable = true }

// PolicyPath is policy.onnx's path ("" for no folder).
func (r *Dir[M]) PolicyPath() string {
	if r.dir == "" {
		return ""
	}
	return filepath.Join(r.dir, PolicyFile)
}

// Metrics appends m to metrics.jsonl.
func (r *Dir[M]) Metrics(m M) error {
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
	if r.log != nil {
		if err := r.log.Write(m); err != nil {
			return fmt.Errorf("engine: writing metrics: %w", err)
		}
	}
	r.history = append(r.history, m)
	return nil
}

// Policy writes policy.onnx, and trained, when not nil, as policy_with_critic.onnx (the graph
// with the new critic a value-less policy was given).
func (r *Dir[M]) Policy(model, trained []byte) error {
	if r.dir == "" {
		return nil
	}
	if trained != nil {
		if err := WriteFile(filepath.Join(r.dir, TrainedFile), trained); err != nil {
			return err
		}
	}
	return WriteFile(r.PolicyPath(), model)
}

// Best keeps model as best_policy.onnx, then record as best.json, each written atomically: a
// reader finds one whole file or the other whole file, never a torn one. A process killed
// between the two leaves the new policy beside the old record; the record carries the
// policy's SHA-256 for ReadBest to tell.
func (r *Dir[M]) Best(model, record []byte) error {
	if r.dir == "" {
		return nil
	}
	if err := WriteFile(filepath.Join(r.dir, BestPolicyFile), model); err != nil {
		return fmt.Errorf("engine: writing the best policy: %w", err)
	}
	if err := WriteFile(filepath.Join(r.dir, BestFile), record); err != nil {
		return fmt.Errorf("engine: writing the best policy's record: %w", err)
	}
	return nil
}

// EpisodeGIF writes an episode drawn as an animated GIF of width × height pixels, taken at
// env step step, as gifs/step-<step>.gif (atomically), and into the TensorBoard event file,
// when one is attached, as the image summary tag at step (TensorBoard's image tab plays GIFs).
// It returns the file's path.
func (r *Dir[M]) EpisodeGIF(step int64, tag string, width, height int, gif []byte) (string, error) {
	if r.dir == "" {
		return "", nil
	}
	dir := filepath.Join(r.dir, GIFDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("engine: writing an episode's GIF: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("step-%09d.gif", step))
	if err := WriteFile(path, gif); err != nil {
		return "", fmt.Errorf("engine: writing an episode's GIF: %w", err)
	}
	if tb, ok := r.log.(*tensorBoard[M]); ok {
		if err := tb.image(step, tag, width, height, gif); err != nil {
			return "", fmt.Errorf("engine: writing an episode's GIF to TensorBoard: %w", err)
		}
	}
	return path, nil
}

// ReadBest returns best.json's bytes and best_policy.onnx's SHA-256 (hex), or nil and "" for
// a file that does not exist (no folder, or no evaluation yet).
func (r *Dir[M]) ReadBest() (record []byte, policySHA256 string, err error) {
	if r.dir == "" {
		return nil, "", nil
	}
	record, err = os.ReadFile(filepath.Join(r.dir, BestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("engine: reading the best policy's record: %w", err)
	}
	model, err := os.ReadFile(filepath.Join(r.dir, BestPolicyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return record, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("engine: reading the best policy: %w", err)
	}
	return record, SHA256Hex(model), nil
}

// HasPolicy reports whether policy.onnx holds model and policy_with_critic.onnx holds
// trained (or, with trained nil, does not exist).
func (r *Dir[M]) HasPolicy(model, trained []byte) bool {
	if r.dir == "" {
		return true
	}
	same := func(path string, want []byte) bool {
		got, err := os.ReadFile(path)
		if want == nil {
			return errors.Is(err, fs.ErrNotExist)
		}
		return err == nil && bytes.Equal(got, want)
	}
	return same(r.PolicyPath(), model) && same(filepath.Join(r.dir, TrainedFile), trained)
}

// Curve draws curve.png from the iterations of this process with plot, when given, and
// returns its path.
func (r *Dir[M]) Curve(plot func(path, title string, ms []M) error, title string) (string, error) {
	if r.dir == "" || plot == nil {
		return "", nil
	}
	path := filepath.Join(r.dir, CurveFile)
	return path, plot(path, title, r.history)
}

// Discard removes what a fresh run wrote before its first checkpoint (and the folder, when it
// made it), so that nothing half-made is left to resume and the same command can run again.
// Create took the folder empty and the run has held its lock since, so everything in it but
// the lock file is the run's: its own files and those written beside them (a serving run's
// creds/ and nats/ store, event files), which a list of names would miss.
func (r *Dir[M]) Discard() error {
	if r.dir == "" || r.resumable {
		return nil
	}
	var errs []error
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if e.Name() == LockFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if events, err := tfevent.Files(r.dir); err == nil { // the folder was empty: they are this run's
		for _, path := range events {
			errs = append(errs, os.Remove(path))
		}
	}
	if r.created {
		errs = append(errs, r.Close())
		os.Remove(filepath.Join(r.dir, LockFile))
		os.Remove(r.dir) // only if empty
	}
	return errors.Join(errs...)
}

// Close closes metrics.jsonl and the attached Log, and releases the lock.
func (r *Dir[M]) Close() error {
	var errs []error
	if r.log != nil {
		errs = append(errs, r.log.Close())
		r.log = nil
	}
	if r.metrics != nil {
		errs = append(errs, r.metrics.Close())
		r.metrics = nil
	}
	errs = append(errs, r.lock.Release(false)) // the .lock file stays: it belongs to the run
	r.lock = nil
	return errors.Join(errs...)
}

// NewRunID is a fresh random run identity (128 bits, hex).
func NewRunID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// SHA256Hex is the hex SHA-256 of data.
func SHA256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// writeFile writes data to path atomically (internal/atomicfile).
func WriteFile(path string, data []byte) error { return atomicfile.WriteFile(path, data, 0o644) }

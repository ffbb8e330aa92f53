package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/atomicfile"
	"github.com/towerrl/towerrl/internal/dirlock"
)

// The files of a dataset folder besides its shards.
const (
	ManifestName = "manifest.json" // the record of the runs, see Manifest
	lockName     = ".lock"         // flock'ed by the writer, holds its PID
	shardPrefix  = "shard-"
	shardSuffix  = ".npz"
	// legacyTmp ends the names the writer before internal/atomicfile gave a shard and the
	// manifest while it wrote them (shard-NNNNNN.npz.tmp, manifest.json.tmp); recover finishes
	// or removes what a killed writer of that version left.
	legacyTmp = ".tmp"
)

// ManifestFormat is the Manifest.Format this package writes and reads.
const ManifestFormat = 1

var (
	// ErrExists is wrapped by Open's refusal of a folder that already holds
	// shards or a manifest when the run does not append.
	ErrExists = errors.New("dataset: the output folder already holds a dataset")
	// ErrLocked is wrapped when another writer holds the folder's lock; the error names
	// its PID.
	ErrLocked = errors.New("dataset: the output folder is in use by another writer")
	// ErrMismatch is wrapped when a run cannot be appended to a folder: other env or
	// layout, shards no manifest describes, a manifest listing missing shards, or a run that
	// would repeat an earlier one's trajectories.
	ErrMismatch = errors.New("dataset: the run does not fit the dataset in the output folder")
)

// Manifest is DIR/manifest.json: every run that wrote shards into the folder, in order (a run
// under way is in it from just before its first shard). Every shard it lists is in the folder,
// whole; while a shard is being recorded the folder holds it a moment before the manifest
// lists it (see Writer).
type Manifest struct {
	Format int   `json:"format"` // ManifestFormat
	Runs   []Run `json:"runs"`
}

// Run describes one writer's run: what collected the data and the shards it wrote.
// The caller of Open fills the fields up to Steps but Env; Open fills the rest.
type Run struct {
	Env           string `json:"env"`             // Gymnasium id
	Policy        string `json:"policy"`          // the ONNX file (absolute path), or "random"
	Seed          uint64 `json:"seed"`            // Config.Seed
	Deterministic bool   `json:"deterministic"`   // Config.Deterministic
	Workers       int    `json:"workers"`         // Config.Workers
	EnvsPerWorker int    `json:"envs_per_worker"` // Config.EnvsPerWorker
	Rollout       int    `json:"rollout"`         // steps per env per shard
	Steps         int64  `json:"steps"`           // env steps the run set out to collect

	ObservationShape []int     `json:"observation_shape"` // one observation's shape
	ActionSpace      string    `json:"action_space"`      // as envs.Space.String: "discrete:2", "box:1:-2:2"
	PolicySHA256     string    `json:"policy_sha256"`     // of the ONNX file; "random" for the random policy
	Start            time.Time `json:"start"`             // Open
	End              time.Time `json:"end"`               // the last shard, or Finish
	Complete         bool      `json:"complete"`          // Finish was called: the run collected all its steps
	Shards           []Shard   `json:"shards"`            // in the order written
}

// Shard is one shard file of a run.
type Shard struct {
	Name string `json:"name"` // file name in the folder, shard-NNNNNN.npz
	Rows int    `json:"rows"` // rows of every key (batcher.Rollout.T × batcher.Rollout.N)
}

// Writer writes shards into a folder that it holds locked, and records them in the folder's
// Manifest. Commit order makes a kill at any moment leave a consistent folder:
//
//  1. before its first shard, the run is added to the manifest (without shards);
//  2. each shard is written whole under its final name with internal/atomicfile (a
//     temporary file .shard-NNNNNN.npz.tmp-DIGITS, synced, renamed, the folder synced);
//  3. then the manifest listing it replaces the old one, atomically too.
//
// So every shard the manifest lists is whole, and a kill leaves at most one shard the
// manifest does not list: the one numbered after every listed shard, while the manifest's last
// run is unfinished. The next writer to take the lock removes that shard and the temporary
// files of interrupted writes, drops a last unfinished run that got no shard, and finishes or
// removes what a writer of the version before atomicfile left (see recover).
//
// A Writer belongs to one goroutine. Close releases the lock.
type Writer struct {
	dir      string
	lock     *dirlock.Lock
	manifest Manifest // the earlier runs and this one; on disk once the run writes a shard
	run      int      // index of this run in manifest.Runs
	next     int      // number of the next shard
	created  bool     // Open made the folder
	written  bool     // the manifest on disk lists this run
	failed   error    // a failure Write could not undo: no more writes; the next writer recovers
	shards   *shardWriter
}

// Open takes the folder dir (made if needed) for a run's shards. It locks the folder
// (ErrLocked names the PID of a writer already in it), finishes or removes what a
// killed writer left, and refuses (ErrExists) a folder that already holds shards or a
// manifest unless appendRun is set. Appending continues the numbering after the highest
// shard; the run must collect the same env with the same observation and action layout as
// the manifest's earlier runs, and may not repeat one of them (same policy bytes, seed and
// deterministic flag would give the same trajectories): ErrMismatch otherwise.
func Open(dir string, spec envs.Spec, run Run, appendRun bool) (*Writer, error) {
	var err error
	run.Env = spec.ID
	run.ObservationShape = slices.Clone(spec.Observation.Shape)
	run.ActionSpace = spec.Action.String()
	if run.Policy == "" || run.Policy == "random" {
		run.Policy, run.PolicySHA256 = "random", "random"
	} else if run.Policy, run.PolicySHA256, err = fileDigest(run.Policy); err != nil {
		return nil, err
	}
	run.Complete, run.Shards = false, nil

	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dataset: output folder: %w", err)
	}
	d := &Writer{dir: dir, created: errors.Is(statErr, os.ErrNotExist), shards: &shardWriter{}}
	if d.lock, err = lockDir(dir); err != nil {
		d.removeIfCreated()
		return nil, err
	}
	if err := d.open(run, appendRun); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

func (d *Writer) open(run Run, appendRun bool) error {
	f, err := os.CreateTemp(d.dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("dataset: output folder %s is not writable: %w", d.dir, err)
	}
	f.Close()
	os.Remove(f.Name())

	m, err := ReadManifest(d.dir)
	hasManifest := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !hasManifest {
		m = &Manifest{Format: ManifestFormat}
	}
	onDisk, hasManifest, err := d.recover(m, hasManifest)
	if err != nil {
		return err
	}
	listed := map[string]bool{}
	for _, r := range m.Runs {
		for _, s := range r.Shards {
			listed[s.Name] = true
		}
	}
	if !appendRun && (len(onDisk) > 0 || hasManifest) {
		msg := fmt.Sprintf("%s holds %s", d.dir, describeShards(onDisk))
		if hasManifest {
			msg += fmt.Sprintf(" and %s (%s)", ManifestName, plural(len(m.Runs), "run"))
		}
		return fmt.Errorf("%w: %s; nothing was written", ErrExists, msg)
	}
	var unlisted []int
	for _, n := range onDisk {
		if !listed[shardName(n)] {
			unlisted = append(unlisted, n)
		}
	}
	if len(unlisted) > 0 {
		return fmt.Errorf("%w: %s holds %s that %s does not describe (written before manifests existed, or copied in), so their env and layout are unknown; move them into a folder of their own, or collect into another folder",
			ErrMismatch, d.dir, describeShards(unlisted), ManifestName)
	}
	for i, r := range m.Runs {
		if r.Env != run.Env || !slices.Equal(r.ObservationShape, run.ObservationShape) || r.ActionSpace != run.ActionSpace {
			return fmt.Errorf("%w: run %d of %s collected %s; this run collects %s: datasets of different envs or layouts go into different folders",
				ErrMismatch, i+1, filepath.Join(d.dir, ManifestName), describeLayout(r), describeLayout(run))
		}
		if r.PolicySHA256 == run.PolicySHA256 && r.Seed == run.Seed && r.Deterministic == run.Deterministic {
			return fmt.Errorf("%w: run %d of %s already collected with this policy (%s, sha256 %s), seed %d and deterministic=%t: this run would repeat its trajectories; choose another seed",
				ErrMismatch, i+1, filepath.Join(d.dir, ManifestName), r.Policy, r.PolicySHA256, r.Seed, r.Deterministic)
		}
	}
	for _, n := range onDisk {
		d.next = max(d.next, n+1)
	}
	run.Start = time.Now().UTC()
	run.End = run.Start
	d.manifest = *m
	d.manifest.Format = ManifestFormat
	d.manifest.Runs = append(d.manifest.Runs, run)
	d.run = len(d.manifest.Runs) - 1
	return nil
}

// recover puts right what a killed writer left in the folder, before anything reads it (the
// caller holds the lock, so no write is under way). m is the manifest on disk (empty when
// hasManifest is false); recover updates it with the folder, and returns the numbers of the
// shards now in the folder, in order, and whether a manifest is left.
//
//   - Temporary files of interrupted atomic writes (.NAME.tmp-DIGITS) are removed.
//   - When m's last run is unfinished (no Finish), a shard named after every shard m lists
//     is the one the kill caught between its rename and the manifest's: it is whole but
//     unrecorded, and is removed. A last unfinished run with no shard left is dropped from m
//     (and from the disk; a manifest left with no run is removed).
//   - Leftovers of the writer before this version, which wrote shard-NNNNNN.npz.tmp, listed it,
//     then renamed it: a shard m lists whose .tmp is all that is left is renamed into place (it
//     was whole and synced before the manifest listed it); every other shard .tmp and a
//     manifest.json.tmp (never complete) are removed.
//
// Any other shard m does not list stays, for open to refuse.
func (d *Writer) recover(m *Manifest, hasManifest bool) ([]int, bool, error) {
	if err := atomicfile.RemoveTemps(d.dir); err != nil {
		return nil, false, fmt.Errorf("dataset: cleaning up after a killed writer in %s: %w", d.dir, err)
	}
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, false, fmt.Errorf("dataset: reading output folder: %w", err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = true
	}
	changed := false // a rename or removal to make durable
	remove := func(name, what string) error {
		if err := os.Remove(filepath.Join(d.dir, name)); err != nil {
			return fmt.Errorf("dataset: removing %s, %s: %w", filepath.Join(d.dir, name), what, err)
		}
		delete(present, name)
		changed = true
		return nil
	}
	last := -1 // the highest shard number m lists
	for _, r := range m.Runs {
		for _, s := range r.Shards {
			n, ok := parseShardName(s.Name)
			if !ok {
				return nil, false, fmt.Errorf("%w: %s lists %q, which is not a shard name", ErrMismatch, filepath.Join(d.dir, ManifestName), s.Name)
			}
			last = max(last, n)
			if present[s.Name] {
				continue
			}
			if !present[s.Name+legacyTmp] {
				return nil, false, fmt.Errorf("%w: %s lists %s, which the folder lacks; restore it, or remove its entry from the manifest",
					ErrMismatch, filepath.Join(d.dir, ManifestName), s.Name)
			}
			if err := os.Rename(filepath.Join(d.dir, s.Name+legacyTmp), filepath.Join(d.dir, s.Name)); err != nil {
				return nil, false, fmt.Errorf("dataset: finishing shard %s of a killed writer: %w", s.Name, err)
			}
			delete(present, s.Name+legacyTmp)
			present[s.Name], changed = true, true
		}
	}
	if k := len(m.Runs) - 1; k >= 0 && !m.Runs[k].Complete {
		// The shard goes first: were the run dropped first, a kill in between would leave a
		// shard that no unfinished run accounts for, which the next writer would refuse.
		if name := shardName(last + 1); present[name] {
			if err := remove(name, "a whole shard a killed writer had not yet recorded in the manifest"); err != nil {
				return nil, false, err
			}
		}
		if len(m.Runs[k].Shards) == 0 {
			m.Runs = m.Runs[:k]
			if err := saveManifest(d.dir, m.Runs); err != nil {
				return nil, false, fmt.Errorf("dataset: dropping a killed writer's run, which got no shard, from the manifest: %w", err)
			}
			hasManifest = len(m.Runs) > 0 // saveManifest removes a manifest of no runs
		}
	}
	var shards []int
	for name := range present {
		base, tmp := strings.CutSuffix(name, legacyTmp)
		if _, ok := parseShardName(base); tmp && (ok || base == ManifestName) {
			if err := remove(name, "left incomplete by a killed writer"); err != nil {
				return nil, false, err
			}
		} else if n, ok := parseShardName(name); ok {
			shards = append(shards, n)
		}
	}
	if changed {
		if err := atomicfile.SyncDir(d.dir); err != nil {
			return nil, false, fmt.Errorf("dataset: cleaning up after a killed writer: %w", err)
		}
	}
	slices.Sort(shards)
	return shards, hasManifest, nil
}

// Write writes r as the next shard, records it in the manifest and returns the shard's path.
// On failure (a full disk) the folder's shards and the manifest's are as they were; a
// failure it cannot undo (the disk fails again as it does) leaves the folder as a kill
// would, and the Writer refuses further writes.
func (d *Writer) Write(r *batcher.Rollout) (string, error) {
	if d.lock == nil {
		return "", errors.New("dataset: Write on a closed Writer")
	}
	if d.failed != nil {
		return "", d.failedErr()
	}
	run := &d.manifest.Runs[d.run]
	if !slices.Equal(r.ObsShape, run.ObservationShape) {
		return "", fmt.Errorf("dataset: rollout observations have shape %v, the dataset's %v", r.ObsShape, run.ObservationShape)
	}
	name := shardName(d.next)
	path := filepath.Join(d.dir, name)
	if !d.written {
		// The run goes into the manifest before its first shard, so that the next writer
		// knows a shard the manifest does not list as a killed writer's (see recover).
		if err := d.writeManifest(); err != nil {
			return "", fmt.Errorf("dataset: shard %s not written: %w", path, err)
		}
	}
	if err := d.shards.writeFile(path, r); err != nil {
		// atomicfile fails after its rename only when syncing the folder fails.
		return "", d.undo(path, fmt.Errorf("dataset: shard %s not written: %w", path, err))
	}
	run.Shards = append(run.Shards, Shard{Name: name, Rows: r.T * r.N})
	end := run.End
	run.End = time.Now().UTC()
	if err := d.writeManifest(); err != nil {
		run.Shards, run.End = run.Shards[:len(run.Shards)-1], end
		// The failed write may have replaced the manifest after all (only syncing the folder
		// failed): the manifest without the shard goes back before the shard goes.
		err = fmt.Errorf("dataset: shard %s not written: %w", path, err)
		if merr := d.writeManifest(); merr != nil {
			d.failed = err
			return "", fmt.Errorf("%w; putting back the manifest without it failed too (%v), so the shard is left for the next writer into the folder to remove", err, merr)
		}
		return "", d.undo(path, err)
	}
	d.next++
	return path, nil
}

// undo removes the shard at path, which the manifest on disk does not list, after a failed
// Write, and returns err, extended when the shard stays.
func (d *Writer) undo(path string, err error) error {
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		d.failed = err
		return fmt.Errorf("%w; removing it failed too (%v), so it is left for the next writer into the folder to remove", err, rerr)
	}
	return err
}

// failedErr is the refusal of a Writer whose earlier failure could not be undone.
func (d *Writer) failedErr() error {
	return fmt.Errorf("dataset: no more shards go into %s after a failure that could not be undone (%w); the next writer into the folder puts it right", d.dir, d.failed)
}

// Finish marks the run complete in the manifest: it collected all the steps it set out to.
func (d *Writer) Finish() error {
	if d.lock == nil {
		return errors.New("dataset: Finish on a closed Writer")
	}
	if d.failed != nil {
		return d.failedErr()
	}
	run := &d.manifest.Runs[d.run]
	run.Complete, run.End = true, time.Now().UTC()
	if len(run.Shards) == 0 {
		return nil // no shard: nothing to record (Close takes the run out of the manifest)
	}
	return d.writeManifest()
}

// Manifest is the manifest as this run left it so far, this run last.
func (d *Writer) Manifest() Manifest {
	m := d.manifest
	m.Runs = slices.Clone(m.Runs)
	for i := range m.Runs {
		m.Runs[i].Shards = slices.Clone(m.Runs[i].Shards)
	}
	return m
}

// Dir is the dataset's folder.
func (d *Writer) Dir() string { return d.dir }

// Close releases the folder's lock. A run that got no shard leaves the manifest as it found
// it, and a folder Open made for it is removed. Close is idempotent.
func (d *Writer) Close() error {
	if d.lock == nil {
		return nil
	}
	var err error
	if d.written && len(d.manifest.Runs[d.run].Shards) == 0 && d.failed == nil {
		// Write listed the run before its first shard, which failed.
		if err = saveManifest(d.dir, d.manifest.Runs[:d.run]); err == nil {
			d.written = false
		} else {
			err = fmt.Errorf("dataset: taking the run without shards out of the manifest: %w", err)
		}
	}
	empty := d.created && !d.written
	err = errors.Join(err, d.lock.Release(empty))
	d.lock = nil
	if empty {
		d.removeIfCreated()
	}
	return err
}

// removeIfCreated removes the folder Open made, if it is empty.
func (d *Writer) removeIfCreated() {
	if d.created {
		os.Remove(d.dir) // fails, harmlessly, on a folder that is not empty
	}
}

// writeManifest replaces DIR/manifest.json atomically with d.manifest, which lists this run.
func (d *Writer) writeManifest() error {
	if err := saveManifest(d.dir, d.manifest.Runs); err != nil {
		return err
	}
	d.written = true
	return nil
}

// saveManifest replaces DIR/manifest.json atomically with a manifest of runs, or removes it
// when there is no run.
func saveManifest(dir string, runs []Run) error {
	path := filepath.Join(dir, ManifestName)
	if len(runs) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("dataset: removing %s: %w", path, err)
		}
		return atomicfile.SyncDir(dir)
	}
	b, err := json.MarshalIndent(Manifest{Format: ManifestFormat, Runs: runs}, "", "  ")
	if err != nil {
		return fmt.Errorf("dataset: encoding the manifest: %w", err)
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("dataset: updating the manifest: %w", err)
	}
	return nil
}

// ReadManifest reads DIR/manifest.json. A missing one is an error wrapping os.ErrNotExist.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: reading the manifest: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("dataset: %s is not a manifest this version reads (%v); move the folder's shards and manifest into a folder of their own", path, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("dataset: %s has format %d, this version reads format %d", path, m.Format, ManifestFormat)
	}
	return &m, nil
}

// fileDigest returns path made absolute and the hex sha256 of the file's bytes.
func fileDigest(path string) (abs, sum string, err error) {
	if abs, err = filepath.Abs(path); err != nil {
		return "", "", fmt.Errorf("dataset: policy path %q: %w", path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", "", fmt.Errorf("dataset: hashing the policy for the manifest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", fmt.Errorf("dataset: hashing the policy %s for the manifest: %w", abs, err)
	}
	return abs, hex.EncodeToString(h.Sum(nil)), nil
}

func shardName(n int) string { return fmt.Sprintf("%s%06d%s", shardPrefix, n, shardSuffix) }

// parseShardName reads the number of shard-NNNNNN.npz (six digits or more).
func parseShardName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, shardPrefix)
	if !ok {
		return 0, false
	}
	if digits, ok = strings.CutSuffix(digits, shardSuffix); !ok || len(digits) < 6 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// describeShards says "3 shards (shard-000000.npz … shard-000002.npz)".
func describeShards(nums []int) string {
	switch len(nums) {
	case 0:
		return "no shards"
	case 1:
		return "1 shard (" + shardName(nums[0]) + ")"
	}
	return fmt.Sprintf("%d shards (%s … %s)", len(nums), shardName(nums[0]), shardName(nums[len(nums)-1]))
}

// plural says "1 run", "2 runs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func describeLayout(r Run) string {
	return fmt.Sprintf("%s (observations %v, actions %s)", r.Env, r.ObservationShape, r.ActionSpace)
}

// lockDir takes DIR/.lock for this writer's life (internal/dirlock). When another writer holds
// it the error wraps ErrLocked and names that writer's PID.
func lockDir(dir string) (*dirlock.Lock, error) {
	l, err := dirlock.Take(dir, lockName)
	var held *dirlock.HeldError
	switch {
	case errors.As(err, &held):
		holder := "another writer (it has not written its PID yet)"
		if held.PID > 0 {
			holder = fmt.Sprintf("another writer, PID %d", held.PID)
		}
		return nil, fmt.Errorf("%w: %s is locked by %s (%s); wait for it to finish, or write into another folder",
			ErrLocked, dir, holder, held.Path)
	case err != nil:
		return nil, fmt.Errorf("dataset: output folder %s is not writable: %w", dir, err)
	}
	return l, nil
}

package batcher

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/dirlock"
)

// The files of a dataset folder besides its shards.
const (
	ManifestName = "manifest.json" // the record of the runs, see Manifest
	lockName     = ".lock"         // flock'ed by the writer, holds its PID
	manifestTmp  = ManifestName + ".tmp"
	shardPrefix  = "shard-"
	shardSuffix  = ".npz"
	tmpSuffix    = ".tmp"
)

// ManifestFormat is the Manifest.Format this package writes and reads.
const ManifestFormat = 1

var (
	// ErrDatasetExists is wrapped by OpenDataset's refusal of a folder that already holds
	// shards or a manifest when the run does not append.
	ErrDatasetExists = errors.New("batcher: the output folder already holds a dataset")
	// ErrDatasetLocked is wrapped when another writer holds the folder's lock; the error names
	// its PID.
	ErrDatasetLocked = errors.New("batcher: the output folder is in use by another writer")
	// ErrDatasetMismatch is wrapped when a run cannot be appended to a folder: other env or
	// layout, shards no manifest describes, a manifest listing missing shards, or a run that
	// would repeat an earlier one's trajectories.
	ErrDatasetMismatch = errors.New("batcher: the run does not fit the dataset in the output folder")
)

// Manifest is DIR/manifest.json: every run that wrote shards into the folder, in order.
// It lists exactly the folder's complete shards (see Dataset).
type Manifest struct {
	Format int          `json:"format"` // ManifestFormat
	Runs   []DatasetRun `json:"runs"`
}

// DatasetRun describes one writer's run: what collected the data and the shards it wrote.
// The caller of OpenDataset fills the fields up to Steps; OpenDataset fills the rest.
type DatasetRun struct {
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
	Start            time.Time `json:"start"`             // OpenDataset
	End              time.Time `json:"end"`               // the last shard, or Finish
	Complete         bool      `json:"complete"`          // Finish was called: the run collected all its steps
	Shards           []Shard   `json:"shards"`            // in the order written
}

// Shard is one shard file of a run.
type Shard struct {
	Name string `json:"name"` // file name in the folder, shard-NNNNNN.npz
	Rows int    `json:"rows"` // rows of every key (Rollout.T × Rollout.N)
}

// Dataset writes shards into a folder that it holds locked, and records them in the folder's
// Manifest. Commit order makes a kill at any moment leave a consistent folder: a shard is
// written whole to shard-NNNNNN.npz.tmp and synced, then the manifest listing it is
// replaced atomically (manifest.json.tmp, sync, rename), then the shard is renamed into place.
// The next writer to take the lock finishes the rename of a listed shard whose .tmp is all
// that is left, and removes every other .tmp (a shard that was never complete).
//
// A Dataset belongs to one goroutine. Close releases the lock.
type Dataset struct {
	dir      string
	lock     *dirlock.Lock
	manifest Manifest // written to disk once the run has a shard
	run      int      // index of this run in manifest.Runs
	next     int      // number of the next shard
	created  bool     // OpenDataset made the folder
	written  bool     // the manifest has been written by this run
	shards   *shardWriter
}

// OpenDataset takes the folder dir (made if needed) for a run's shards. It locks the folder
// (ErrDatasetLocked names the PID of a writer already in it), finishes or removes what a
// killed writer left, and refuses (ErrDatasetExists) a folder that already holds shards or a
// manifest unless appendRun is set. Appending continues the numbering after the highest
// shard; the run must collect the same env with the same observation and action layout as
// the manifest's earlier runs, and may not repeat one of them (same policy bytes, seed and
// deterministic flag would give the same trajectories): ErrDatasetMismatch otherwise.
func OpenDataset(dir string, run DatasetRun, appendRun bool) (*Dataset, error) {
	spec, err := envs.Lookup(run.Env)
	if err != nil {
		return nil, err
	}
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
		return nil, fmt.Errorf("batcher: output folder: %w", err)
	}
	d := &Dataset{dir: dir, created: errors.Is(statErr, os.ErrNotExist), shards: newShardWriter()}
	if d.lock, err = lockDir(dir); err != nil {
		d.removeIfCreated()
		return nil, err
	}
	if err := d.open(run, appendRun); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

func (d *Dataset) open(run DatasetRun, appendRun bool) error {
	f, err := os.CreateTemp(d.dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("batcher: output folder %s is not writable: %w", d.dir, err)
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
	onDisk, err := d.recover(m)
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
		return fmt.Errorf("%w: %s; nothing was written", ErrDatasetExists, msg)
	}
	var unlisted []int
	for _, n := range onDisk {
		if !listed[shardName(n)] {
			unlisted = append(unlisted, n)
		}
	}
	if len(unlisted) > 0 {
		return fmt.Errorf("%w: %s holds %s that %s does not describe (written before manifests existed, or copied in), so their env and layout are unknown; move them into a folder of their own, or collect into another folder",
			ErrDatasetMismatch, d.dir, describeShards(unlisted), ManifestName)
	}
	for i, r := range m.Runs {
		if r.Env != run.Env || !slices.Equal(r.ObservationShape, run.ObservationShape) || r.ActionSpace != run.ActionSpace {
			return fmt.Errorf("%w: run %d of %s collected %s; this run collects %s: datasets of different envs or layouts go into different folders",
				ErrDatasetMismatch, i+1, filepath.Join(d.dir, ManifestName), describeLayout(r), describeLayout(run))
		}
		if r.PolicySHA256 == run.PolicySHA256 && r.Seed == run.Seed && r.Deterministic == run.Deterministic {
			return fmt.Errorf("%w: run %d of %s already collected with this policy (%s, sha256 %s), seed %d and deterministic=%t: this run would repeat its trajectories; choose another seed",
				ErrDatasetMismatch, i+1, filepath.Join(d.dir, ManifestName), r.Policy, r.PolicySHA256, r.Seed, r.Deterministic)
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

// recover finishes what a killed writer left: a shard the manifest lists whose .tmp is all
// that is left is renamed into place (it was complete and synced before the manifest listed
// it); every other shard .tmp and a manifest .tmp are removed. It returns the numbers of the
// shards now in the folder, in order.
func (d *Dataset) recover(m *Manifest) ([]int, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("batcher: reading output folder: %w", err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = true
	}
	for _, r := range m.Runs {
		for _, s := range r.Shards {
			if present[s.Name] {
				continue
			}
			if _, ok := parseShardName(s.Name); !ok {
				return nil, fmt.Errorf("%w: %s lists %q, which is not a shard name", ErrDatasetMismatch, filepath.Join(d.dir, ManifestName), s.Name)
			}
			if !present[s.Name+tmpSuffix] {
				return nil, fmt.Errorf("%w: %s lists %s, which the folder lacks; restore it, or remove its entry from the manifest",
					ErrDatasetMismatch, filepath.Join(d.dir, ManifestName), s.Name)
			}
			if err := os.Rename(filepath.Join(d.dir, s.Name+tmpSuffix), filepath.Join(d.dir, s.Name)); err != nil {
				return nil, fmt.Errorf("batcher: finishing shard %s of a killed writer: %w", s.Name, err)
			}
			delete(present, s.Name+tmpSuffix)
			present[s.Name] = true
		}
	}
	var shards []int
	for name := range present {
		if name == manifestTmp {
			os.Remove(filepath.Join(d.dir, name))
			continue
		}
		if base, ok := strings.CutSuffix(name, tmpSuffix); ok {
			if _, ok := parseShardName(base); ok {
				if err := os.Remove(filepath.Join(d.dir, name)); err != nil {
					return nil, fmt.Errorf("batcher: removing %s, left incomplete by a killed writer: %w", name, err)
				}
			}
			continue
		}
		if n, ok := parseShardName(name); ok {
			shards = append(shards, n)
		}
	}
	slices.Sort(shards)
	return shards, nil
}

// Write writes r as the next shard, records it in the manifest and returns the shard's path.
// On failure (a full disk) the folder and the manifest are as they were.
func (d *Dataset) Write(r *Rollout) (string, error) {
	if d.lock == nil {
		return "", errors.New("batcher: Write on a closed Dataset")
	}
	run := &d.manifest.Runs[d.run]
	if !slices.Equal(r.ObsShape, run.ObservationShape) {
		return "", fmt.Errorf("batcher: rollout observations have shape %v, the dataset's %v", r.ObsShape, run.ObservationShape)
	}
	name := shardName(d.next)
	path := filepath.Join(d.dir, name)
	tmp := path + tmpSuffix
	if err := d.shards.writeFile(tmp, r); err != nil {
		return "", err
	}
	run.Shards = append(run.Shards, Shard{Name: name, Rows: r.T * r.N})
	end := run.End
	run.End = time.Now().UTC()
	if err := d.writeManifest(); err != nil {
		run.Shards, run.End = run.Shards[:len(run.Shards)-1], end
		os.Remove(tmp)
		return "", fmt.Errorf("batcher: shard %s not written: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		run.Shards, run.End = run.Shards[:len(run.Shards)-1], end
		// The manifest lists the shard and its .tmp is complete: if taking it back fails too,
		// the next writer finishes the rename.
		if merr := d.writeManifest(); merr == nil {
			os.Remove(tmp)
		}
		return "", fmt.Errorf("batcher: shard %s not written: %w", path, err)
	}
	syncDir(d.dir)
	d.next++
	return path, nil
}

// Finish marks the run complete in the manifest: it collected all the steps it set out to.
func (d *Dataset) Finish() error {
	if d.lock == nil {
		return errors.New("batcher: Finish on a closed Dataset")
	}
	run := &d.manifest.Runs[d.run]
	run.Complete, run.End = true, time.Now().UTC()
	if !d.written {
		return nil // no shard: nothing to record
	}
	return d.writeManifest()
}

// Manifest is the manifest as this run left it so far, this run last.
func (d *Dataset) Manifest() Manifest {
	m := d.manifest
	m.Runs = slices.Clone(m.Runs)
	for i := range m.Runs {
		m.Runs[i].Shards = slices.Clone(m.Runs[i].Shards)
	}
	return m
}

// Dir is the dataset's folder.
func (d *Dataset) Dir() string { return d.dir }

// Close releases the folder's lock. A folder OpenDataset made that got no shard is removed.
// Close is idempotent.
func (d *Dataset) Close() error {
	if d.lock == nil {
		return nil
	}
	empty := d.created && !d.written
	err := d.lock.Release(empty)
	d.lock = nil
	if empty {
		d.removeIfCreated()
	}
	return err
}

// removeIfCreated removes the folder OpenDataset made, if it is empty.
func (d *Dataset) removeIfCreated() {
	if d.created {
		os.Remove(d.dir) // fails, harmlessly, on a folder that is not empty
	}
}

// writeManifest replaces DIR/manifest.json atomically.
func (d *Dataset) writeManifest() error {
	b, err := json.MarshalIndent(d.manifest, "", "  ")
	if err != nil {
		return fmt.Errorf("batcher: encoding the manifest: %w", err)
	}
	path := filepath.Join(d.dir, ManifestName)
	tmp := filepath.Join(d.dir, manifestTmp)
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("batcher: writing %s: %w", path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("batcher: writing %s (the previous one is kept): %w", path, err)
	}
	syncDir(d.dir)
	d.written = true
	return nil
}

// ReadManifest reads DIR/manifest.json. A missing one is an error wrapping os.ErrNotExist.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("batcher: reading the manifest: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("batcher: %s is not a manifest this version reads (%v); move the folder's shards and manifest into a folder of their own", path, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("batcher: %s has format %d, this version reads format %d", path, m.Format, ManifestFormat)
	}
	return &m, nil
}

// fileDigest returns path made absolute and the hex sha256 of the file's bytes.
func fileDigest(path string) (abs, sum string, err error) {
	if abs, err = filepath.Abs(path); err != nil {
		return "", "", fmt.Errorf("batcher: policy path %q: %w", path, err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", "", fmt.Errorf("batcher: hashing the policy for the manifest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", fmt.Errorf("batcher: hashing the policy %s for the manifest: %w", abs, err)
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

func describeLayout(r DatasetRun) string {
	return fmt.Sprintf("%s (observations %v, actions %s)", r.Env, r.ObservationShape, r.ActionSpace)
}

// syncDir makes renames in dir durable; a failure only weakens durability across a power
// loss, not a process kill, so it is not reported.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}

// lockDir takes DIR/.lock for this writer's life (internal/dirlock). When another writer holds
// it the error wraps ErrDatasetLocked and names that writer's PID.
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
			ErrDatasetLocked, dir, holder, held.Path)
	case err != nil:
		return nil, fmt.Errorf("batcher: output folder %s is not writable: %w", dir, err)
	}
	return l, nil
}

package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/engine/ddppo"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
)

// Resume continues the run in dir from its last checkpoint with the configuration in its
// config.json: same iteration, parameters, optimiser state, environment states and random
// streams, so it finishes with the metrics an uninterrupted run would have had. metrics.jsonl
// lines written after the checkpoint are dropped (they are produced again), and temporary
// files a killed process left are removed. opts.Out is dir.
//
// The checkpoint must belong to the run (same run ID), and the configuration it was written
// with must equal config.json's after opts.Change, except for [ResumeChangeable]; a run that
// has not finished an iteration may change any field but run_id, init_policy and
// init_policy_sha256, and starts again from the beginning with them. A fine-tune
// resumes from the policy bytes in the checkpoint: the InitPolicy file is not needed. A run
// stopped before its first checkpoint (no metrics yet) starts again from the beginning.
//
// A DD-PPO run resumes under mpirun with the number of ranks it was written with: rank 0 reads
// dir and sends the configuration and the checkpoint to the other ranks (see Options.Ranks).
func Resume(ctx context.Context, dir string, opts Options) (res Result, err error) {
	if g := opts.Ranks; g != nil && g.Size() > 1 {
		if g.Rank() > 0 {
			return follow(ctx, Config{}, opts, true)
		}
		done := lead(ctx, g, &opts)
		defer func() { err = done(err) }()
	} else {
		opts.Ranks = nil
	}
	fail := func(err error) (Result, error) { return Result{}, fmt.Errorf("engine: resuming %s: %w", dir, err) }
	if st, err := os.Stat(dir); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrRunDir, err))
	} else if !st.IsDir() {
		return fail(fmt.Errorf("%w: it is a file, not a run directory (a folder train --out made)", ErrRunDir))
	}
	lock, err := rundir.Lock(dir)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if lock != nil { // not handed over to the runDir
			err = errors.Join(err, lock.Release(false))
		}
	}()
	if err := rundir.RemoveTemps(dir); err != nil {
		return fail(err)
	}
	r, err := readRun(ctx, dir, opts.Change)
	if err != nil {
		return fail(err)
	}
	if err := checkOptions(r.cfg, r.spec, opts); err != nil {
		return fail(err)
	}
	if r.changed {
		if err := rundir.WriteFile(filepath.Join(dir, configFile), append(r.config, '\n')); err != nil {
			return fail(err)
		}
	}
	first := 0
	if r.ckpt != nil {
		first = int(r.ckpt.Ints["iteration"])
	}
	if opts.Ranks, err = ranksOf(r.cfg, opts.Ranks); err != nil {
		return fail(err)
	}
	if opts.ready != nil {
		s := ddppo.Shared{Config: r.config, InitPolicy: r.initData, Saving: true}
		if r.ckpt != nil {
			if s.Checkpoint, err = r.ckpt.MarshalBinary(); err != nil {
				return fail(err)
			}
		}
		if err := opts.ready(s); err != nil {
			return Result{}, err
		}
	}
	run, err := rundir.Open[Metrics](dir, lock, first)
	if err != nil {
		return Result{}, err
	}
	lock = nil
	opts.Out = dir
	return trainRun(ctx, r.cfg, r.spec, opts, run, r.ckpt, r.initData, true)
}

// resumed is what a run directory resumes with.
type resumed struct {
	cfg      Config    // resolved: what the run trains with
	spec     envs.Spec // its env
	config   []byte    // config.json from now on: the stored config with the changes asked
	changed  bool      // config differs from the stored config.json
	ckpt     *models.Checkpoint
	initData []byte // the policy being fine-tuned, if any
}

// readRun reads the run in dir: config.json with change's edits (checked against
// ResumeChangeable), its checkpoint (none when nothing was trained), and the policy it
// fine-tunes (the checkpoint's copy, else the file, checked against its SHA-256).
func readRun(ctx context.Context, dir string, change func(*Config)) (r resumed, err error) {
	b, err := rundir.ReadConfig(dir)
	if err != nil {
		return r, err
	}
	stored, err := ParseConfig(b)
	if err != nil {
		return r, fmt.Errorf("config.json: %w", err)
	}
	cfg := stored
	if change != nil {
		change(&cfg)
		cfg.MatmulPrecision = precisionName(cfg.MatmulPrecision) // naming the default is no change
	}
	// A run that has not finished an iteration has trained nothing: it may take other
	// settings (fewer envs after --envs 100000 did not fit) and starts again from the
	// beginning with them; only its identity stays.
	fresh := noMetrics(dir)
	changeable := ResumeChangeable
	if fresh {
		changeable = freshChangeable(stored, cfg)
	}
	if err := resumeChanges(stored, cfg, changeable); err != nil {
		return r, err
	}
	restart := fresh && !reflect.DeepEqual(cfg, stored)
	asked := cfg // stored, with at most the changeable fields changed: config.json from now on
	if r.cfg, r.spec, err = cfg.resolve(); err != nil {
		return r, err
	}
	r.ckpt, err = models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
	switch {
	case errors.Is(err, os.ErrNotExist) && fresh:
		r.ckpt = nil // stopped before the first checkpoint: nothing was trained, start again
	case restart:
		r.ckpt = nil // nothing trained, other settings: start again with them
	case err != nil:
		return r, err
	default:
		if err := checkCheckpoint(r.ckpt, stored); err != nil {
			if !fresh || string(r.ckpt.Bytes["run_id"]) != stored.RunID {
				return r, err
			}
			// Nothing trained, and a resume that changed the settings was cut before its
			// first checkpoint: start again with config.json's.
			r.ckpt = nil
		}
	}
	if r.initData, err = initPolicyOf(r.cfg, r.ckpt); err != nil {
		return r, err
	}
	if r.config, err = json.MarshalIndent(asked, "", "  "); err != nil {
		return r, err
	}
	r.changed = !reflect.DeepEqual(asked, stored)
	return r, nil
}

// initPolicyOf is the policy a resumed fine-tune trains: the copy in its checkpoint, else the
// InitPolicy file, either checked against the SHA-256 config.json records. Nil for a run
// from scratch.
func initPolicyOf(cfg Config, ckpt *models.Checkpoint) (data []byte, err error) {
	if cfg.InitPolicy == "" {
		return nil, nil
	}
	if ckpt != nil {
		data = ckpt.Bytes["init_policy"]
	}
	if data == nil {
		data, _, err = rundir.ReadInitPolicy(cfg.InitPolicy, cfg.InitPolicySHA256)
		return data, err
	}
	_, err = rundir.CheckInitPolicy(data, cfg.InitPolicySHA256)
	return data, err
}

// noMetrics reports whether the run in dir has not finished an iteration yet.
func noMetrics(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, metricsFile))
	return err != nil || st.Size() == 0
}

// resumeChanges refuses changes to fields outside changeable, naming every one.
func resumeChanges(stored, asked Config, changeable []string) error {
	a, b := configMap(stored), configMap(asked)
	var bad []string
	for k := range union(a, b) {
		if !slices.Contains(changeable, k) && !bytes.Equal(a[k], b[k]) {
			bad = append(bad, fmt.Sprintf("%s (run: %s, asked: %s)", k, orNone(a[k]), orNone(b[k])))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("%w: a resume may change only %s; not %s", ErrConfig, strings.Join(changeable, ", "), strings.Join(bad, ", "))
	}
	return nil
}

// freshChangeable lists the fields a resume of a run that has not finished an iteration may
// change: all but the run's identity (its ID, and the policy it fine-tunes).
func freshChangeable(stored, asked Config) []string {
	var names []string
	for k := range union(configMap(stored), configMap(asked)) {
		if k != "run_id" && k != "init_policy" && k != "init_policy_sha256" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

// checkCheckpoint refuses a checkpoint of another run, or one written with another config.
func checkCheckpoint(c *models.Checkpoint, stored Config) error {
	id := string(c.Bytes["run_id"])
	if id != stored.RunID {
		return fmt.Errorf("%w: the checkpoint belongs to run %q, config.json to run %q (was it copied from another run?)",
			ErrRunDir, id, stored.RunID)
	}
	var was Config
	if err := json.Unmarshal(c.Bytes["config"], &was); err != nil {
		return fmt.Errorf("%w: the checkpoint's config: %v", ErrRunDir, err)
	}
	explicitZeros(c.Bytes["config"], &was)
	if err := resumeChanges(was, stored, ResumeChangeable); err != nil {
		return fmt.Errorf("config.json was edited since the checkpoint: %w", err)
	}
	return nil
}

func configMap(c Config) map[string]json.RawMessage {
	b, _ := json.Marshal(c)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	return m
}

func union(a, b map[string]json.RawMessage) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

func orNone(v json.RawMessage) string {
	if v == nil {
		return "none"
	}
	return string(v)
}

// checkpoint saves what Resume needs after iteration iterations: snapshot, then save.
func (t *trainer) checkpoint(ctx context.Context, path string, iteration int) error {
	c, err := t.snapshot(ctx, iteration)
	if err != nil || c == nil {
		return err
	}
	return t.save(ctx, path, c)
}

// snapshot copies what Resume needs after iteration iterations into a checkpoint. It first
// waits for the checkpoint being written, if any, and returns its error: writes never overlap.
// In a DD-PPO job every rank takes part (rank 0's checkpoint gathers every rank's batcher
// snapshot) and the other ranks get nil.
func (t *trainer) snapshot(ctx context.Context, iteration int) (*models.Checkpoint, error) {
	if err := t.waitCheckpoint(); err != nil {
		return nil, err
	}
	// An asynchronous run's batchers never stop to be snapshotted: its checkpoints hold the
	// learner's state only, and a resume starts fresh episodes (streamCollector).
	snap, err := t.col.snapshot()
	if err != nil {
		return nil, err
	}
	if !t.red.root() {
		if err := t.red.gatherSnapshots(ctx, snap, nil); err != nil {
			return nil, err
		}
		return nil, t.snapshotNorm(ctx, nil)
	}
	c := &models.Checkpoint{
		Ints: map[string]int64{"iteration": int64(iteration), "env_steps": t.steps, "episodes": t.eps,
			"version": t.version, "adam_steps": int64(t.opt.Steps())},
		Bytes: map[string][]byte{"batcher": snap, "run_id": []byte(t.cfg.RunID)},
	}
	if err := t.red.gatherSnapshots(ctx, snap, c); err != nil {
		return nil, err
	}
	if err := t.snapshotNorm(ctx, c); err != nil {
		return nil, err
	}
	if c.Bytes["config"], err = json.Marshal(t.cfg); err != nil {
		return nil, err
	}
	if src := t.pm.Source(); src != nil {
		c.Bytes["init_policy"] = src
	}
	st := t.opt.State()
	for name, v := range map[string][]float32{"params": t.pm.Flat(), "adam.m": st["adam.m"], "adam.v": st["adam.v"]} {
		if err := c.Put(name, []int{len(v)}, v); err != nil { // Put copies
			return nil, err
		}
	}
	return c, nil
}

// save writes c to path on a goroutine, off the training's critical path; waitCheckpoint
// waits for it. The write is atomic, so a process killed meanwhile leaves the previous
// checkpoint. The caller writes the metrics line of c's iteration first, and the goroutine
// waits for the policy.onnx being written, if any, before it writes: a checkpoint is never
// ahead of metrics.jsonl or of policy.onnx, so a process killed between the two writes leaves
// an older checkpoint, which a resume trains on from, writing the same policy.onnx again.
// When the policy write fails, the checkpoint is not written and waitCheckpoint gives the
// policy's error.
func (t *trainer) save(ctx context.Context, path string, c *models.Checkpoint) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("engine: checkpoint: %w", err)
	}
	policy := t.polW
	t.polW = nil // the checkpoint's write carries its result now
	done := make(chan error, 1)
	go func() {
		if err := waitWrite(&policy); err != nil {
			done <- err
			return
		}
		done <- models.SaveCheckpoint(ctx, path, c)
	}()
	t.ckpt = done
	return nil
}

// waitCheckpoint waits for the checkpoint being written, if any, and returns its error.
func (t *trainer) waitCheckpoint() error { return waitWrite(&t.ckpt) }

// restore sets the trainer to a checkpoint's state (after start built it afresh).
func (t *trainer) restore(ctx context.Context, c *models.Checkpoint) error {
	st := t.opt.State()
	for name, dst := range map[string][]float32{"params": t.pm.Flat(), "adam.m": st["adam.m"], "adam.v": st["adam.v"]} {
		v, ok := c.Tensor(name)
		if !ok || len(v.Data) != len(dst) {
			return fmt.Errorf("engine: the checkpoint's %q holds %d values, this model has %d: the run was trained "+
				"with a model of another shape (another version of towerrl, or files copied from another run), and cannot "+
				"be resumed with this one; train it afresh into a new --out (the run's config.json has its settings)",
				name, len(v.Data), len(dst))
		}
		copy(dst, v.Data)
	}
	t.opt.SetSteps(int(c.Ints["adam_steps"]))
	t.steps, t.eps, t.version = c.Ints["env_steps"], c.Ints["episodes"], c.Ints["version"]
	if err := t.restoreNorm(c); err != nil {
		return err
	}
	// t.model is the export of the restored weights: what the final evaluation scores and
	// policy.onnx holds when the run has no iteration left to train.
	if err := t.export(); err != nil {
		return err
	}
	if err := t.publish(ctx); err != nil {
		return err
	}
	return t.col.restore(func() ([]byte, error) { return t.red.batcherSnapshot(c) })
}

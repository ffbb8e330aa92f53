package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// Metrics describe one training iteration; they are the lines of metrics.jsonl.
type Metrics struct {
	Iteration    int   `json:"iteration"`
	EnvSteps     int64 `json:"env_steps"`
	Episodes     int   `json:"episodes"` // finished during this iteration
	EpisodesAll  int64 `json:"episodes_total"`
	ReturnMean   Float `json:"return_mean"` // of the episodes finished this iteration (NaN: none)
	ReturnMin    Float `json:"return_min"`
	ReturnMax    Float `json:"return_max"`
	LengthMean   Float `json:"length_mean"`
	PolicyLoss   Float `json:"policy_loss"`
	ValueLoss    Float `json:"value_loss"`
	Entropy      Float `json:"entropy"`
	ApproxKL     Float `json:"approx_kl"`
	ClipFrac     Float `json:"clip_frac"`
	ExplainedVar Float `json:"explained_variance"`
	LR           Float `json:"lr"`
	CollectSPS   Float `json:"collect_steps_per_sec"`
	LearnSPS     Float `json:"learn_samples_per_sec"`
	Version      int64 `json:"policy_version"`
	WallSeconds  Float `json:"wall_seconds"`
}

// Float is a float64 whose JSON form is null for NaN and ±Inf (an iteration in which no
// episode ended has no return statistics).
type Float float64

// MarshalJSON writes null for NaN and ±Inf.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads null as NaN.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = Float(v)
	return err
}

// Result summarises a finished run.
type Result struct {
	EvalReturnMean float64 `json:"eval_return_mean"`
	EvalReturnStd  float64 `json:"eval_return_std"`
	EvalEpisodes   int     `json:"eval_episodes"`
	EnvSteps       int64   `json:"env_steps"`
	Iterations     int     `json:"iterations"`
	WallSeconds    float64 `json:"wall_seconds"`
	TrainSeconds   float64 `json:"train_seconds"` // collection and learning, without evaluation
	Policy         string  `json:"policy"`        // path of the exported ONNX policy ("" without Out)
	Curve          string  `json:"curve,omitempty"`
	Dir            string  `json:"dir,omitempty"`
}

// Options are what Train needs besides the Config: where to write, and whom to tell.
type Options struct {
	// Out is the run directory (config.json, policy.onnx, checkpoint/, metrics.jsonl). Empty:
	// write nothing. Train creates it, or takes it when it is empty; a folder holding anything
	// else is refused (see [ErrRunDir]).
	Out string
	// Progress, when set, is called after every iteration on Train's goroutine.
	Progress func(Metrics)
	// Session configures the ONNX Runtime sessions of the batchers (library, threads).
	Session onnx.Config
	// Stop, when it is closed, ends the run gracefully: the iteration under way finishes, a
	// checkpoint is written, and Train or Resume return an error wrapping [ErrStopped]. (A
	// cancelled ctx stops at once; the last checkpoint stays.) Default: never.
	Stop <-chan struct{}
	// Change, for Resume only, edits the run's configuration before it continues; only the
	// fields [ResumeChangeable] lists may change (the new values are written to config.json).
	Change func(*Config)
}

// ErrStopped is wrapped by the error of a run stopped through Options.Stop.
var ErrStopped = errors.New("engine: run stopped")

// ResumeChangeable lists the Config fields (by JSON name) a resume may change: more or fewer
// steps, another evaluation, another checkpoint interval. Anything else would make the resumed
// run a different run, so Resume refuses it naming the field.
var ResumeChangeable = []string{"total_steps", "eval_episodes", "checkpoint_every"}

// Train runs synchronous PPO: the batchers collect with policy version v, GAE turns the
// rollout into advantages, the learner's towers make Epochs passes of minibatches over it, and
// the new weights are exported as ONNX (v+1) and hot-swapped into the batchers.
//
// With opts.Out, the run directory is locked for the run's life, config.json records the run's
// ID (cfg.RunID is replaced by a fresh one) and, for a fine-tune, InitPolicy as an absolute
// path with its SHA-256; a checkpoint is written before the first iteration, so every stop can
// be resumed.
func Train(ctx context.Context, cfg Config, opts Options) (Result, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return Result{}, err
	}
	var initData []byte
	if cfg.InitPolicy != "" {
		if initData, err = os.ReadFile(cfg.InitPolicy); err != nil {
			return Result{}, fmt.Errorf("engine: InitPolicy: %w", err)
		}
		if cfg.InitPolicy, err = filepath.Abs(cfg.InitPolicy); err != nil {
			return Result{}, fmt.Errorf("engine: InitPolicy: %w", err)
		}
		sum := sha256Hex(initData)
		if cfg.InitPolicySHA256 != "" && cfg.InitPolicySHA256 != sum {
			return Result{}, fmt.Errorf("%w: InitPolicy %s has SHA-256 %s, the config's init_policy_sha256 is %s (the file changed?)",
				ErrConfig, cfg.InitPolicy, sum, cfg.InitPolicySHA256)
		}
		cfg.InitPolicySHA256 = sum
	}
	cfg.RunID = newRunID()
	run, err := newRunDir(opts.Out, cfg)
	if err != nil {
		return Result{}, err
	}
	res, err := train(ctx, cfg, opts, run, nil, initData)
	if err != nil {
		err = errors.Join(err, run.discard())
	}
	return res, err
}

// Resume continues the run in dir from its last checkpoint with the configuration in its
// config.json: same iteration, parameters, optimiser state, environment states and random
// streams, so it finishes with the metrics an uninterrupted run would have had. metrics.jsonl
// lines written after the checkpoint are dropped (they are produced again), and temporary
// files a killed process left are removed. opts.Out is dir.
//
// The checkpoint must belong to the run (same run ID), and the configuration it was written
// with must equal config.json's after opts.Change, except for [ResumeChangeable]. A fine-tune
// resumes from the policy bytes in the checkpoint: the InitPolicy file is not needed. A run
// stopped before its first checkpoint (no metrics yet) starts again from the beginning.
func Resume(ctx context.Context, dir string, opts Options) (res Result, err error) {
	fail := func(err error) (Result, error) { return Result{}, fmt.Errorf("engine: resuming %s: %w", dir, err) }
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fail(fmt.Errorf("%w: not a run directory (%v)", ErrRunDir, err))
	}
	lock, err := lockRunDir(dir)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if lock != nil { // not handed over to the runDir
			err = errors.Join(err, lock.Release(false))
		}
	}()
	if err := removeTemps(dir); err != nil {
		return fail(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return fail(err)
	}
	stored, err := ParseConfig(b)
	if err != nil {
		return fail(fmt.Errorf("config.json: %w", err))
	}
	cfg := stored
	if opts.Change != nil {
		opts.Change(&cfg)
	}
	if err := resumeChanges(stored, cfg); err != nil {
		return fail(err)
	}
	asked := cfg // stored, with at most ResumeChangeable fields changed: config.json from now on
	if cfg, err = cfg.WithDefaults(); err != nil {
		return fail(err)
	}
	ckpt, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
	switch {
	case errors.Is(err, os.ErrNotExist) && noMetrics(dir):
		ckpt = nil // stopped before the first checkpoint: nothing was trained, start again
	case err != nil:
		return fail(err)
	default:
		if err := checkCheckpoint(ckpt, stored); err != nil {
			return fail(err)
		}
	}
	var initData []byte
	if cfg.InitPolicy != "" {
		if ckpt != nil {
			initData = ckpt.Bytes["init_policy"]
		}
		if initData == nil {
			if initData, err = os.ReadFile(cfg.InitPolicy); err != nil {
				return fail(fmt.Errorf("InitPolicy: %w", err))
			}
		}
		if sum := sha256Hex(initData); cfg.InitPolicySHA256 != "" && sum != cfg.InitPolicySHA256 {
			return fail(fmt.Errorf("the policy being fine-tuned has SHA-256 %s, config.json records %s", sum, cfg.InitPolicySHA256))
		}
	}
	if !reflect.DeepEqual(asked, stored) {
		out, err := json.MarshalIndent(asked, "", "  ")
		if err != nil {
			return fail(err)
		}
		if err := writeAtomic(filepath.Join(dir, configFile), append(out, '\n')); err != nil {
			return fail(err)
		}
	}
	first := 0
	if ckpt != nil {
		first = int(ckpt.Ints["iteration"])
	}
	run, err := openRunDir(dir, lock, first)
	if err != nil {
		return Result{}, err
	}
	lock = nil
	opts.Out = dir
	return train(ctx, cfg, opts, run, ckpt, initData)
}

// noMetrics reports whether the run in dir has not finished an iteration yet.
func noMetrics(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, metricsFile))
	return err != nil || st.Size() == 0
}

// resumeChanges refuses changes to fields outside ResumeChangeable, naming every one.
func resumeChanges(stored, asked Config) error {
	a, b := configMap(stored), configMap(asked)
	var bad []string
	for k := range union(a, b) {
		if !slices.Contains(ResumeChangeable, k) && !bytes.Equal(a[k], b[k]) {
			bad = append(bad, fmt.Sprintf("%s (run: %s, asked: %s)", k, orNone(a[k]), orNone(b[k])))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("%w: a resume may change only %s; not %s", ErrConfig, strings.Join(ResumeChangeable, ", "), strings.Join(bad, ", "))
	}
	return nil
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
	if err := resumeChanges(was, stored); err != nil {
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

func train(ctx context.Context, cfg Config, opts Options, run *runDir, ckpt *models.Checkpoint, initData []byte) (res Result, err error) {
	start := time.Now()
	defer func() { err = errors.Join(err, run.close()) }()
	spec, _ := envs.Lookup(cfg.Env)
	hs, names, err := cfg.binding(spec)
	if err != nil {
		return res, err
	}
	var pm policyModel
	if cfg.InitPolicy != "" {
		f, err := loadForeign(ctx, initData, hs, layout.Overrides{Names: names, Head: head.Kind(cfg.Head)}, opts.Session,
			rand.New(rand.NewPCG(cfg.Seed, 0x63726974696373)))
		if err != nil {
			return res, fmt.Errorf("engine: fine-tuning %s: %w", cfg.InitPolicy, err)
		}
		f.source = initData
		pm = f
	} else {
		mcfg := models.Config{Spec: hs, Hidden: cfg.Hidden, Activation: models.Activation(cfg.Activation), Shared: cfg.Shared, LogStdInit: cfg.LogStdInit}
		params, err := models.NewParams(mcfg, rand.New(rand.NewPCG(cfg.Seed, 0x706172616d73)))
		if err != nil {
			return res, err
		}
		pm = native{params}
	}
	t := newTrainer(cfg, spec, pm, opts.Session)
	defer func() { err = errors.Join(err, t.close()) }()
	first := 0
	if ckpt != nil {
		first = int(ckpt.Ints["iteration"])
	}
	if err := t.start(ctx, first); err != nil {
		return res, err
	}
	ckptPath := ""
	if run.dir != "" {
		ckptPath = filepath.Join(run.dir, checkpointFile)
	}
	if ckpt != nil {
		if err := t.restore(ctx, ckpt); err != nil {
			return res, err
		}
	} else if ckptPath != "" {
		// Iteration 0's checkpoint: a run stopped at any moment from here on can be resumed.
		if err := t.checkpoint(ctx, ckptPath, 0); err != nil {
			return res, err
		}
		run.resumable = true
	}
	iters := cfg.Iterations()
	for it := first; it < iters; it++ {
		m, err := t.iterate(ctx, it, iters)
		if err != nil {
			return res, fmt.Errorf("engine: iteration %d: %w", it+1, err)
		}
		m.WallSeconds = Float(time.Since(start).Seconds())
		art, err := t.pm.artifact(t.model, t.version)
		if err != nil {
			return res, err
		}
		if err := run.iteration(ctx, m, art, t.pm.trained(t.model)); err != nil {
			return res, err
		}
		saved := ckptPath != "" && ((it+1)%cfg.CheckpointEvery == 0 || it+1 == iters)
		if saved {
			if err := t.checkpoint(ctx, ckptPath, it+1); err != nil {
				return res, err
			}
		}
		if opts.Progress != nil {
			opts.Progress(m)
		}
		if stopped(opts.Stop) && it+1 < iters {
			if ckptPath == "" {
				return res, fmt.Errorf("%w after iteration %d of %d", ErrStopped, it+1, iters)
			}
			if !saved {
				if err := t.checkpoint(ctx, ckptPath, it+1); err != nil {
					return res, err
				}
			}
			return res, fmt.Errorf("%w after iteration %d of %d, with a checkpoint; continue it with: train --resume %s", ErrStopped, it+1, iters, run.dir)
		}
	}
	res = Result{EnvSteps: t.steps, Iterations: iters, TrainSeconds: time.Since(start).Seconds(), Policy: run.policyPath(), Dir: run.dir}
	if res.Curve, err = run.curve(fmt.Sprintf("PPO on %s, seed %d", cfg.Env, cfg.Seed)); err != nil {
		return res, err
	}
	if cfg.EvalEpisodes > 0 {
		ev, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: cfg.Env, Episodes: cfg.EvalEpisodes, Seed: cfg.Seed + 1_000_003,
			Deterministic: true}, t.pol.WithModel(t.model, t.version))
		if err != nil {
			return res, err
		}
		res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes = ev.ReturnMean, ev.ReturnStd, len(ev.Returns)
	}
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// checkpoint saves what Resume needs after iteration iterations.
func (t *trainer) checkpoint(ctx context.Context, path string, iteration int) error {
	snap, err := t.b.Snapshot()
	if err != nil {
		return err
	}
	c := &models.Checkpoint{
		Ints: map[string]int64{"iteration": int64(iteration), "env_steps": t.steps, "episodes": t.eps,
			"version": t.version, "adam_steps": int64(t.opt.Steps())},
		Bytes: map[string][]byte{"batcher": snap, "run_id": []byte(t.cfg.RunID)},
	}
	var err2 error
	if c.Bytes["config"], err2 = json.Marshal(t.cfg); err2 != nil {
		return err2
	}
	if f, ok := t.pm.(*foreign); ok {
		c.Bytes["init_policy"] = f.source
	}
	flat := t.pm.flatParams()
	st := t.opt.State()
	for name, v := range map[string][]float32{"params": flat, "adam.m": st["adam.m"], "adam.v": st["adam.v"]} {
		if err := c.Put(name, []int{len(v)}, v); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("engine: checkpoint: %w", err)
	}
	return models.SaveCheckpoint(ctx, path, c)
}

// restore sets the trainer to a checkpoint's state (after start built it afresh).
func (t *trainer) restore(ctx context.Context, c *models.Checkpoint) error {
	st := t.opt.State()
	for name, dst := range map[string][]float32{"params": t.pm.flatParams(), "adam.m": st["adam.m"], "adam.v": st["adam.v"]} {
		v, ok := c.Tensor(name)
		if !ok || len(v.Data) != len(dst) {
			return fmt.Errorf("engine: the checkpoint's %q does not fit this model (%d values, want %d)", name, len(v.Data), len(dst))
		}
		copy(dst, v.Data)
	}
	t.opt.SetSteps(int(c.Ints["adam_steps"]))
	t.steps, t.eps, t.version = c.Ints["env_steps"], c.Ints["episodes"], c.Ints["version"]
	if err := t.publish(ctx); err != nil {
		return err
	}
	return t.b.Restore(c.Bytes["batcher"])
}

// trainer holds one run's batcher, learner and buffers.
type trainer struct {
	cfg     Config
	spec    envs.Spec
	pm      policyModel
	session onnx.Config
	b       *batcher.Batcher
	pol     *batcher.Policy // the policy checked against the env at the start; re-exports reuse it
	l       *learner.Learner
	opt     learner.Optimizer
	batch   *learner.SampleBatch
	model   []byte // current policy's ONNX bytes
	version int64
	steps   int64
	eps     int64
}

func newTrainer(cfg Config, spec envs.Spec, pm policyModel, session onnx.Config) *trainer {
	return &trainer{cfg: cfg, spec: spec, pm: pm, session: session}
}

// policyModel is the trainable policy: our own architecture, or an imported foreign graph.
type policyModel interface {
	flatParams() []float32
	headSpec() head.Spec
	export(version int64) ([]byte, error)
	// artifact is policy.onnx for an export; trained is the graph the batchers run when it
	// differs from the artifact (written beside it), else nil.
	artifact(model []byte, version int64) ([]byte, error)
	trained(model []byte) []byte
	towers(Loss) learner.TowerFactory
}

// native is one of our architectures (package models).
type native struct{ p *models.Params }

func (n native) flatParams() []float32                      { return n.p.Data() }
func (n native) headSpec() head.Spec                        { return n.p.Config().Spec }
func (n native) export(v int64) ([]byte, error)             { return models.Export(n.p, v) }
func (n native) towers(c Loss) learner.TowerFactory         { return ppoTowerFactory(n.p, c) }
func (n native) artifact(m []byte, _ int64) ([]byte, error) { return m, nil }
func (n native) trained([]byte) []byte                      { return nil }

func (f *foreign) trained(m []byte) []byte {
	if f.critic {
		return m
	}
	return nil
}
func (f *foreign) flatParams() []float32 { return f.flat }
func (f *foreign) headSpec() head.Spec   { return f.spec }

func (t *trainer) start(ctx context.Context, firstIteration int) error {
	cfg := t.cfg
	n := cfg.Workers * cfg.Envs
	rows := n * cfg.RolloutSteps
	obsDim, actDim := t.spec.Observation.Dim(), t.spec.Action.Dim()
	if _, ok := t.spec.Action.(envs.Discrete); ok {
		actDim = 1
	}
	t.batch = learner.NewSampleBatch(rows, obsDim, actDim, 0)
	if err := t.export(); err != nil {
		return err
	}
	var err error
	pc := batcher.PolicyConfig{Session: t.session}
	if f, ok := t.pm.(*foreign); ok {
		// The batchers bind the policy as loadForeign did: the user's names and head, else
		// recognition (and the new critic's value).
		pc.Names = f.names
		if f.critic {
			pc.Names.Value = models.CriticOutput
		}
		if cfg.Head != "" {
			hs, _, err := cfg.binding(t.spec)
			if err != nil {
				return err
			}
			pc.Spec = &hs
		}
	}
	if t.pol, err = batcher.NewPolicy(ctx, t.model, t.version, t.spec, pc); err != nil {
		return err
	}
	if !t.pol.HasValue() {
		return errors.New("engine: PPO needs a policy with a value output to bootstrap from")
	}
	if t.b, err = batcher.New(ctx, batcher.Config{Env: cfg.Env, Workers: cfg.Workers, EnvsPerWorker: cfg.Envs,
		Steps: cfg.RolloutSteps, Seed: cfg.Seed}, t.pol); err != nil {
		return err
	}
	updates := cfg.Epochs * cfg.Minibatches
	var sched learner.Schedule = learner.Constant(cfg.LR)
	if !cfg.ConstantLR {
		sched = iterationAnneal{lr: cfg.LR, perIter: updates, iters: cfg.Iterations()}
	}
	if f, ok := t.pm.(*foreign); ok && f.critic && cfg.ValueWarmup > 0 {
		sched = &warmupBoost{Schedule: sched, perIter: updates, iters: cfg.ValueWarmup, factor: warmupLRFactor, after: &f.warmedUp}
	}
	opt := learner.NewAdam(len(t.pm.flatParams()), sched, 0.9, 0.999, cfg.AdamEps)
	t.opt = opt
	loss := Loss{ClipCoef: cfg.ClipCoef, ClipVLoss: !cfg.NoClipVLoss, EntCoef: cfg.EntCoef, VfCoef: cfg.VfCoef}
	towers, err := learner.NewTowers(learner.TowersConfig{N: cfg.Towers, Minibatch: rows / cfg.Minibatches,
		MaxGradNorm: cfg.MaxGradNorm, NormalizeAdvantages: !cfg.NoNormAdv}, t.pm.flatParams(), opt, t.batch, t.pm.towers(loss))
	if err != nil {
		return err
	}
	t.l, err = learner.NewLearner(learner.Config{TrainBatch: rows, SGDIters: cfg.Epochs, Seed: cfg.Seed,
		FirstBatch: uint64(firstIteration)}, towers, t.batch)
	return err
}

// warmupLRFactor multiplies the learning rate of the value warm-up, when only a new critic
// moves (the actor's gradients are zero, so Adam leaves it where it is): a critic that starts
// from scratch next to a pretrained actor must catch up with returns that are large at once.
const warmupLRFactor = 10

// warmupBoost is Schedule with the rate multiplied by factor for the first iters iterations.
// Once after is set the optimiser counts its steps from 0 again, and the schedule continues
// from the warm-up's perIter·iters steps.
type warmupBoost struct {
	learner.Schedule
	perIter, iters int
	factor         float64
	after          *atomic.Bool
}

func (w *warmupBoost) LR(step int) float64 {
	if w.after.Load() {
		return w.Schedule.LR(step + w.perIter*w.iters)
	}
	return w.factor * w.Schedule.LR(step)
}

// iterationAnneal is CleanRL's schedule: constant within an iteration, lr·(1 − i/iterations).
type iterationAnneal struct {
	lr      float64
	perIter int
	iters   int
}

func (a iterationAnneal) LR(step int) float64 {
	i := step / a.perIter
	return a.lr * max(1-float64(i)/float64(a.iters), 0)
}

// export writes the current parameters as policy version t.version.
func (t *trainer) export() (err error) {
	t.model, err = t.pm.export(t.version)
	return err
}

// publish exports the current parameters as policy version t.version and hot-swaps it into the
// batchers.
func (t *trainer) publish(ctx context.Context) error {
	if err := t.export(); err != nil {
		return err
	}
	return t.b.UpdatePolicy(ctx, t.pol.WithModel(t.model, t.version))
}

func (t *trainer) iterate(ctx context.Context, it, iters int) (Metrics, error) {
	cfg := t.cfg
	if f, ok := t.pm.(*foreign); ok && f.critic {
		// A new critic trains alone for the first ValueWarmup iterations. Then Adam starts
		// afresh: the actor's moments are still zero while its step count has run on, and bias
		// correction by that count would make its first steps many times too large. The
		// schedule carries on where it was (warmupBoost adds the warm-up's steps).
		f.actorFrozen.Store(it < cfg.ValueWarmup)
		if it == cfg.ValueWarmup {
			for _, slot := range t.opt.State() {
				clear(slot)
			}
			t.opt.SetSteps(0)
		}
		f.warmedUp.Store(it >= cfg.ValueWarmup)
	}
	c0 := time.Now()
	r, err := t.b.Collect(ctx, cfg.RolloutSteps)
	if err != nil {
		return Metrics{}, err
	}
	collect := time.Since(c0)
	n, od := r.N, r.ObsDim
	rows := r.T * n
	b := t.batch
	if err := GAE(r.Rewards, r.Values, r.Terminated, r.Truncated, r.FinalValues, r.LastValues, r.T, n, cfg.Gamma, cfg.Lambda, b.Advantages, b.Returns); err != nil {
		return Metrics{}, err
	}
	copy(b.Obs, r.Obs[:rows*od])
	copy(b.Actions, r.Actions[:rows*r.ActDim])
	copy(b.Rewards, r.Rewards[:rows])
	copy(b.Terminated, r.Terminated[:rows])
	copy(b.Truncated, r.Truncated[:rows])
	copy(b.LogP, r.LogP[:rows])
	copy(b.Values, r.Values[:rows])
	copy(b.Version, r.Version[:rows])
	if err := b.SetLen(rows); err != nil {
		return Metrics{}, err
	}
	ev := explainedVariance(b.Values[:rows], b.Returns[:rows])
	if f, ok := t.pm.(*foreign); ok && f.critic && it == 0 {
		// A new critic starts at the mean return of the first rollout (its output bias), not
		// at 0: a pretrained policy's returns can be far from 0, and Adam's steps of about lr
		// would take thousands of updates to get there.
		var mean float64
		for _, r := range b.Returns[:rows] {
			mean += float64(r)
		}
		f.flat[f.criticBias] += float32(mean / float64(rows))
	}
	l0 := time.Now()
	lr := t.opt.CurrentLR() // the rate of this iteration's updates (constant within one)
	if err := t.l.Submit(ctx, b); err != nil {
		return Metrics{}, err
	}
	var res learner.Result
	select {
	case res = <-t.l.Results():
	case <-ctx.Done():
		return Metrics{}, ctx.Err()
	}
	if res.Err != nil {
		return Metrics{}, res.Err
	}
	<-t.l.Released()
	// Training health: a non-finite loss or weight stops the run here, before this update is
	// exported, checkpointed or written, so the last good policy and checkpoint stay.
	if err := finite(res.Stats, t.pm.flatParams()); err != nil {
		return Metrics{}, fmt.Errorf("%w; the last good policy.onnx and checkpoint are kept (lower lr or max_grad_norm, or look for NaN in the env's observations and rewards)", err)
	}
	learn := time.Since(l0)
	t.steps += int64(rows)
	t.version++
	if err := t.publish(ctx); err != nil {
		return Metrics{}, err
	}
	nan := Float(math.NaN())
	m := Metrics{Iteration: it + 1, EnvSteps: t.steps, Episodes: len(r.Episodes), ReturnMean: nan, ReturnMin: nan,
		ReturnMax: nan, LengthMean: nan, PolicyLoss: Float(res.Stats[1]), ValueLoss: Float(res.Stats[2]), Entropy: Float(res.Stats[3]),
		ApproxKL: Float(res.Stats[4]), ClipFrac: Float(res.Stats[5]), ExplainedVar: Float(ev), LR: Float(lr),
		CollectSPS: Float(float64(rows) / collect.Seconds()), LearnSPS: Float(float64(res.Trained) / learn.Seconds()), Version: t.version}
	if len(r.Episodes) > 0 {
		var ret, length batcher.Stats
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, e := range r.Episodes {
			ret.Add(e.Return)
			length.Add(float64(e.Length))
			lo, hi = math.Min(lo, e.Return), math.Max(hi, e.Return)
		}
		m.ReturnMean, m.ReturnMin, m.ReturnMax, m.LengthMean = Float(ret.Mean()), Float(lo), Float(hi), Float(length.Mean())
	}
	t.eps += int64(len(r.Episodes))
	m.EpisodesAll = t.eps
	return m, nil
}

// explainedVariance is 1 − Var(returns − values)/Var(returns), NaN when the returns are constant.
func explainedVariance(values, returns []float32) float64 {
	var y, d batcher.Stats
	for i, v := range values {
		y.Add(float64(returns[i]))
		d.Add(float64(returns[i] - v))
	}
	vy := y.Std() * y.Std()
	if vy == 0 {
		return math.NaN()
	}
	return 1 - d.Std()*d.Std()/vy
}

func (t *trainer) close() error {
	var errs []error
	if t.l != nil {
		errs = append(errs, t.l.Close())
	}
	if t.b != nil {
		errs = append(errs, t.b.Close())
	}
	return errors.Join(errs...)
}

// stopped reports whether stop is closed (never, for a nil channel).
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// ErrNonFinite is wrapped by the error of a run stopped by a NaN or infinite loss or weight.
var ErrNonFinite = errors.New("engine: training diverged")

// finite checks the learner's statistics (ppoStats order) and the parameters.
func finite(stats []float64, params []float32) error {
	for i, v := range stats {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			name := "statistic " + strconv.Itoa(i)
			if i < len(ppoStats) {
				name = ppoStats[i]
			}
			return fmt.Errorf("%w: the %s is %v", ErrNonFinite, name, v)
		}
	}
	for i, v := range params {
		if v != v || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: parameter %d of %d became %v (the gradient was not finite)", ErrNonFinite, i, len(params), v)
		}
	}
	return nil
}

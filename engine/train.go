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
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
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
	// write nothing.
	Out string
	// Progress, when set, is called after every iteration on Train's goroutine.
	Progress func(Metrics)
	// Session configures the ONNX Runtime sessions of the batchers (library, threads).
	Session onnx.Config
}

// Train runs synchronous PPO: the batchers collect with policy version v, GAE turns the
// rollout into advantages, the learner's towers make Epochs passes of minibatches over it, and
// the new weights are exported as ONNX (v+1) and hot-swapped into the batchers.
func Train(ctx context.Context, cfg Config, opts Options) (Result, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return Result{}, err
	}
	run, err := newRunDir(opts.Out, cfg)
	if err != nil {
		return Result{}, err
	}
	return train(ctx, cfg, opts, run, nil)
}

// Resume continues the run in dir from its last checkpoint with the configuration in its
// config.json: same iteration, parameters, optimiser state, environment states and random
// streams, so it finishes with the metrics an uninterrupted run would have had. metrics.jsonl
// lines written after the checkpoint are dropped (they are produced again). opts.Out is dir.
func Resume(ctx context.Context, dir string, opts Options) (Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return Result{}, fmt.Errorf("engine: resuming %s: %w", dir, err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return Result{}, fmt.Errorf("engine: resuming %s: config.json: %w", dir, err)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		return Result{}, fmt.Errorf("engine: resuming %s: %w", dir, err)
	}
	ckpt, err := models.LoadCheckpoint(ctx, filepath.Join(dir, checkpointFile))
	if err != nil {
		return Result{}, fmt.Errorf("engine: resuming %s: %w", dir, err)
	}
	run, err := openRunDir(dir, int(ckpt.Ints["iteration"]))
	if err != nil {
		return Result{}, err
	}
	opts.Out = dir
	return train(ctx, cfg, opts, run, ckpt)
}

// checkpointFile is the checkpoint's path inside a run directory.
var checkpointFile = filepath.Join("checkpoint", "state.ckpt")

func train(ctx context.Context, cfg Config, opts Options, run *runDir, ckpt *models.Checkpoint) (res Result, err error) {
	start := time.Now()
	defer func() { err = errors.Join(err, run.close()) }()
	spec, _ := envs.Lookup(cfg.Env)
	hs, names, err := cfg.binding(spec)
	if err != nil {
		return res, err
	}
	var pm policyModel
	if cfg.InitPolicy != "" {
		data, err := os.ReadFile(cfg.InitPolicy)
		if err != nil {
			return res, fmt.Errorf("engine: InitPolicy: %w", err)
		}
		f, err := loadForeign(ctx, data, hs, names, opts.Session)
		if err != nil {
			return res, fmt.Errorf("engine: fine-tuning %s: %w", cfg.InitPolicy, err)
		}
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
	if ckpt != nil {
		if err := t.restore(ctx, ckpt); err != nil {
			return res, err
		}
	}
	iters := cfg.Iterations()
	for it := first; it < iters; it++ {
		m, err := t.iterate(ctx, it, iters)
		if err != nil {
			return res, fmt.Errorf("engine: iteration %d: %w", it, err)
		}
		m.WallSeconds = Float(time.Since(start).Seconds())
		if err := run.iteration(ctx, m, t.model); err != nil {
			return res, err
		}
		if run.dir != "" && ((it+1)%cfg.CheckpointEvery == 0 || it+1 == iters) {
			if err := t.checkpoint(ctx, filepath.Join(run.dir, checkpointFile), it+1); err != nil {
				return res, err
			}
		}
		if opts.Progress != nil {
			opts.Progress(m)
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
		Bytes: map[string][]byte{"batcher": snap},
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
	towers(Loss) learner.TowerFactory
}

// native is one of our architectures (package models).
type native struct{ p *models.Params }

func (n native) flatParams() []float32              { return n.p.Data() }
func (n native) headSpec() head.Spec                { return n.p.Config().Spec }
func (n native) export(v int64) ([]byte, error)     { return models.Export(n.p, v) }
func (n native) towers(c Loss) learner.TowerFactory { return ppoTowerFactory(n.p, c) }
func (f *foreign) flatParams() []float32            { return f.flat }
func (f *foreign) headSpec() head.Spec              { return f.spec }

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
		pc.Spec, pc.Names = &f.spec, f.names
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

// runDir writes a run directory: config.json at the start, then after every iteration a line of
// metrics.jsonl and the latest policy.onnx (written under a temporary name, then renamed).
type runDir struct {
	dir     string
	metrics *os.File
	history []Metrics // for the learning curve
}

func newRunDir(dir string, cfg Config) (*runDir, error) {
	if dir == "" {
		return &runDir{}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: run directory: %w", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "metrics.jsonl")); err == nil && st.Size() > 0 {
		return nil, fmt.Errorf("engine: %s already holds a run (metrics.jsonl); resume it or choose another folder", dir)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, "config.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "metrics.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("engine: run directory: %w", err)
	}
	return &runDir{dir: dir, metrics: f}, nil
}

// openRunDir reopens a run directory to resume after iteration iterations: metrics.jsonl keeps
// its first iteration lines (later ones are dropped) and they seed the learning curve.
func openRunDir(dir string, iterations int) (*runDir, error) {
	path := filepath.Join(dir, "metrics.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
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
	if err := os.Truncate(path, int64(keep)); err != nil {
		return nil, fmt.Errorf("engine: resuming: %w", err)
	}
	if r.metrics, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("engine: resuming: %w", err)
	}
	return r, nil
}

func (r *runDir) policyPath() string {
	if r.dir == "" {
		return ""
	}
	return filepath.Join(r.dir, "policy.onnx")
}

func (r *runDir) iteration(_ context.Context, m Metrics, model []byte) error {
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
	return writeAtomic(r.policyPath(), model)
}

// curve writes curve.png from the iterations of this process.
func (r *runDir) curve(title string) (string, error) {
	if r.dir == "" {
		return "", nil
	}
	path := filepath.Join(r.dir, "curve.png")
	return path, WriteCurve(path, title, r.history)
}

func (r *runDir) close() error {
	if r.metrics == nil {
		return nil
	}
	return r.metrics.Close()
}

// writeAtomic writes data to path through a temporary file in the same folder and a rename.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("engine: writing %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("engine: writing %s: %w", path, err)
	}
	return nil
}

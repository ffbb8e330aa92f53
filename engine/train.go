package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/ddppo"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/onnx"
)

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
	// Plot, when set, draws the learning curve as curve.png in Out at the end of the run
	// (package engine/curve's Write; the engine itself links no plotting library).
	Plot func(path, title string, ms []Metrics) error
	// Draw, when set, makes the Drawer of an env's episodes (package engine/gif's Drawer,
	// which draws the classic-control envs as Gymnasium does; the engine itself links no
	// renderer). Config.GifEvery needs it, and refuses an env it cannot draw.
	Draw func(env string) (Drawer, error)
	// Change, for Resume only, edits the run's configuration before it continues; only the
	// fields [ResumeChangeable] lists may change (the new values are written to config.json).
	Change func(*Config)
	// Ranks is this process's place in a DD-PPO job (Config.Algo "ddppo"): learner/mpi's
	// World under mpirun, or one of mpi.InProcess's ranks. Every rank calls Train (or Resume)
	// with the same Config; rank 0 alone uses Out, Progress and Plot. Nil, or a group of one
	// rank: a single process.
	Ranks ddppo.Group

	// Source, when set, feeds the run with rollouts collected elsewhere (remote batchers:
	// cmd/train --serve) instead of its own batchers, and receives each policy version to
	// publish (every BroadcastInterval iterations for impala and appo, every iteration for
	// ppo, which trains only on rollouts of the current version and drops older ones). Its
	// rollouts must have Workers×Envs envs of RolloutSteps steps. Checkpoints then hold no
	// batcher state. Not with Ranks.
	Source RolloutSource

	// Slowdown is a test hook for DD-PPO's straggler preemption (Config.SyncFrac): a rank
	// whose batchers wait (Slowdown−1) times as long as each env step took, so it collects
	// Slowdown times slower. Values of 1 or less: none.
	Slowdown float64

	// NoTensorBoard turns off the TensorBoard event files (events.out.tfevents.*) written into
	// Out beside metrics.jsonl, with CleanRL's tag names (docs/watching.md).
	NoTensorBoard bool

	// ready, set by Train and Resume on rank 0 of a DD-PPO job, sends the run to the other
	// ranks just before training.
	ready func(ddppo.Shared) error
}

// ErrStopped is wrapped by the error of a run stopped through Options.Stop.
var ErrStopped = errors.New("engine: run stopped")

// ResumeChangeable lists the Config fields (by JSON name) a resume may change: more or fewer
// steps, another evaluation (at the end or during training: evaluations and drawn episodes
// run on envs of their own and leave the training alone), another stopping return, another
// checkpoint interval, spinning or not (same results), and the ring of rollouts an
// asynchronous run buffers (its checkpoints hold the learner's state only, so a run given a
// queue too large for the machine can go on with a smaller one). Anything else would make the
// resumed run a different run, so Resume refuses it naming the field.
var ResumeChangeable = []string{"total_steps", "eval_episodes", "eval_every", "stop_at_return", "gif_every", "checkpoint_every", "no_spin", "queue_size"}

// Train runs synchronous PPO: the batchers collect with policy version v, GAE turns the
// rollout into advantages, the learner's towers make Epochs passes of minibatches over it, and
// the new weights are published in place into the batchers as version v+1.
//
// With opts.Out, the run directory is locked for the run's life, config.json records the run's
// ID (cfg.RunID is replaced by a fresh one) and, for a fine-tune, InitPolicy as an absolute
// path with its SHA-256; a checkpoint is written before the first iteration, so every stop can
// be resumed.
func Train(ctx context.Context, cfg Config, opts Options) (res Result, err error) {
	if opts.Ranks, err = ranksOf(cfg, opts.Ranks); err != nil {
		return Result{}, err
	}
	if g := opts.Ranks; g != nil {
		if g.Rank() > 0 {
			return follow(ctx, cfg, opts, false)
		}
		done := lead(ctx, g, &opts)
		defer func() { err = done(err) }()
	}
	cfg, spec, err := cfg.resolve()
	if err != nil {
		return Result{}, err
	}
	if err := checkOptions(cfg, spec, opts); err != nil {
		return Result{}, err
	}
	var initData []byte
	if cfg.InitPolicy != "" {
		if cfg.InitPolicy, err = filepath.Abs(cfg.InitPolicy); err != nil {
			return Result{}, fmt.Errorf("engine: InitPolicy: %w", err)
		}
		if initData, cfg.InitPolicySHA256, err = rundir.ReadInitPolicy(cfg.InitPolicy, cfg.InitPolicySHA256); errors.Is(err, rundir.ErrInitPolicyChanged) {
			return Result{}, fmt.Errorf("%w: %w", ErrConfig, err)
		} else if err != nil {
			return Result{}, fmt.Errorf("engine: %w", err)
		}
	}
	cfg.RunID = rundir.NewRunID()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return Result{}, err
	}
	run, err := rundir.Create[Metrics](opts.Out, append(b, '\n'))
	if err != nil {
		return Result{}, err
	}
	if opts.ready != nil {
		if err := opts.ready(ddppo.Shared{Config: b, InitPolicy: initData, Saving: run.Path() != ""}); err != nil {
			return Result{}, errors.Join(err, run.Discard(), run.Close())
		}
	}
	res, err = trainRun(ctx, cfg, spec, opts, run, nil, initData, run.Path() != "")
	if err != nil {
		err = errors.Join(err, run.Discard())
	}
	return res, err
}

// lead makes rank 0 of a DD-PPO job send the run to the other ranks just before training
// (opts.ready), and returns what the run's end must do with its error: send it to the other
// ranks if it came before the run was sent.
func lead(ctx context.Context, g ddppo.Group, opts *Options) func(error) error {
	sent := false
	opts.ready = func(s ddppo.Shared) error { sent = true; return ddppo.Send(ctx, g, s, nil) }
	return func(err error) error {
		if sent {
			return err
		}
		return ddppo.Send(ctx, g, ddppo.Shared{}, err)
	}
}

// trainRun trains cfg (resolved, on the env of spec) from checkpoint ckpt (nil: from the
// start) into run. saving: the run writes checkpoints (rank 0 has a run directory; the other
// ranks of a DD-PPO job take part in writing them).
func trainRun(ctx context.Context, cfg Config, spec envs.Spec, opts Options, run *runDir, ckpt *models.Checkpoint, initData []byte, saving bool) (res Result, err error) {
	release, err := usePrecision(cfg.MatmulPrecision)
	if err != nil {
		return res, errors.Join(err, run.Close())
	}
	defer release()
	if capabilities(cfg.Algo).Replay { // an off-policy algorithm: its own loop (offpolicy.go)
		return trainReplay(ctx, cfg, spec, opts, run, ckpt, initData, saving)
	}
	start := time.Now()
	defer func() { err = errors.Join(err, run.Close()) }()
	t, err := openTrainer(ctx, cfg, spec, opts, run, initData)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, t.close()) }()
	l := &loop{t: t, run: run, opts: opts, saving: saving, start: start}
	if err := l.begin(ctx, ckpt); err != nil {
		return res, err
	}
	for it := l.first; it < l.iters; it++ {
		m, err := t.iterate(ctx, it, l.iters)
		if errors.Is(err, ErrNonFinite) {
			err = fmt.Errorf("%w; %s", err, kept(run))
		}
		if errors.Is(err, errStopWaiting) { // remote collection: a stop must not wait for batchers
			return res, t.stopWaiting(ctx, run, l.ckptPath, it, l.iters, saving)
		}
		if err != nil {
			return res, fmt.Errorf("engine: iteration %d: %w", it+1, err)
		}
		if err := l.end(ctx, it, m); err != nil {
			return res, err
		}
	}
	return l.finish(ctx)
}

// openTrainer opens the run's TensorBoard files and makes its policy model and trainer,
// started (its batchers collecting).
func openTrainer(ctx context.Context, cfg Config, spec envs.Spec, opts Options, run *runDir, initData []byte) (*trainer, error) {
	if err := openTensorBoard(run, cfg, opts.NoTensorBoard); err != nil {
		return nil, err
	}
	hb, err := cfg.binding(spec)
	if err != nil {
		return nil, err
	}
	pm, err := newPolicyModel(ctx, cfg, hb, initData, opts.Session)
	if err != nil {
		return nil, err
	}
	return newTrainer(cfg, spec, pm, opts)
}

// loop is trainRun's iteration loop: what every iteration ends with (policy.onnx, the
// checkpoint, metrics, a stop), and the run's end.
type loop struct {
	t            *trainer
	run          *runDir
	opts         Options
	saving       bool
	start        time.Time
	ckptPath     string // the checkpoint's path; empty without a run directory
	first, iters int    // the first iteration to run, and the run's iterations (fewer once StopAtReturn is reached)
	complete     bool   // resumed from a checkpoint with nothing left to train
	stoppedEarly string // why the run ended before TotalSteps (Result.StoppedEarly)
}

// begin starts the trainer at the checkpoint's iteration, restores it (or writes iteration
// 0's checkpoint: a run stopped at any moment from then on can be resumed), and works out the
// iterations left.
func (l *loop) begin(ctx context.Context, ckpt *models.Checkpoint) error {
	t := l.t
	if ckpt != nil {
		l.first = int(ckpt.Ints["iteration"])
	}
	if err := t.start(ctx, l.first); err != nil {
		return err
	}
	if l.run.Path() != "" {
		l.ckptPath = filepath.Join(l.run.Path(), checkpointFile)
	}
	if ckpt != nil {
		if err := t.restore(ctx, ckpt); err != nil {
			return err
		}
	} else if l.saving {
		if err := t.checkpoint(ctx, l.ckptPath, 0); err != nil {
			return err
		}
		if err := t.waitCheckpoint(); err != nil {
			return err
		}
		l.run.Resumable()
	}
	var err error
	if t.ev, err = newEvaluator(t.cfg, t.spec, l.opts, l.run, t.steps); err != nil {
		return err
	}
	if l.iters, err = t.red.iterations(t.cfg); err != nil { // TotalSteps counts every rank's steps
		return err
	}
	// A run that stopped at StopAtReturn, resumed with the same return, is complete too (rank
	// 0 of a DD-PPO job holds the record and tells the others).
	stoppedBefore := false
	if ckpt != nil && t.cfg.StopAtReturn != nil {
		if stoppedBefore, err = t.red.agree(ctx, t.ev.reachedBy(t.steps)); err != nil {
			return err
		}
	}
	l.complete = ckpt != nil && (l.first >= l.iters || stoppedBefore)
	if l.complete && l.first < l.iters {
		l.stoppedEarly, l.iters = t.ev.stoppedBefore(), l.first
	}
	if l.complete && t.red.root() {
		// Nothing left to train: policy.onnx must be the checkpoint's policy.
		return t.repairPolicy(l.run)
	}
	return nil
}

// end ends iteration it, whose metrics are m: the evaluation and the episode drawn when due
// (Config.EvalEvery, GifEvery), policy.onnx every CheckpointEvery iterations, at the end and
// at a stop (the batchers have every version in place meanwhile), the checkpoint, the metrics
// line and the progress callback; a stop asked of one rank stops every rank here, with an
// error wrapping ErrStopped. An evaluation that reaches StopAtReturn makes this iteration the
// run's last.
func (l *loop) end(ctx context.Context, it int, m Metrics) error {
	t := l.t
	reached, err := t.evaluateAfter(ctx, it, &m)
	if err != nil {
		return err
	}
	if reached && it+1 < l.iters { // a finished run, shorter
		l.stoppedEarly, l.iters = t.ev.stopReason(m.Eval, it+1, l.iters, t.steps), it+1
	}
	last := it+1 == l.iters
	saved := l.saving && ((it+1)%t.cfg.CheckpointEvery == 0 || last)
	if saved || last {
		if err := t.red.checkSame(ctx, t.obsNorm.published(t.pm.Flat())); err != nil { // with the normaliser's map
			return err
		}
	}
	wrote := (saved || last || stopped(l.opts.Stop)) && t.red.root()
	if wrote {
		p0 := time.Now()
		if err := t.writePolicy(l.run); err != nil {
			return err
		}
		m.PublishSeconds += Float(time.Since(p0).Seconds())
	}
	c0 := time.Now()
	var snap *models.Checkpoint
	if saved {
		if snap, err = t.snapshot(ctx, it+1); err != nil {
			return err
		}
	}
	m.CheckpointSeconds = Float(time.Since(c0).Seconds())
	m.WallSeconds = Float(time.Since(l.start).Seconds())
	// The metrics line goes first: a checkpoint on disk is never ahead of metrics.jsonl.
	if err := l.run.Metrics(m); err != nil {
		return err
	}
	if snap != nil {
		if err := t.save(ctx, l.ckptPath, snap); err != nil {
			return err
		}
	}
	if l.opts.Progress != nil {
		l.opts.Progress(m)
	}
	stop, err := t.red.agree(ctx, stopped(l.opts.Stop))
	if err != nil || !stop || last {
		return err
	}
	return l.stop(ctx, it, wrote, saved)
}

// stop ends the run after iteration it at a stop: policy.onnx and a checkpoint of where it
// stands, unless this iteration wrote them (wrote, saved), then an error wrapping ErrStopped
// that says how to continue.
func (l *loop) stop(ctx context.Context, it int, wrote, saved bool) error {
	t := l.t
	if !l.saving {
		return fmt.Errorf("%w after iteration %d of %d", ErrStopped, it+1, l.iters)
	}
	if !wrote && t.red.root() {
		if err := t.writePolicy(l.run); err != nil {
			return err
		}
	}
	if !saved {
		if err := t.checkpoint(ctx, l.ckptPath, it+1); err != nil {
			return err
		}
	}
	if err := t.waitWrites(); err != nil {
		return err
	}
	return fmt.Errorf("%w after iteration %d of %d, with a checkpoint; continue it with: train --resume %s", ErrStopped, it+1, l.iters, l.run.Path())
}

// finish waits for the run's files and makes its Result: the parameters' hash, the learning
// curve, and the final evaluation of Config.EvalEpisodes episodes.
func (l *loop) finish(ctx context.Context) (res Result, err error) {
	t := l.t
	if err := t.waitWrites(); err != nil {
		return res, err
	}
	h := paramsHash(t.pm.Flat())
	res = Result{EnvSteps: t.steps, Iterations: max(l.first, l.iters), TrainSeconds: time.Since(l.start).Seconds(), Policy: l.run.PolicyPath(), Dir: l.run.Path(),
		ParamsSHA256: hex.EncodeToString(h[:]), Complete: l.complete, StoppedEarly: l.stoppedEarly}
	t.red.result(&res)
	t.col.result(&res)
	if t.red.root() {
		res.Best = t.ev.best
	}
	if res.Curve, err = l.run.Curve(l.opts.Plot, curveTitle(t.cfg)); err != nil {
		return res, err
	}
	if t.cfg.EvalEpisodes > 0 && t.red.root() {
		ev, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: t.spec, Episodes: t.cfg.EvalEpisodes, Seed: t.cfg.Seed + evalSeedOffset,
			Deterministic: true}, t.pol.WithModel(t.model, t.version)) // t.model: the last export
		if err != nil {
			return res, err
		}
		res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes = ev.ReturnMean, ev.ReturnStd, len(ev.Returns)
	}
	res.WallSeconds = time.Since(l.start).Seconds()
	return res, nil
}

// curveTitle is the learning curve's title: the run's algorithm, env and seed.
func curveTitle(cfg Config) string {
	return fmt.Sprintf("%s on %s, seed %d", strings.ToUpper(cfg.Algo), cfg.Env, cfg.Seed)
}

// paramsHash is the SHA-256 of params' float32 bytes (Result.ParamsSHA256; the ranks of a
// DD-PPO job compare theirs).
func paramsHash(params []float32) [32]byte {
	return sha256.Sum256(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(params))), 4*len(params)))
}

// kept says what a run stopped by a non-finite update leaves in its directory: what is there
// is the last good state, and policy.onnx only when one was written.
func kept(run *runDir) string {
	if run.Path() == "" {
		return "nothing was written (no run directory)"
	}
	if _, err := os.Stat(run.PolicyPath()); err != nil {
		return fmt.Sprintf("the last good checkpoint is kept in %s; no policy.onnx was written yet (one is written every checkpoint_every iterations)", run.Path())
	}
	return fmt.Sprintf("the last good policy.onnx and checkpoint are kept in %s", run.Path())
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

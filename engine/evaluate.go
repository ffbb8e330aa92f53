package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
)

// evalSeedOffset seeds a run's evaluation envs (Seed + evalSeedOffset): every evaluation of a
// run, during training and at the end, runs the same episodes' starts, so their scores
// compare, on envs whose seeds no training env has.
const evalSeedOffset = 1_000_003

// EvalMetrics describe an evaluation during training (Config.EvalEvery): EvalEpisodes
// deterministic episodes of the policy trained so far.
type EvalMetrics struct {
	ReturnMean Float `json:"return_mean"`
	ReturnStd  Float `json:"return_std"` // population standard deviation, as the final evaluation's
	LengthMean Float `json:"length_mean"`
	Episodes   int   `json:"episodes"`
	// Best: the best mean return of the run so far (ties go to the earlier policy); this
	// policy is now best_policy.onnx.
	Best    bool  `json:"best"`
	Seconds Float `json:"seconds"`
}

// BestPolicy is the record of the best policy the evaluations during training found (best.json
// in the run directory, beside best_policy.onnx).
type BestPolicy struct {
	// Path is best_policy.onnx's path ("" without a run directory); best.json holds the
	// file's name, relative to the run directory, which may move.
	Path       string  `json:"path,omitempty"`
	Iteration  int     `json:"iteration"` // iterations (on-policy) or gradient rounds trained
	EnvSteps   int64   `json:"env_steps"`
	ReturnMean float64 `json:"return_mean"`
	ReturnStd  float64 `json:"return_std"`
	Episodes   int     `json:"episodes"`
	// Seed is the evaluation envs' seed: `eval --policy best_policy.onnx --episodes Episodes
	// --seed Seed` runs the same episodes.
	Seed   uint64 `json:"seed"`
	SHA256 string `json:"sha256"` // of best_policy.onnx
}

// evaluator runs a run's evaluations during training (Config.EvalEvery) and keeps the best
// policy they find: the piece any training loop calls, counting iterations (on-policy) or env
// steps (off-policy) for its period. The evaluations run on batchers of their own (as
// batcher.Evaluate does), so the training's envs, random streams and sessions are untouched
// and a resumed run stays bit-identical. Only the process that writes the run directory (rank
// 0) evaluates. An evaluator belongs to its loop's goroutine.
type evaluator struct {
	every    int64 // 0: no evaluation during training
	gifEvery int64 // 0: no episode drawn
	drawer   Drawer
	episodes int
	seed     uint64
	stopAt   *float64
	spec     envs.Spec
	run      *runDir
	best     *BestPolicy // nil before the first evaluation
}

// newEvaluator makes the evaluator of a run of cfg (resolved) on spec's env, writing into
// run, which continues from env step from (its checkpoint's; 0 for a fresh run). A resumed
// run's best.json is read back, unless its best_policy.onnx is not the file it describes (a
// process killed between the two writes) or it was found past the checkpoint (by a process
// killed before its next checkpoint): the run evaluates that policy again, as it retrains it
// bit for bit, and marks the evaluations best as the uninterrupted run did. Until the next
// evaluation replaces them, the files stay as they were.
func newEvaluator(cfg Config, spec envs.Spec, opts Options, run *runDir, from int64) (*evaluator, error) {
	e := &evaluator{every: cfg.EvalEvery, episodes: cfg.EvalEpisodes, seed: cfg.Seed + evalSeedOffset,
		stopAt: cfg.StopAtReturn, spec: spec, run: run}
	if cfg.GifEvery > 0 && run.Path() != "" { // drawn into the run directory: none without one
		var err error
		if e.drawer, err = drawerOf(cfg, spec, opts); err != nil {
			return nil, err
		}
		e.gifEvery = cfg.GifEvery
	}
	data, sum, err := run.ReadBest()
	if err != nil || data == nil {
		return e, err
	}
	var b BestPolicy
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("engine: %s: %w; move it out of the run directory to start the record again",
			filepath.Join(run.Path(), rundir.BestFile), err)
	}
	if b.SHA256 == sum && b.EnvSteps <= from {
		b.Path = e.bestPath()
		e.best = &b
	}
	return e, nil
}

// gifDue reports whether an episode is to be drawn as the loop's count goes from prev to now.
func (e *evaluator) gifDue(prev, now int64) bool {
	return e.gifEvery > 0 && now/e.gifEvery > prev/e.gifEvery
}

// draw records one deterministic episode of pol (env 0's first of the evaluation envs) and
// writes it as a GIF into the run directory and TensorBoard (rundir.Dir.EpisodeGIF) at
// envSteps; it returns the file's path in the run directory.
func (e *evaluator) draw(ctx context.Context, pol *bind.Policy, envSteps int64) (string, error) {
	tr, err := batcher.RecordEpisode(ctx, batcher.EvalConfig{Env: e.spec, Seed: e.seed, Deterministic: true}, pol)
	if err != nil {
		return "", fmt.Errorf("engine: recording an episode to draw: %w", err)
	}
	var buf bytes.Buffer
	if err := e.drawer.Draw(&buf, tr); err != nil {
		return "", fmt.Errorf("engine: drawing an episode: %w", err)
	}
	path, err := e.run.EpisodeGIF(envSteps, tagEpisode, e.drawer.Width, e.drawer.Height, buf.Bytes())
	if err != nil {
		return "", err
	}
	return filepath.Rel(e.run.Path(), path)
}

// bestPath is best_policy.onnx's path ("" without a run directory).
func (e *evaluator) bestPath() string {
	if e.run.Path() == "" {
		return ""
	}
	return filepath.Join(e.run.Path(), rundir.BestPolicyFile)
}

// due reports whether an evaluation falls due as the loop's count (iterations, or env steps)
// goes from prev to now: once per multiple of EvalEvery crossed.
func (e *evaluator) due(prev, now int64) bool {
	return e.every > 0 && now/e.every > prev/e.every
}

// reachedBy reports whether an evaluation at or before envSteps reached StopAtReturn (the
// best's record says so): a run stopped by it is complete when resumed with the same return.
func (e *evaluator) reachedBy(envSteps int64) bool {
	return e.stopAt != nil && e.best != nil && e.best.EnvSteps <= envSteps && e.best.ReturnMean >= *e.stopAt
}

// reaches reports whether evaluation m reached StopAtReturn.
func (e *evaluator) reaches(m *EvalMetrics) bool {
	return e.stopAt != nil && m != nil && float64(m.ReturnMean) >= *e.stopAt
}

// evaluate runs the evaluation of pol (bound as the batchers bind the policy trained) after
// iteration iteration, at envSteps env steps; artifact is the policy's policy.onnx bytes, kept
// as best_policy.onnx when it is the best so far.
func (e *evaluator) evaluate(ctx context.Context, pol *bind.Policy, artifact []byte, iteration int, envSteps int64) (*EvalMetrics, error) {
	t0 := time.Now()
	ev, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: e.spec, Episodes: e.episodes, Seed: e.seed, Deterministic: true}, pol)
	if err != nil {
		return nil, fmt.Errorf("engine: evaluation after iteration %d: %w", iteration, err)
	}
	m := &EvalMetrics{ReturnMean: Float(ev.ReturnMean), ReturnStd: Float(ev.ReturnStd), LengthMean: Float(ev.LengthMean),
		Episodes: len(ev.Returns)}
	if e.best == nil || ev.ReturnMean > e.best.ReturnMean {
		b := &BestPolicy{Iteration: iteration, EnvSteps: envSteps, ReturnMean: ev.ReturnMean, ReturnStd: ev.ReturnStd,
			Episodes: len(ev.Returns), Seed: e.seed, SHA256: rundir.SHA256Hex(artifact), Path: rundir.BestPolicyFile}
		rec, err := json.MarshalIndent(b, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := e.run.Best(artifact, append(rec, '\n')); err != nil {
			return nil, err
		}
		b.Path = e.bestPath()
		e.best, m.Best = b, true
	}
	m.Seconds = Float(time.Since(t0).Seconds())
	return m, nil
}

// stopReason says why a run whose evaluation m, after iteration iteration of iterations at
// envSteps env steps, reached StopAtReturn stopped there (m is nil on the ranks of a DD-PPO
// job that do not evaluate).
func (e *evaluator) stopReason(m *EvalMetrics, iteration, iterations int, envSteps int64) string {
	if m == nil {
		return fmt.Sprintf("stopped early: rank 0's evaluation after iteration %d of %d (env step %d) reached stop_at_return %g",
			iteration, iterations, envSteps, *e.stopAt)
	}
	return fmt.Sprintf("stopped early: the evaluation after iteration %d of %d (env step %d) scored %g over %d episodes, reaching stop_at_return %g",
		iteration, iterations, envSteps, float64(m.ReturnMean), m.Episodes, *e.stopAt)
}

// stoppedBefore says why a resumed run that had stopped at StopAtReturn trains nothing.
func (e *evaluator) stoppedBefore() string {
	if e.best == nil { // a DD-PPO rank other than 0
		return fmt.Sprintf("the run had stopped early, reaching stop_at_return %g; nothing was trained now", *e.stopAt)
	}
	return fmt.Sprintf("the run had stopped early: its evaluation at env step %d scored %g, reaching stop_at_return %g; nothing was trained now (resume with a higher --stop-at-return to train on)",
		e.best.EnvSteps, e.best.ReturnMean, *e.stopAt)
}

// evaluateAfter runs the evaluation due after iteration it (Config.EvalEvery counts
// iterations for an on-policy loop) into m.Eval, and draws the episode due (Config.GifEvery)
// into m.GIF, on the process that writes the run directory; it reports whether the run stops
// there at StopAtReturn, which every rank of a DD-PPO job agrees on. The policy is exported
// (as policy.onnx would be) for them alone: the batchers keep their weights, published in
// place.
func (t *trainer) evaluateAfter(ctx context.Context, it int, m *Metrics) (bool, error) {
	evalDue, gifDue := t.ev.due(int64(it), int64(it+1)), t.ev.gifDue(int64(it), int64(it+1))
	if !evalDue && !gifDue {
		return false, nil
	}
	reached := false
	if t.red.root() {
		art, _, err := t.artifacts()
		if err != nil {
			return false, err
		}
		pol := t.pol.WithModel(t.model, t.version)
		if gifDue {
			if m.GIF, err = t.ev.draw(ctx, pol, t.steps); err != nil {
				return false, err
			}
		}
		if evalDue {
			if m.Eval, err = t.ev.evaluate(ctx, pol, art, it+1, t.steps); err != nil {
				return false, err
			}
			reached = t.ev.reaches(m.Eval)
		}
	}
	if !evalDue { // the ranks agree on evaluations' iterations alone (every rank knows them)
		return false, nil
	}
	return t.red.agree(ctx, reached)
}

// Drawer draws recorded episodes of one env as animated GIFs (Options.Draw): Draw writes the
// GIF of an episode into w, whose frames are Width × Height pixels (TensorBoard's image
// summary says so).
type Drawer struct {
	Width, Height int
	Draw          func(w io.Writer, ep batcher.Trajectory) error
}

// drawerOf is the Drawer of spec's env for a run of cfg with Config.GifEvery: an error
// wrapping ErrConfig when opts has no Draw or it cannot draw the env.
func drawerOf(cfg Config, spec envs.Spec, opts Options) (Drawer, error) {
	if opts.Draw == nil {
		return Drawer{}, fmt.Errorf("%w: GifEvery = %d needs Options.Draw to draw the episodes (package engine/gif's Drawer; cmd/train sets it)", ErrConfig, cfg.GifEvery)
	}
	d, err := opts.Draw(spec.ID)
	if err != nil {
		return Drawer{}, fmt.Errorf("%w: GifEvery = %d: %w; train without it (gif_every 0)", ErrConfig, cfg.GifEvery, err)
	}
	if d.Draw == nil || d.Width < 1 || d.Height < 1 {
		return Drawer{}, fmt.Errorf("%w: GifEvery = %d: Options.Draw gave no drawing of %s (a %d×%d Drawer)", ErrConfig, cfg.GifEvery, spec.ID, d.Width, d.Height)
	}
	return d, nil
}

// checkOptions refuses, before anything is written, a run of cfg whose options cannot carry
// it out: GifEvery without a Drawer of its env.
func checkOptions(cfg Config, spec envs.Spec, opts Options) error {
	if cfg.GifEvery > 0 {
		_, err := drawerOf(cfg, spec, opts)
		return err
	}
	return nil
}

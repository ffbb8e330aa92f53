package engine

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
)

// The off-policy loop: the run of an algorithm that learns from a replay buffer (its
// registration's capabilities say Replay: dqn, sac). trainRun hands such a run here once, at
// its start; nothing of the on-policy trainer is asked about it afterwards. It shares the run
// directory (config.json, metrics.jsonl, TensorBoard, policy.onnx, checkpoint/), Options.Stop
// and the end-of-run evaluation with the on-policy runs.
//
// Each iteration is RolloutSteps/TrainFreq collections. A collection publishes the learner's
// acting network into the batchers in place with the exploration rate of the moment
// (Batcher.PublishExplore: DQN's ε from its linear schedule, SAC's uniformly random actions
// before LearningStarts), steps every env TrainFreq times, adds the transitions to the replay
// buffer (the final observation as the next one where an episode ended), and, once more than
// LearningStarts env steps are collected, runs GradientSteps updates on minibatches sampled
// uniformly from the buffer with the run's sampling stream. With OverlapCollection the next
// collection starts (published, its env steps on the batchers' goroutines) before a
// collection's updates run, and the last collection of an iteration has none beside it.
//
// A learner that is an algo.NoisyActing (SAC with gSDE) acts with a graph of its own: the
// batchers are bound to it, its noise drawn from the sampling stream at each publish (each
// collection's start, and every SDESampleFreq steps within one, the collection then being made
// of several Collects: collectPieces), while evaluations and policy.onnx use Export.

// ReplayMetrics are what an off-policy iteration adds to its metrics.
type ReplayMetrics struct {
	// BufferFill is the transitions in the replay buffer, of BufferSize.
	BufferFill int `json:"buffer_fill"`
	BufferSize int `json:"buffer_size"`
	// Updates is the gradient steps since the run began; UpdatesPerSec this iteration's rate
	// over its learning time.
	Updates       int64 `json:"updates"`
	UpdatesPerSec Float `json:"updates_per_sec"`
	// Epsilon is DQN's exploration rate at the iteration's last collection (the probability
	// of a random action; 1 before learning_starts); for SAC, 1 before learning_starts (random
	// actions) and 0 after.
	Epsilon Float `json:"epsilon"`
}

// replayRun is one off-policy run's state.
type replayRun struct {
	cfg   Config
	spec  envs.Spec
	hb    policy.Head // the acting network's head, as its export declares it
	opts  Options
	run   *runDir
	l     algo.ReplayLearner
	pcg   *rand.PCG // the sampling stream (minibatches, SAC's noise)
	rng   *rand.Rand
	pol   *bind.Policy // the batchers' policy
	eval  *bind.Policy // evaluations' and drawn episodes': pol, or Export's for a NoisyActing learner
	noisy algo.NoisyActing
	b     *batcher.Batcher
	stats []float64 // one update's statistics
	sums  []float64 // their sums over an iteration

	steps, eps, version, updates int64
	explore                      float64 // the exploration rate last published
	logged                       bool    // logBuffer said its piece
	// init is the foreign policy being fine-tuned (InitPolicy; nil from scratch), initData its
	// bytes, which the checkpoints keep.
	init     *policy.Dense
	initData []byte
}

// trainReplay is trainRun for an off-policy algorithm: from checkpoint ckpt (nil: from the
// start) into run.
func trainReplay(ctx context.Context, cfg Config, spec envs.Spec, opts Options, run *runDir, ckpt *models.Checkpoint, initData []byte, saving bool) (res Result, err error) {
	start := time.Now()
	defer func() { err = errors.Join(err, run.Close()) }()
	if opts.Source != nil {
		return res, fmt.Errorf("%w: --algo %s collects with its own batchers; remote collection (--serve) is for the on-policy and asynchronous algorithms", ErrConfig, cfg.Algo)
	}
	if err := openTensorBoard(run, cfg, opts.NoTensorBoard); err != nil {
		return res, err
	}
	r, err := newReplayRun(ctx, cfg, spec, opts, run, initData)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	l := &replayLoop{r: r, saving: saving, start: start}
	if err := l.begin(ctx, ckpt); err != nil {
		return res, err
	}
	for it := l.first; it < l.iters; it++ {
		prev := r.steps
		m, err := r.iterate(ctx, it)
		if errors.Is(err, ErrNonFinite) {
			err = fmt.Errorf("%w; %s", err, kept(run))
		}
		if err != nil {
			return res, fmt.Errorf("engine: iteration %d: %w", it+1, err)
		}
		if err := l.end(ctx, it, prev, m); err != nil {
			return res, err
		}
	}
	return l.finish(ctx)
}

// replayLoop is trainReplay's iteration loop: what every iteration ends with, and the run's
// end (as loop is trainRun's).
type replayLoop struct {
	r            *replayRun
	ev           *evaluator
	saving       bool
	start        time.Time
	ckptPath     string // the checkpoint's path; empty without a run directory
	first, iters int    // the first iteration to run, and the run's iterations (fewer once StopAtReturn is reached)
	complete     bool   // resumed from a checkpoint with nothing left to train
	stoppedEarly string // why the run ended before TotalSteps (Result.StoppedEarly)
}

// begin restores the run from its checkpoint (or writes iteration 0's), makes its evaluator
// (Config.EvalEvery and GifEvery count env steps here), and works out the iterations left.
func (l *replayLoop) begin(ctx context.Context, ckpt *models.Checkpoint) (err error) {
	r := l.r
	if r.run.Path() != "" {
		l.ckptPath = filepath.Join(r.run.Path(), checkpointFile)
	}
	if ckpt != nil {
		l.first = int(ckpt.Ints["iteration"])
		if err := r.restore(ckpt); err != nil {
			return err
		}
	} else if l.saving {
		if err := r.checkpoint(ctx, l.ckptPath, 0); err != nil {
			return err
		}
		r.run.Resumable()
	}
	if l.ev, err = newEvaluator(r.cfg, r.spec, r.opts, r.run, r.steps); err != nil {
		return err
	}
	l.iters = r.cfg.Iterations()
	// A run that stopped at StopAtReturn, resumed with the same return, is complete too.
	l.complete = ckpt != nil && (l.first >= l.iters || l.ev.reachedBy(r.steps))
	if l.complete && l.first < l.iters {
		l.stoppedEarly, l.iters = l.ev.stoppedBefore(), l.first
	}
	if l.complete {
		return r.writePolicy(true) // policy.onnx must be the checkpoint's
	}
	return nil
}

// end ends iteration it (whose collections began at env step prev), whose metrics are m: the
// evaluation and the episode drawn when due, policy.onnx and the checkpoint every
// CheckpointEvery iterations, at the end and at a stop, the metrics line and the progress
// callback; a stop ends the run here with an error wrapping ErrStopped.
func (l *replayLoop) end(ctx context.Context, it int, prev int64, m Metrics) error {
	r := l.r
	reached, err := r.evaluateAfter(ctx, l.ev, it, prev, &m)
	if err != nil {
		return err
	}
	if reached && it+1 < l.iters { // a finished run, shorter
		l.stoppedEarly, l.iters = l.ev.stopReason(m.Eval, it+1, l.iters, r.steps), it+1
	}
	last, stop := it+1 == l.iters, stopped(r.opts.Stop)
	saved := l.saving && ((it+1)%r.cfg.CheckpointEvery == 0 || last || stop)
	c0 := time.Now()
	if saved || last {
		if err := r.writePolicy(false); err != nil {
			return err
		}
	}
	m.WallSeconds = Float(time.Since(l.start).Seconds())
	// The metrics line goes first: a checkpoint on disk is never ahead of metrics.jsonl.
	if err := r.run.Metrics(m); err != nil {
		return err
	}
	if saved {
		if err := r.checkpoint(ctx, l.ckptPath, it+1); err != nil {
			return err
		}
	}
	m.CheckpointSeconds = Float(time.Since(c0).Seconds())
	if r.opts.Progress != nil {
		r.opts.Progress(m)
	}
	switch {
	case !stop || last:
		return nil
	case !l.saving:
		return fmt.Errorf("%w after iteration %d of %d", ErrStopped, it+1, l.iters)
	}
	return fmt.Errorf("%w after iteration %d of %d, with a checkpoint; continue it with: train --resume %s", ErrStopped, it+1, l.iters, r.run.Path())
}

// finish makes the run's Result: the parameters' hash, the best policy, the learning curve,
// and the final evaluation of Config.EvalEpisodes episodes.
func (l *replayLoop) finish(ctx context.Context) (res Result, err error) {
	r := l.r
	h := paramsHash(r.l.Acting())
	res = Result{EnvSteps: r.steps, Iterations: max(l.first, l.iters), TrainSeconds: time.Since(l.start).Seconds(), Policy: r.run.PolicyPath(),
		Dir: r.run.Path(), ParamsSHA256: hex.EncodeToString(h[:]), Complete: l.complete, StoppedEarly: l.stoppedEarly, Best: l.ev.best}
	if res.Curve, err = r.run.Curve(r.opts.Plot, curveTitle(r.cfg)); err != nil {
		return res, err
	}
	if r.cfg.EvalEpisodes > 0 {
		model, err := r.l.Export(r.hb.Spec, r.version)
		if err != nil {
			return res, err
		}
		ev, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: r.spec, Episodes: r.cfg.EvalEpisodes, Seed: r.cfg.Seed + evalSeedOffset,
			Deterministic: true}, r.eval.WithModel(model, r.version))
		if err != nil {
			return res, err
		}
		res.EvalReturnMean, res.EvalReturnStd, res.EvalEpisodes = ev.ReturnMean, ev.ReturnStd, len(ev.Returns)
	}
	res.WallSeconds = time.Since(l.start).Seconds()
	return res, nil
}

// evaluateAfter runs the evaluation and draws the episode due (Config.EvalEvery and GifEvery,
// counted in env steps) after iteration it, whose collections took the env steps from prev
// to r.steps: of the acting network's export. best_policy.onnx keeps what policy.onnx would
// be (a fine-tune's original graph, with its names). It reports whether the evaluation reached
// StopAtReturn.
func (r *replayRun) evaluateAfter(ctx context.Context, ev *evaluator, it int, prev int64, m *Metrics) (bool, error) {
	evalDue, gifDue := ev.due(prev, r.steps), ev.gifDue(prev, r.steps)
	if !evalDue && !gifDue {
		return false, nil
	}
	model, err := r.l.Export(r.hb.Spec, r.version)
	if err != nil {
		return false, err
	}
	pol := r.eval.WithModel(model, r.version)
	if gifDue {
		if m.GIF, err = ev.draw(ctx, pol, r.steps); err != nil {
			return false, err
		}
	}
	if !evalDue {
		return false, nil
	}
	artifact := model
	if r.init != nil { // best_policy.onnx is what policy.onnx would be: the original graph
		if artifact, err = r.policyModel(); err != nil {
			return false, err
		}
	}
	if m.Eval, err = ev.evaluate(ctx, pol, artifact, it+1, r.steps); err != nil {
		return false, err
	}
	return ev.reaches(m.Eval), nil
}

// newReplayRun makes the run's learner, buffer, policy binding and batchers, as a fresh run
// has them; a fine-tune's learner starts from initData's network (importInit).
func newReplayRun(ctx context.Context, cfg Config, spec envs.Spec, opts Options, run *runDir, initData []byte) (*replayRun, error) {
	hb, err := cfg.binding(spec)
	if err != nil {
		return nil, err
	}
	s := cfg.replaySettings(spec)
	s.Rng = rand.New(rand.NewPCG(cfg.Seed, 0x6f66662d706f6c69))                                                     // "off-poli": the weights' stream
	r := &replayRun{cfg: cfg, spec: spec, hb: hb, opts: opts, run: run, pcg: rand.NewPCG(cfg.Seed, 0x7265706c6179), // "replay"
		explore: -1}
	r.rng = rand.New(r.pcg)
	if cfg.InitPolicy != "" {
		if err := r.importInit(initData, &s); err != nil {
			return nil, err
		}
	}
	if r.l, err = algo.NewReplay(cfg.Algo, s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	r.stats = make([]float64, len(r.l.StatNames()))
	r.sums = make([]float64, len(r.stats))
	model, err := r.l.Export(r.hb.Spec, 0)
	if r.noisy, _ = r.l.(algo.NoisyActing); r.noisy != nil && err == nil {
		// Evaluations bind Export's graph, without the acting noise's weight.
		if r.eval, err = bind.New(ctx, model, 0, spec, bind.Config{Session: opts.Session}); err == nil {
			model, err = r.noisy.ExportActing(r.hb.Spec, 0)
		}
	}
	if err == nil {
		r.pol, err = bind.New(ctx, model, 0, spec, bind.Config{Session: opts.Session, Publish: r.l.PublishLayout()})
	}
	if r.eval == nil {
		r.eval = r.pol
	}
	if err == nil {
		r.b, err = batcher.New(ctx, batcher.Config{Env: spec, Workers: cfg.Workers, EnvsPerWorker: cfg.Envs, Steps: cfg.TrainFreq,
			Seed: cfg.Seed, NoSpin: cfg.NoSpin}, r.pol)
	}
	if err != nil {
		return nil, errors.Join(err, r.close())
	}
	return r, nil
}

// iterate runs iteration it: its collections, each with its updates.
func (r *replayRun) iterate(ctx context.Context, it int) (Metrics, error) {
	cfg := r.cfg
	clear(r.sums)
	var collect, learn, publish time.Duration
	var eps []batcher.Episode
	updates, rows := 0, 0
	collections := cfg.RolloutSteps / cfg.TrainFreq
	var next <-chan collection // the collection in flight (OverlapCollection)
	defer func() {
		if next != nil { // an error left it running: the batchers are closed only after it
			<-next
		}
	}()
	for j := range collections {
		var c collection
		if next != nil {
			c, next = <-next, nil
		} else {
			if err := r.publishTimed(ctx, &publish); err != nil {
				return Metrics{}, err
			}
			c = r.collect(ctx)
		}
		if c.err != nil {
			return Metrics{}, c.err
		}
		collect += c.took
		publish += c.publish
		eps = append(eps, c.earlierEps...)
		if err := r.add(c.ro); err != nil {
			return Metrics{}, err
		}
		eps = append(eps, c.ro.Episodes...)
		n := c.ro.T*c.ro.N + c.earlier
		rows += n
		r.steps += int64(n)
		r.l.Collected(r.steps)
		if cfg.OverlapCollection && j+1 < collections {
			// The next collection acts with the network as it is now, before this one's
			// updates; the rollout's buffers are free again (add copied them).
			if err := r.publishTimed(ctx, &publish); err != nil {
				return Metrics{}, err
			}
			ch := make(chan collection, 1)
			go func() { ch <- r.collect(ctx) }()
			next = ch
		}
		l0 := time.Now()
		k, err := r.learn(ctx, n)
		if err != nil {
			return Metrics{}, err
		}
		updates += k
		learn += time.Since(l0)
	}
	nan := Float(math.NaN())
	m := Metrics{Iteration: it + 1, EnvSteps: r.steps, Episodes: len(eps), ReturnMean: nan, ReturnMin: nan, ReturnMax: nan,
		LengthMean: nan, PolicyLoss: nan, ValueLoss: nan, Entropy: nan, ApproxKL: nan, ClipFrac: nan, ExplainedVar: nan,
		LR: Float(cfg.LR), CollectSPS: Float(float64(rows) / collect.Seconds()), LearnSPS: nan, Version: r.version,
		CollectSeconds: Float(collect.Seconds()), LearnSeconds: Float(learn.Seconds()), PublishSeconds: Float(publish.Seconds())}
	fill, _, _ := r.l.Buffered()
	m.Replay = &ReplayMetrics{BufferFill: fill, BufferSize: cfg.BufferSize, Updates: r.updates, UpdatesPerSec: nan,
		Epsilon: Float(r.explore)}
	if updates > 0 {
		m.LearnSPS = Float(float64(updates*cfg.BatchSize) / learn.Seconds())
		m.Replay.UpdatesPerSec = Float(float64(updates) / learn.Seconds())
		for i := range r.sums {
			r.sums[i] /= float64(updates)
		}
		m.Stats = statMap(algo.Stats{Names: r.l.StatNames(), Values: r.sums})
	}
	if _, ok := r.l.Exploration(r.steps); ok {
		if m.Stats == nil {
			m.Stats = map[string]Float{}
		}
		m.Stats["epsilon"] = Float(r.explore)
	}
	episodeStats(&m, eps)
	r.eps += int64(len(eps))
	m.EpisodesAll = r.eps
	return m, nil
}

// publishTimed is publish, its time added to *took.
func (r *replayRun) publishTimed(ctx context.Context, took *time.Duration) error {
	p0 := time.Now()
	err := r.publish(ctx)
	*took += time.Since(p0)
	return err
}

// collection is a collection's rollout, or its error, and how long it took; collected in
// pieces (collectPieces), also what the earlier pieces collected, already in the buffer, and
// how long their publishes took.
type collection struct {
	ro         *batcher.Rollout
	err        error
	took       time.Duration
	earlier    int               // the earlier pieces' transitions
	earlierEps []batcher.Episode // their episodes
	publish    time.Duration     // the publishes before them
}

// collect steps every env TrainFreq times with the policy published last. With
// OverlapCollection it runs on a goroutine of its own beside the learner's updates: it uses
// the batchers only, and the learner's updates use neither them nor the rollout.
func (r *replayRun) collect(ctx context.Context) collection {
	if r.noisy != nil && r.cfg.SDESampleFreq > 0 && r.cfg.SDESampleFreq < r.cfg.TrainFreq {
		return r.collectPieces(ctx)
	}
	c0 := time.Now()
	ro, err := r.b.Collect(ctx, r.cfg.TrainFreq)
	return collection{ro: ro, err: err, took: time.Since(c0)}
}

// collectPieces is collect for a NoisyActing learner (gSDE) with SDESampleFreq < TrainFreq: the
// collection in pieces of SDESampleFreq steps of every env, the acting noise drawn and
// published anew before each piece after the first (SB3's sde_sample_freq); all but the last
// piece go into the buffer here. It draws from the sampling stream and adds to the buffer, so
// it never runs beside the updates (the config refuses sde_sample_freq with
// overlap_collection).
func (r *replayRun) collectPieces(ctx context.Context) collection {
	var c collection
	f := r.cfg.SDESampleFreq
	for done := 0; ; done += f {
		if done > 0 {
			if c.err = r.publishTimed(ctx, &c.publish); c.err != nil {
				return c
			}
		}
		c0 := time.Now()
		ro, err := r.b.Collect(ctx, min(f, r.cfg.TrainFreq-done))
		c.took += time.Since(c0)
		if c.err = err; err != nil || done+f >= r.cfg.TrainFreq {
			c.ro = ro
			return c
		}
		if c.err = r.add(ro); c.err != nil {
			return c
		}
		c.earlier += ro.T * ro.N
		c.earlierEps = append(c.earlierEps, ro.Episodes...)
	}
}

// exploration is the exploration rate of the next collection: 1 (random actions) before
// LearningStarts env steps; then DQN's ε, falling linearly from ExplorationInitialEps to
// ExplorationFinalEps over the first ExplorationFraction of TotalSteps (SB3's schedule), and
// 0 for SAC, which explores by sampling its actor.
func (r *replayRun) exploration() float64 {
	cfg := r.cfg
	if r.steps < cfg.LearningStarts {
		return 1
	}
	rate, _ := r.l.Exploration(r.steps)
	return rate
}

// publish makes the learner's acting network the batchers' policy, with the exploration
// rate of the moment (and a NoisyActing learner's noise drawn anew).
func (r *replayRun) publish(ctx context.Context) error {
	if r.noisy != nil {
		r.noisy.ResampleNoise(r.rng)
	}
	r.explore = r.exploration()
	return r.b.PublishExplore(ctx, r.version, r.l.Acting(), r.explore)
}

// add puts a collection's transitions into the buffer, step by step: the observation after
// step t is the one at t+1 (the rollout's LastObs after its last step), or the final
// observation where the episode ended. SAC's actions go in squashed, tanh of the raw draws.
func (r *replayRun) add(ro *batcher.Rollout) error {
	n, od, ad := ro.N, ro.ObsDim, ro.ActDim
	for t := range ro.T {
		obs := ro.Obs[t*n*od : (t+1)*n*od]
		next := ro.LastObs[:n*od]
		if t+1 < ro.T {
			next = ro.Obs[(t+1)*n*od : (t+2)*n*od]
		}
		act := ro.Actions[t*n*ad : (t+1)*n*ad]
		row := ro.Rewards[t*n : (t+1)*n]
		if err := r.l.Add(obs, act, row, ro.Terminated[t*n:(t+1)*n], ro.Truncated[t*n:(t+1)*n], next,
			ro.FinalObs[t*n*od:(t+1)*n*od]); err != nil {
			return err
		}
	}
	return nil
}

// learn runs a collection's updates, once more than LearningStarts env steps are in: the
// configured GradientSteps, or as many as the collection's collected transitions. It returns
// how many it ran.
func (r *replayRun) learn(ctx context.Context, collected int) (int, error) {
	if r.steps <= r.cfg.LearningStarts {
		return 0, nil
	}
	k := r.cfg.GradientSteps
	if k < 0 {
		k = collected
	}
	for range k {
		if err := r.l.Update(ctx, r.rng, r.stats); err != nil {
			return 0, err
		}
		for i, v := range r.stats {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("%w: the %s is %v (lower lr, or look for NaN in the env's observations and rewards)", ErrNonFinite, r.l.StatNames()[i], v)
			}
			r.sums[i] += v
		}
		r.updates++
	}
	if k > 0 {
		r.version++
		if err := finite(algo.Stats{}, r.l.Acting()); err != nil {
			return 0, err
		}
	}
	return k, nil
}

// writePolicy writes policy.onnx, the acting network's export (a Q-network plays greedily in
// eval; the batchers get their ε with each publish), or a fine-tune's original graph with the
// trained weights (policyModel). onlyIfDiffers leaves a matching file alone.
func (r *replayRun) writePolicy(onlyIfDiffers bool) error {
	if r.run.Path() == "" {
		return nil
	}
	model, err := r.policyModel()
	if err != nil {
		return err
	}
	if onlyIfDiffers && r.run.HasPolicy(model, nil) {
		return nil
	}
	return r.run.Policy(model, nil)
}

// checkpoint writes what a resume needs after iteration iterations to path (nothing without
// a run directory): the counters, the learner's networks and optimisers, the sampling
// stream, the batchers' envs and streams, and the replay buffer unless NoBufferCheckpoint.
func (r *replayRun) checkpoint(ctx context.Context, path string, iteration int) error {
	if path == "" {
		return nil
	}
	snap, err := r.b.Snapshot()
	if err != nil {
		return err
	}
	rng, err := r.pcg.MarshalBinary()
	if err != nil {
		return err
	}
	c := &models.Checkpoint{
		Ints: map[string]int64{"iteration": int64(iteration), "env_steps": r.steps, "episodes": r.eps, "version": r.version,
			"updates": r.updates},
		Bytes: map[string][]byte{"batcher": snap, "run_id": []byte(r.cfg.RunID), "rng/replay": rng},
	}
	if c.Bytes["config"], err = json.Marshal(r.cfg); err != nil {
		return err
	}
	if r.initData != nil {
		c.Bytes["init_policy"] = r.initData // a resume needs no InitPolicy file
	}
	if err := r.l.Store(c, !r.cfg.NoBufferCheckpoint); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("engine: checkpoint: %w", err)
	}
	if err := models.SaveCheckpoint(ctx, path, c); err != nil {
		return err
	}
	r.logBuffer()
	return nil
}

// logBuffer says, at the first checkpoint after the start of a process that holds
// transitions, what the checkpoints do with the replay buffer and how large it is.
func (r *replayRun) logBuffer() {
	log := r.opts.Session.Logger
	n, now, full := r.l.Buffered()
	if log == nil || r.logged || n == 0 {
		return
	}
	r.logged = true
	if r.cfg.NoBufferCheckpoint {
		log.Info("the checkpoints leave the replay buffer out (no_buffer_checkpoint): a resume starts with an empty buffer, so it is not the run an uninterrupted one would be")
		return
	}
	log.Info(fmt.Sprintf("the checkpoints hold the replay buffer: %s now (%d transitions), about %s when full (buffer_size %d); no_buffer_checkpoint (--no-buffer-checkpoint) leaves it out, making a resume approximate",
		mib(now), n, mib(full), r.cfg.BufferSize))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// restore sets the run to checkpoint c's state (after newReplayRun made it afresh) and checks
// that the checkpoint is an off-policy one of this shape.
func (r *replayRun) restore(c *models.Checkpoint) error {
	held, err := r.l.Load(c)
	if err != nil {
		return fmt.Errorf("engine: the checkpoint: %w (was it written by another algorithm or network shape? train afresh into a new --out)", err)
	}
	if err := r.pcg.UnmarshalBinary(c.Bytes["rng/replay"]); err != nil {
		return fmt.Errorf("engine: the checkpoint's sampling stream (rng/replay): %w", err)
	}
	r.steps, r.eps, r.version, r.updates = c.Ints["env_steps"], c.Ints["episodes"], c.Ints["version"], c.Ints["updates"]
	if log := r.opts.Session.Logger; !held && log != nil {
		log.Info("the checkpoint holds no replay buffer (no_buffer_checkpoint): the resumed run starts with an empty one, so it is not the run an uninterrupted one would have been")
	}
	return r.b.Restore(c.Bytes["batcher"])
}

func (r *replayRun) close() error {
	var errs []error
	if r.b != nil {
		errs = append(errs, r.b.Close())
	}
	if r.l != nil {
		errs = append(errs, r.l.Close())
	}
	return errors.Join(errs...)
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// trainer holds one run's batcher, learner and buffers.
type trainer struct {
	cfg     Config
	spec    envs.Spec
	alg     algo.Algorithm
	pm      policyModel
	session onnx.Config
	b       *batcher.Batcher
	pol     *batcher.Policy // the policy checked against the env at the start; re-exports reuse it
	l       *learner.Learner
	opt     learner.Optimizer
	batch   *learner.SampleBatch
	// seqs: the policy is recurrent and the batch holds each env's rollout as one sequence
	// (env-major rows); adv and ret take GAE's time-major results before they are reordered.
	seqs     bool
	adv, ret []float32
	model    []byte // current policy's ONNX bytes
	version  int64
	steps    int64
	eps      int64
	ckpt     chan error // the checkpoint being written, if any
	async    *asyncRun  // set for an asynchronous algorithm (impala, appo)
	rs       *rankState // set for a rank of a DD-PPO job of several
	source   *sourceRun // set when the rollouts come from Options.Source, not own batchers
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
	towers(algo.Algorithm) learner.TowerFactory
	// publishLayout places flatParams' weights in the exported graph, for Batcher.Publish.
	publishLayout() []batcher.Param
}

// native is one of our architectures (package models).
type native struct{ p *models.Params }

func (n native) flatParams() []float32                        { return n.p.Data() }
func (n native) headSpec() head.Spec                          { return n.p.Config().Spec }
func (n native) export(v int64) ([]byte, error)               { return models.Export(n.p, v) }
func (n native) towers(a algo.Algorithm) learner.TowerFactory { return Towers(n.p, a) }
func (n native) artifact(m []byte, _ int64) ([]byte, error)   { return m, nil }
func (n native) trained([]byte) []byte                        { return nil }

func (n native) publishLayout() []batcher.Param {
	ps := make([]batcher.Param, n.p.Len())
	for i, name := range n.p.Names() {
		size := 1
		for _, d := range n.p.Shape(i) {
			size *= d
		}
		ps[i] = batcher.Param{Name: name, Offset: n.p.Offset(i), Len: size}
	}
	return ps
}

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
	minibatch := rows / cfg.Minibatches
	var err error
	if t.alg, err = cfg.algorithm(); err != nil {
		return err
	}
	if s, ok := t.alg.(algo.Sequential); ok && s.Sequences() {
		// V-trace runs over whole time-ordered sequences of each env's rollout, which the
		// batchers keep collecting while the learner trains.
		if f, ok := t.pm.(*foreign); ok && f.recurrent() {
			return fmt.Errorf("%w: %s does not train recurrent policies yet; use --algo ppo", ErrConfig, cfg.Algo)
		}
		L := cfg.seqLen()
		seqs := n * (cfg.RolloutSteps / L)
		if minibatch = seqs / cfg.Minibatches; minibatch < cfg.Towers {
			return fmt.Errorf("%w: %s trains on whole sequences: %d envs × %d sequences of %d steps in %d minibatches leave %d per minibatch for %d towers; use more envs, a shorter seq_len or fewer minibatches",
				ErrConfig, cfg.Algo, n, cfg.RolloutSteps/L, L, cfg.Minibatches, minibatch, cfg.Towers)
		}
		t.async = &asyncRun{seqLen: L, since: time.Now()}
		t.alg = seqAlgo{Algorithm: t.alg, seqLen: L}
		t.adv, t.ret = make([]float32, rows), make([]float32, rows)
		t.batch = learner.NewSequenceBatch(rows, obsDim, actDim, 0)
	} else if f, ok := t.pm.(*foreign); ok && f.recurrent() {
		// Minibatches of whole sequences: each env's rollout cut into RolloutSteps/seqLen,
		// each replayed by the towers from the state the batcher fed at its first step
		// (backpropagation through time over seqLen steps).
		f.steps = cfg.seqLen()
		seqs := n * (cfg.RolloutSteps / f.steps)
		if minibatch = seqs / cfg.Minibatches; minibatch < cfg.Towers {
			return fmt.Errorf("%w: a recurrent policy trains on whole sequences: %d envs × %d sequences of %d steps in %d minibatches leave %d per minibatch for %d towers; use more envs, a shorter seq_len or fewer minibatches",
				ErrConfig, n, cfg.RolloutSteps/f.steps, f.steps, cfg.Minibatches, minibatch, cfg.Towers)
		}
		t.seqs = true
		t.adv, t.ret = make([]float32, rows), make([]float32, rows)
		t.batch = learner.NewSampleBatch(rows, obsDim, actDim, f.stateDim())
	} else {
		t.batch = learner.NewSampleBatch(rows, obsDim, actDim, 0)
	}
	if err := t.export(); err != nil {
		return err
	}
	// The weights reach the batchers in place (Batcher.Publish), not by a new export and new
	// sessions per iteration.
	pc := batcher.PolicyConfig{Session: t.session, Publish: t.pm.publishLayout()}
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
	if t.source != nil { // the first policy the remote batchers collect with
		if err := t.source.src.Publish(ctx, t.version, t.model); err != nil {
			return err
		}
	}
	if !t.pol.HasValue() {
		return errors.New("engine: PPO needs a policy with a value output to bootstrap from")
	}
	if t.source == nil {
		if t.b, err = batcher.New(ctx, batcher.Config{Env: cfg.Env, Workers: cfg.Workers, EnvsPerWorker: cfg.Envs,
			Steps: cfg.RolloutSteps, Seed: t.batcherSeed(firstIteration), NoSpin: cfg.NoSpin}, t.pol); err != nil {
			return err
		}
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
	tc := learner.TowersConfig{N: cfg.Towers, Minibatch: minibatch, MaxGradNorm: cfg.MaxGradNorm,
		NormalizeAdvantages: !cfg.NoNormAdv, NoSpin: cfg.NoSpin}
	if t.rs != nil {
		tc.Collective = t.rs.coll // towers average locally, then across the ranks
	}
	factory := t.pm.towers(t.alg)
	if t.async != nil {
		// The learner splits the batch by sequences; a feed-forward tower takes their rows.
		sequences, L := factory, t.async.seqLen
		factory = func(i int, dev device.Device, seqs int, flat []float32) (learner.Tower, error) {
			return sequences(i, dev, seqs*L, flat)
		}
	}
	towers, err := learner.NewTowers(tc, t.pm.flatParams(), opt, t.batch, factory)
	if err != nil {
		return err
	}
	t.startPreemption(towers, minibatch)
	t.l, err = learner.New(learner.Config{TrainBatch: rows, SGDIters: cfg.Epochs, Seed: cfg.Seed,
		FirstBatch: uint64(firstIteration)}, towers, t.batch)
	return err
}

// export writes the current parameters as policy version t.version.
// writePolicy exports the current parameters (t.model) and writes them to the run directory
// as policy.onnx (and policy_with_critic.onnx when the graph trained differs).
func (t *trainer) writePolicy(run *runDir) error {
	if err := t.export(); err != nil {
		return err
	}
	art, err := t.pm.artifact(t.model, t.version)
	if err != nil {
		return err
	}
	return run.Policy(art, t.pm.trained(t.model))
}

func (t *trainer) export() (err error) {
	t.model, err = t.pm.export(t.version)
	return err
}

// publish makes the current parameters policy version t.version in the batchers: copied in
// place into the weights their sessions read (Batcher.Publish), every later step's rows
// carrying the version. t.model, the exported bytes, is left as it was: export makes it
// when policy.onnx is written.
func (t *trainer) publish(ctx context.Context) error {
	if t.source != nil {
		return t.publishSource(ctx)
	}
	return t.b.Publish(ctx, t.version, t.pm.flatParams())
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
	r, err := t.collectRank(ctx)
	if err != nil {
		return Metrics{}, err
	}
	collect := time.Since(c0)
	n, od := r.N, r.ObsDim
	rows := r.T * n
	b := t.batch
	ro := algo.Rollout{T: r.T, N: n, Rewards: r.Rewards, Values: r.Values, Terminated: r.Terminated, Truncated: r.Truncated,
		FinalValues: r.FinalValues, LastValues: r.LastValues}
	if t.async != nil {
		if err := t.alg.Targets(ro, t.adv, t.ret); err != nil {
			return Metrics{}, err
		}
		if err := t.fillAsync(r, t.async.seqLen); err != nil {
			return Metrics{}, err
		}
	} else if t.seqs {
		if err := t.alg.Targets(ro, t.adv, t.ret); err != nil {
			return Metrics{}, err
		}
		if err := t.fillSequences(r); err != nil {
			return Metrics{}, err
		}
	} else {
		if err := t.alg.Targets(ro, b.Advantages, b.Returns); err != nil {
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
	}
	// The rows are in the learner's batch: the batchers may refill the rollout's buffer.
	if err := t.release(ctx); err != nil {
		return Metrics{}, err
	}
	ev := explainedVariance(b.Values[:rows], b.Returns[:rows])
	if f, ok := t.pm.(*foreign); ok && f.critic && it == 0 {
		f.startCritic(b.Returns[:rows])
	}
	l0 := time.Now()
	lr := t.opt.CurrentLR() // the rate of this iteration's updates (constant within one)
	var res learner.Result
	if p := t.preempting(); p != nil { // the ranks' rows differ: the rank runs the schedule itself
		if res, err = p.learn(ctx, t.rs.coll, b, it); err != nil {
			return Metrics{}, err
		}
	} else {
		if t.rs != nil {
			if err := t.rs.coll.SetWeight(float64(rows)); err != nil {
				return Metrics{}, err
			}
		}
		if err := t.l.Submit(ctx, b); err != nil {
			return Metrics{}, err
		}
		select {
		case res = <-t.l.Results():
		case <-ctx.Done():
			return Metrics{}, ctx.Err()
		}
		if res.Err != nil {
			return Metrics{}, res.Err
		}
		<-t.l.Released()
	}
	if t.rs != nil {
		if err := t.rs.reduceStats(ctx, res.Stats); err != nil {
			return Metrics{}, err
		}
	}
	// Training health: a non-finite loss or weight stops the run here, before this update is
	// exported, checkpointed or written, so the last good policy and checkpoint stay.
	stats := algo.Stats{Names: t.alg.StatNames(), Values: res.Stats}
	if err := finite(stats, t.pm.flatParams()); err != nil {
		return Metrics{}, fmt.Errorf("%w; the last good policy.onnx and checkpoint are kept (lower lr or max_grad_norm, or look for NaN in the env's observations and rewards)", err)
	}
	learn := time.Since(l0)
	var allreduce time.Duration
	if t.rs != nil {
		_, cross := t.rs.coll.Timing()
		allreduce, t.rs.cross = cross-t.rs.cross, cross
	}
	var am *AsyncMetrics
	if t.async != nil {
		am = t.asyncMetrics(b, rows, collect)
	}
	if t.rs != nil {
		t.steps += t.rs.rowsCollected(rows)
	} else {
		t.steps += int64(rows)
	}
	t.version++
	p0 := time.Now()
	if t.async == nil || t.version%int64(cfg.BroadcastInterval) == 0 {
		if err := t.publish(ctx); err != nil {
			return Metrics{}, err
		}
	}
	publish := time.Since(p0)
	nan := Float(math.NaN())
	m := Metrics{Iteration: it + 1, EnvSteps: t.steps, Episodes: len(r.Episodes), ReturnMean: nan, ReturnMin: nan,
		ReturnMax: nan, LengthMean: nan, PolicyLoss: Float(stats.Get("policy_loss")), ValueLoss: Float(stats.Get("value_loss")),
		Entropy: Float(stats.Get("entropy")), ApproxKL: Float(stats.Get("approx_kl")), ClipFrac: Float(stats.Get("clip_frac")), ExplainedVar: Float(ev), LR: Float(lr),
		CollectSPS: Float(float64(rows) / collect.Seconds()), LearnSPS: Float(float64(res.Trained) / learn.Seconds()), Version: t.version,
		CollectSeconds: Float(collect.Seconds()), LearnSeconds: Float(learn.Seconds()), PublishSeconds: Float(publish.Seconds()), Async: am, AllReduceSeconds: Float(allreduce.Seconds())}
	if am != nil {
		m.CollectSPS = Float(am.rate) // the batchers never wait for this iteration: its wait is no rate
	}
	if t.source != nil {
		m.Transport = t.source.transport()
	}
	if t.rs != nil {
		m.Preemption = t.rs.pre.metrics()
	}
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
	if t.rs != nil {
		if err := t.rs.reduceEpisodes(ctx, &m, r.Episodes); err != nil {
			return Metrics{}, err
		}
	}
	t.eps += int64(m.Episodes)
	m.EpisodesAll = t.eps
	return m, nil
}

func (t *trainer) close() error {
	errs := []error{t.waitCheckpoint(), t.stopStream()}
	if t.l != nil {
		errs = append(errs, t.l.Close())
	}
	if t.b != nil {
		errs = append(errs, t.b.Close())
	}
	return errors.Join(errs...)
}

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/ddppo"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/onnx"
)

// trainer holds one run's collection, learner and buffers. Its strategies are chosen once,
// by newTrainer and start, and never asked about afterwards: where the rollouts come from
// (col: collect.go), how its work combines with the other processes of a DD-PPO job (red:
// reduce.go), and how a rollout fills the learner's batch (fill).
type trainer struct {
	cfg     Config
	spec    envs.Spec
	alg     algo.Algorithm
	pm      policy.Model
	session onnx.Config
	col     collector
	red     reducer
	pol     *bind.Policy // the policy checked against the env at the start; re-exports reuse it
	l       *learner.Learner
	opt     learner.Optimizer
	batch   *learner.SampleBatch
	// fill writes a rollout's rows and training targets into the batch: as they come
	// (fillRows), or as whole sequences of seqLen steps of each env, env-major, for V-trace
	// (fillVTrace) or a recurrent policy (fillRecurrent), whose time-major targets adv and
	// ret take before they are reordered.
	fill     func(*batcher.Rollout) error
	seqLen   int
	adv, ret []float32
	// publishEvery: the batchers get every publishEvery-th version (BroadcastInterval for an
	// asynchronous algorithm, every version otherwise).
	publishEvery int64
	model        []byte // current policy's ONNX bytes (with the observation normaliser, if any)
	raw          []byte // the policy model's own export of it (without the normaliser)
	// Observation normalisation and reward scaling (normalization.go); nil when off, whose
	// methods then leave everything as it is: no caller checks.
	obsNorm *obsNorm
	rewNorm *rewardNorm
	version int64
	steps   int64
	eps     int64
	ev      *evaluator // the evaluations during training (Config.EvalEvery)
	ckpt    chan error // the checkpoint being written, if any
	polW    chan error // policy.onnx being written, if any
}

// newTrainer makes the trainer of a run of cfg on the env of spec, training pm, and chooses
// its strategies: the algorithm, its place in a DD-PPO job (opts.Ranks), and where its
// rollouts come from (opts.Source, else its own batchers: streaming for an asynchronous
// algorithm, with preemption for a DD-PPO rank that asks for it).
func newTrainer(cfg Config, spec envs.Spec, pm policy.Model, opts Options) (*trainer, error) {
	t := &trainer{cfg: cfg, spec: spec, pm: pm, session: opts.Session, red: alone{}, publishEvery: 1}
	var err error
	if t.alg, err = cfg.algorithm(); err != nil {
		return nil, err
	}
	s, ok := t.alg.(algo.Sequential)
	sequential := ok && s.Sequences()
	if sequential {
		t.publishEvery = int64(cfg.BroadcastInterval)
	}
	var rank *ddppo.Rank
	if opts.Ranks != nil {
		if rank, err = ddppo.Join(opts.Ranks, cfg.Towers, opts.Slowdown); err != nil {
			return nil, err
		}
		t.red = ranked{rank}
	}
	own := &batchersCollector{cfg: cfg, spec: spec, seed: t.red.seed(cfg.Seed)}
	switch {
	case opts.Source != nil:
		if rank != nil {
			return nil, fmt.Errorf("%w: a DD-PPO rank collects with its own batchers, not from Options.Source", ErrConfig)
		}
		if t.col, err = newSourceCollector(opts.Source, opts.Stop, cfg, spec, pm, sequential); err != nil {
			return nil, err
		}
	case sequential:
		t.col = &streamCollector{cfg: cfg, spec: spec, seed: own.seed}
	case rank != nil && len(pm.States()) == 0 && rank.Preempt(ddppo.PreemptConfig{SyncFrac: cfg.SyncFrac,
		Epochs: cfg.Epochs, Seed: cfg.Seed, Envs: cfg.Workers * cfg.Envs, Rollout: cfg.RolloutSteps}):
		// A feed-forward rank may stop collecting early (a recurrent policy's sequences
		// need whole rollouts).
		t.col = &preemptCollector{batchersCollector: own, r: rank}
	default:
		t.col = own
	}
	return t, nil
}

// start builds the run's buffers, towers and learner, and starts the collection, for a run
// starting at firstIteration.
func (t *trainer) start(ctx context.Context, firstIteration int) error {
	t.obsNorm = newObsNorm(t.cfg, t.spec.Observation.Dim(), t.pm.Binding().Input)
	t.rewNorm = newRewardNorm(t.cfg, t.cfg.Workers*t.cfg.Envs)
	minibatch, bySeqs, err := t.newBatch()
	if err != nil {
		return err
	}
	if err := t.export(); err != nil {
		return err
	}
	t.obsNorm.record(t.version) // the first rollouts' map
	if err := t.bindPolicy(ctx); err != nil {
		return err
	}
	if err := t.col.start(ctx, t.pol, firstIteration, t.version, t.model); err != nil {
		return err
	}
	return t.newLearner(minibatch, bySeqs, firstIteration)
}

// newBatch makes the learner's batch and chooses how a rollout fills it (t.fill): row by
// row, or as whole sequences for V-trace (bySeqs: the learner splits minibatches by
// sequences) or a recurrent policy. It returns a minibatch's rows, or sequences.
func (t *trainer) newBatch() (minibatch int, bySeqs bool, err error) {
	cfg := t.cfg
	n := cfg.Workers * cfg.Envs
	rows := n * cfg.RolloutSteps
	obsDim, actDim := t.spec.Observation.Dim(), t.spec.Action.Dim()
	if _, ok := t.spec.Action.(envs.Discrete); ok {
		actDim = 1
	}
	states := t.pm.States()
	s, ok := t.alg.(algo.Sequential)
	switch {
	case ok && s.Sequences():
		// V-trace runs over whole time-ordered sequences of each env's rollout, which the
		// batchers keep collecting while the learner trains.
		if len(states) > 0 {
			return 0, false, fmt.Errorf("%w: %s does not train recurrent policies yet; use --algo ppo", ErrConfig, cfg.Algo)
		}
		L := cfg.seqLen()
		seqs := n * (cfg.RolloutSteps / L)
		if minibatch = seqs / cfg.Minibatches; minibatch < cfg.Towers {
			return 0, false, fmt.Errorf("%w: %s trains on whole sequences: %d envs × %d sequences of %d steps in %d minibatches leave %d per minibatch for %d towers; use more envs, a shorter seq_len or fewer minibatches",
				ErrConfig, cfg.Algo, n, cfg.RolloutSteps/L, L, cfg.Minibatches, minibatch, cfg.Towers)
		}
		t.seqLen = L
		t.alg = seqAlgo{Algorithm: t.alg, seqLen: L}
		t.adv, t.ret = make([]float32, rows), make([]float32, rows)
		t.batch = learner.NewSequenceBatch(rows, obsDim, actDim, 0)
		t.fill = t.fillVTrace
		return minibatch, true, nil
	case len(states) > 0:
		// Minibatches of whole sequences: each env's rollout cut into RolloutSteps/seqLen,
		// each replayed by the towers from the state the batcher fed at its first step
		// (backpropagation through time over seqLen steps).
		t.seqLen = cfg.seqLen()
		seqs := n * (cfg.RolloutSteps / t.seqLen)
		if minibatch = seqs / cfg.Minibatches; minibatch < cfg.Towers {
			return 0, false, fmt.Errorf("%w: a recurrent policy trains on whole sequences: %d envs × %d sequences of %d steps in %d minibatches leave %d per minibatch for %d towers; use more envs, a shorter seq_len or fewer minibatches",
				ErrConfig, n, cfg.RolloutSteps/t.seqLen, t.seqLen, cfg.Minibatches, minibatch, cfg.Towers)
		}
		stateDim := 0
		for _, s := range states {
			stateDim += s.Dim
		}
		t.adv, t.ret = make([]float32, rows), make([]float32, rows)
		t.batch = learner.NewSampleBatch(rows, obsDim, actDim, stateDim)
		t.fill = t.fillRecurrent
		return minibatch, false, nil
	default:
		t.batch = learner.NewSampleBatch(rows, obsDim, actDim, 0)
		t.fill = t.fillRows
		return rows / cfg.Minibatches, false, nil
	}
}

// bindPolicy binds the exported policy (t.model) for the batchers. The weights reach them in
// place (Batcher.Publish), not by a new export and new sessions per iteration; the
// observation normaliser's mean and scale with them. The batchers bind the policy as the
// model was bound: a foreign policy's names and head as the user gave them, else
// recognition (and a new critic's value).
func (t *trainer) bindPolicy(ctx context.Context) error {
	pc := bind.Config{Session: t.session, Publish: t.obsNorm.layout(t.pm.PublishLayout(), len(t.pm.Flat())),
		Names: t.pm.Binding().Names}
	if t.cfg.Head != "" {
		h, err := t.cfg.binding(t.spec)
		if err != nil {
			return err
		}
		pc.Spec = &h.Spec
	}
	var err error
	if t.pol, err = bind.New(ctx, t.model, t.version, t.spec, pc); err != nil {
		return err
	}
	if !t.pol.HasValue() {
		return errors.New("engine: PPO needs a policy with a value output to bootstrap from")
	}
	return nil
}

// newLearner makes the optimiser, the towers (minibatch rows or sequences each, split by
// sequences when bySeqs) and the learner, whose minibatches continue from firstIteration.
func (t *trainer) newLearner(minibatch int, bySeqs bool, firstIteration int) error {
	cfg := t.cfg
	updates := cfg.Epochs * cfg.Minibatches
	var sched learner.Schedule = learner.Constant(cfg.LR)
	if !cfg.ConstantLR {
		sched = iterationAnneal{lr: cfg.LR, perIter: updates, iters: cfg.Iterations()}
	}
	sched = t.pm.Schedule(sched, updates) // a new critic's warm-up boosts it
	opt := learner.NewAdam(len(t.pm.Flat()), sched, 0.9, 0.999, cfg.AdamEps)
	t.opt = opt
	// In a DD-PPO job the towers average locally, then across the ranks.
	tc := learner.TowersConfig{N: cfg.Towers, Minibatch: minibatch, MaxGradNorm: cfg.MaxGradNorm,
		NormalizeAdvantages: !cfg.NoNormAdv, NoSpin: cfg.NoSpin, Collective: t.red.collective()}
	factory := t.pm.Towers(t.alg, t.seqLen)
	if bySeqs {
		// The learner splits the batch by sequences; a feed-forward tower takes their rows.
		factory = policy.SequenceRows(factory, t.seqLen)
	}
	towers, err := learner.NewTowers(tc, t.pm.Flat(), opt, t.batch, factory)
	if err != nil {
		return err
	}
	t.red.prepare(towers, t.batch, minibatch)
	t.l, err = learner.New(learner.Config{TrainBatch: cfg.Workers * cfg.Envs * cfg.RolloutSteps, SGDIters: cfg.Epochs, Seed: cfg.Seed,
		FirstBatch: uint64(firstIteration)}, towers, t.batch)
	return err
}

// writePolicy exports the current parameters (t.model) and hands them to a goroutine that
// writes them to the run directory as policy.onnx (and policy_with_critic.onnx when the graph
// trained differs), once the previous write has finished: the learner does not wait on the
// disk (each atomic write syncs the file and its folder: about 1 ms here, more on a busy
// disk), two writes never overlap, and waitPolicy gives a write's error. The bytes are the
// export's own: later updates do not touch them.
func (t *trainer) writePolicy(run *runDir) error {
	art, trained, err := t.artifacts()
	if err != nil {
		return err
	}
	// The checkpoint being written waits for the previous policy.onnx (save): waiting for
	// both keeps two policy writes from overlapping.
	if err := t.waitWrites(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- run.Policy(art, trained) }()
	t.polW = done
	return nil
}

// artifacts exports the current parameters (t.model) and returns the bytes of policy.onnx
// and, when the graph trained differs, of policy_with_critic.onnx (else nil).
func (t *trainer) artifacts() (art, trained []byte, err error) {
	if err := t.export(); err != nil {
		return nil, nil, err
	}
	art, err = t.pm.Artifact(t.raw, t.version)
	if err == nil {
		art, err = t.obsNorm.wrap(art)
	}
	if err != nil {
		return nil, nil, err
	}
	if t.pm.Trained(t.raw) != nil {
		trained = t.model
	}
	return art, trained, nil
}

// repairPolicy makes the run directory's policy.onnx (and policy_with_critic.onnx) the
// current parameters' when it is missing or holds other bytes: a process killed after its
// last checkpoint was written and before policy.onnx was (runs of older versions wrote the two
// at once) left an older one. Files that match are not written again.
func (t *trainer) repairPolicy(run *runDir) error {
	art, trained, err := t.artifacts()
	if err != nil {
		return err
	}
	if run.HasPolicy(art, trained) {
		return nil
	}
	return run.Policy(art, trained)
}

// waitPolicy waits for the policy.onnx being written, if any, and returns its error.
func (t *trainer) waitPolicy() error { return waitWrite(&t.polW) }

// waitWrites waits for every file being written on a goroutine (the checkpoint, policy.onnx)
// and returns their errors.
func (t *trainer) waitWrites() error { return errors.Join(t.waitCheckpoint(), t.waitPolicy()) }

// waitWrite waits for the write whose result *done will carry, if any (*done not nil), and
// returns its error; *done is then nil.
func waitWrite(done *chan error) error {
	if *done == nil {
		return nil
	}
	err := <-*done
	*done = nil
	return err
}

// export makes t.model: the current parameters exported as policy version t.version, behind
// the current observation normaliser (t.raw without it).
func (t *trainer) export() (err error) {
	if t.raw, err = t.pm.Export(t.version); err != nil {
		return err
	}
	t.model, err = t.obsNorm.wrap(t.raw)
	return err
}

// publish makes the current parameters policy version t.version in the batchers: copied in
// place into the weights their sessions read (Batcher.Publish), every later step's rows
// carrying the version. t.model, the exported bytes, is left as it was: export makes it
// when policy.onnx is written.
func (t *trainer) publish(ctx context.Context) error {
	t.obsNorm.record(t.version) // the map the version's rows are collected with
	return t.col.publish(ctx, t.version, t.obsNorm.published(t.pm.Flat()), func() ([]byte, error) {
		err := t.export()
		return t.model, err
	})
}

func (t *trainer) close() error {
	errs := []error{t.waitWrites(), t.col.close()}
	if t.l != nil {
		errs = append(errs, t.l.Close())
	}
	return errors.Join(errs...)
}

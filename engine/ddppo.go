package engine

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/ddppo"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// DD-PPO (Wijmans et al. 2019) runs as one process per rank of an MPI job (Options.Ranks),
// with package engine/ddppo's distribution: every rank collects with its own batchers and
// trains its own towers, their gradients averaged across the ranks at every minibatch, so the
// ranks stay identical (every checkpoint_every iterations and at the end they compare a hash
// of their parameters, and a mismatch stops the run).
//
// Rank 0 owns the run directory: it creates (or resumes) it, sends the configuration (with the
// run ID) and, on resume, the checkpoint to the other ranks, and writes config.json, the
// metrics (statistics reduced over every rank), policy.onnx and checkpoints holding every
// rank's batcher snapshot. The other ranks write nothing. A checkpoint records the number of
// ranks; a resume with another number is refused. With Config.SyncFrac below what every rank
// must reach, stragglers stop collecting early (straggler preemption, engine/ddppo's preempt.go).

// DefaultSyncFrac is Config.SyncFrac's default for ddppo: the paper's.
const DefaultSyncFrac = ddppo.DefaultSyncFrac

// ranksOf checks a run's Options.Ranks against its algorithm: nil (one process) unless the
// group has more than one rank, which only ddppo runs on.
func ranksOf(cfg Config, g ddppo.Group) (ddppo.Group, error) {
	if g == nil || g.Size() == 1 {
		return nil, nil
	}
	if !capabilities(cfg.Algo).Ranks {
		return nil, fmt.Errorf("%w: %d ranks (an MPI job) train with an algorithm that trains across ranks (--algo %s), not %q",
			ErrConfig, g.Size(), strings.Join(rankedAlgos(), ", "), cfg.Algo)
	}
	return g, nil
}

// follow is the start of a rank other than 0: it takes the run from rank 0 and trains it
// writing nothing. For a fresh run, its own configuration (from the same command line) must
// equal rank 0's.
func follow(ctx context.Context, cfg Config, opts Options, resume bool) (Result, error) {
	g := opts.Ranks
	s, err := ddppo.Receive(ctx, g)
	if err != nil {
		return Result{}, err
	}
	root, spec, ckpt, err := takeRun(s, cfg, resume)
	if err = ddppo.AgreeStart(ctx, g, err); err != nil {
		return Result{}, fmt.Errorf("engine: rank %d: %w", g.Rank(), err)
	}
	opts.Out, opts.Progress, opts.Plot = "", nil, nil
	run, err := rundir.Create[Metrics]("", nil)
	if err != nil {
		return Result{}, err
	}
	return trainRun(ctx, root, spec, opts, run, ckpt, s.InitPolicy, s.Saving)
}

// takeRun reads the run rank 0 sent: its configuration (which must be this rank's, for a fresh
// run), resolved with its env's spec, and checkpoint.
func takeRun(s ddppo.Shared, cfg Config, resume bool) (Config, envs.Spec, *models.Checkpoint, error) {
	var spec envs.Spec
	root, err := ParseConfig(s.Config)
	if err == nil {
		// As rank 0 trains it: an "ent_coef" of 0 read back is stored as −1 (ParseConfig),
		// which only WithDefaults turns back into 0.
		root, spec, err = root.resolve()
	}
	if err != nil {
		return root, spec, nil, fmt.Errorf("rank 0's config: %w", err)
	}
	if !resume {
		if err := sameConfig(cfg, root); err != nil {
			return root, spec, nil, err
		}
	}
	var ckpt *models.Checkpoint
	if len(s.Checkpoint) > 0 {
		ckpt = new(models.Checkpoint)
		if err := ckpt.UnmarshalBinary(s.Checkpoint); err != nil {
			return root, spec, nil, fmt.Errorf("rank 0's checkpoint: %w", err)
		}
	}
	return root, spec, ckpt, nil
}

// sameConfig refuses a rank started with another configuration than rank 0's (compared after
// defaults, without the fields rank 0 sets: run ID, the fine-tuned policy's path and hash).
func sameConfig(mine, root Config) error {
	mine, err := mine.WithDefaults()
	if err != nil {
		return err
	}
	for _, c := range []*Config{&mine, &root} {
		c.RunID, c.InitPolicy, c.InitPolicySHA256 = "", "", ""
	}
	a, b := configMap(mine), configMap(root)
	for k := range union(a, b) {
		if string(a[k]) != string(b[k]) {
			return fmt.Errorf("%w: this rank's %s is %s, rank 0's %s: start every rank with the same command line", ErrConfig, k, orNone(a[k]), orNone(b[k]))
		}
	}
	return nil
}

// ranked is the reducer of a rank of a DD-PPO job of several ranks.
type ranked struct{ r *ddppo.Rank }

func (k ranked) rank() int                      { return k.r.ID() }
func (k ranked) size() int                      { return k.r.Size() }
func (k ranked) root() bool                     { return k.r.ID() == 0 }
func (k ranked) seed(seed uint64) uint64        { return k.r.Seed(seed) }
func (k ranked) collective() learner.Collective { return k.r.Collective() }
func (k ranked) rowsCollected(rows int) int64   { return k.r.RowsCollected(rows) }
func (k ranked) result(res *Result)             { res.Rank, res.Ranks = k.r.ID(), k.r.Size() }

func (k ranked) prepare(towers *learner.Towers, batch *learner.SampleBatch, minibatch int) {
	k.r.Prepare(towers, batch, minibatch)
}

// iterations counts every rank's steps in TotalSteps.
func (k ranked) iterations(cfg Config) (int, error) {
	iters := cfg.Iterations() / k.r.Size()
	if iters == 0 {
		return 0, fmt.Errorf("%w: TotalSteps %d is less than one iteration of %d ranks × %d steps", ErrConfig,
			cfg.TotalSteps, k.r.Size(), cfg.Workers*cfg.Envs*cfg.RolloutSteps)
	}
	return iters, nil
}

func (k ranked) learn(ctx context.Context, l *learner.Learner, b *learner.SampleBatch, it, rows int) (learner.Result, error) {
	return k.r.Learn(ctx, b, it, rows, func() (learner.Result, error) { return submit(ctx, l, b) })
}

func (k ranked) reduceStats(ctx context.Context, stats []float64) error {
	return k.r.ReduceStats(ctx, stats)
}

// reduceEpisodes fills m's episode statistics over every rank's episodes, and its collection
// rate as the sum of the ranks'.
func (k ranked) reduceEpisodes(ctx context.Context, m *Metrics, eps []batcher.Episode) error {
	e := ddppo.Episodes{N: len(eps), Min: math.Inf(1), Max: math.Inf(-1), SPS: float64(m.CollectSPS)}
	for _, ep := range eps {
		e.ReturnSum += ep.Return
		e.LengthSum += float64(ep.Length)
		e.Min, e.Max = math.Min(e.Min, ep.Return), math.Max(e.Max, ep.Return)
	}
	all, err := k.r.ReduceEpisodes(ctx, e)
	if err != nil {
		return err
	}
	m.Episodes, m.CollectSPS = all.N, Float(all.SPS)
	if all.N > 0 {
		n := float64(all.N)
		m.ReturnMean, m.ReturnMin, m.ReturnMax, m.LengthMean = Float(all.ReturnSum/n), Float(all.Min), Float(all.Max), Float(all.LengthSum/n)
	}
	return nil
}

// metrics adds the iteration's cross-rank time and preemption.
func (k ranked) metrics(m *Metrics, res learner.Result) {
	allreduce := k.r.AllReduce()
	m.AllReduceSeconds = Float(allreduce.Seconds())
	if collected, preempted, wait, ok := k.r.Preemption(); ok {
		p := &PreemptMetrics{CollectedFrac: make([]Float, len(collected)), Preempted: preempted, WaitSeconds: Float(wait.Seconds())}
		for i, f := range collected {
			p.CollectedFrac[i] = Float(f)
		}
		m.Preemption = p
	}
	if res.Updates > 0 {
		m.AllReducePerUpdate = Float(1e6 * allreduce.Seconds() / float64(res.Updates))
	}
}

func (k ranked) sum(ctx context.Context, v []float64, what string) error {
	return k.r.Sum(ctx, v, what)
}
func (k ranked) gather(ctx context.Context, b []byte) ([][]byte, error) { return k.r.Gather(ctx, b) }
func (k ranked) agree(ctx context.Context, flag bool) (bool, error)     { return k.r.Agree(ctx, flag) }

func (k ranked) checkSame(ctx context.Context, params []float32) error {
	return k.r.CheckSame(ctx, paramsHash(params))
}

func (k ranked) gatherSnapshots(ctx context.Context, snap []byte, c *models.Checkpoint) error {
	return k.r.GatherSnapshots(ctx, snap, c)
}

func (k ranked) batcherSnapshot(c *models.Checkpoint) ([]byte, error) {
	return k.r.BatcherSnapshot(c, ErrConfig)
}

// PreemptMetrics describe a DD-PPO iteration's straggler preemption (Config.SyncFrac).
type PreemptMetrics struct {
	// CollectedFrac is each rank's rollout as a fraction of rollout_steps, in rank order
	// (1: it finished; less: it was preempted).
	CollectedFrac []Float `json:"collected_frac"`
	// Preempted is the number of ranks that stopped early.
	Preempted int `json:"preempted"`
	// WaitSeconds is how long rank 0 waited, its own rollout done, for the others to finish
	// theirs (part of collect_seconds).
	WaitSeconds Float `json:"wait_seconds"`
}

// syncFracDefaults fills SyncFrac (ddppo's default) and checks it.
func (c *Config) syncFracDefaults() error {
	if !(c.SyncFrac >= 0 && c.SyncFrac <= 1) {
		return fmt.Errorf("%w: SyncFrac = %g, want (0, 1]: the fraction of DD-PPO ranks that must finish collecting before the others stop early (1: never stop early; 0: the default %g)",
			ErrConfig, c.SyncFrac, DefaultSyncFrac)
	}
	if c.SyncFrac == 0 && capabilities(c.Algo).Ranks {
		c.SyncFrac = DefaultSyncFrac
	}
	return nil
}

// preemptCollector is a rank's own batchers collecting with its straggler preemption
// (ddppo.Rank.Collect).
type preemptCollector struct {
	*batchersCollector
	r *ddppo.Rank
}

func (c *preemptCollector) collect(ctx context.Context, _ int64) (*batcher.Rollout, error) {
	return c.r.Collect(ctx, c.b, c.cfg.RolloutSteps)
}

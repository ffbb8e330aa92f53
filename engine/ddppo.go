package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/learner/mpi"
	"github.com/towerrl/towerrl/models"
)

// DD-PPO (Wijmans et al. 2019) runs as one process per rank of an MPI job (Options.Ranks):
// every rank collects with its own batchers (env seeds derived from (seed, rank)) and trains
// its own towers, whose gradients are averaged locally and then across the ranks, weighted by
// each rank's rows, at every minibatch (learner/mpi.Collective); advantages are standardised
// over every rank's rows of a minibatch. The ranks start from the same weights and apply the
// same averaged gradients, so they stay identical: every checkpoint_every iterations and at the
// end they compare a hash of their parameters, and a mismatch stops the run.
//
// Rank 0 owns the run directory: it creates (or resumes) it, sends the configuration (with the
// run ID) and, on resume, the checkpoint to the other ranks, and writes config.json, the
// metrics (statistics reduced over every rank), policy.onnx and checkpoints holding every
// rank's batcher snapshot. The other ranks write nothing. A checkpoint records the number of
// ranks; a resume with another number is refused. With Config.SyncFrac below what every rank
// must reach, stragglers stop collecting early (straggler preemption, preempt.go).

// rankState is a trainer's place in a DD-PPO job of more than one rank: its reducer.
type rankState struct {
	g        mpi.Group
	id, n    int // rank, and ranks in the job
	coll     *mpi.Collective
	cross    time.Duration // the collective's cross-rank time until the last iteration
	slowdown float64       // Options.Slowdown
	pre      *preemption   // straggler preemption (preempt.go), nil when off
}

func (r *rankState) rank() int                      { return r.id }
func (r *rankState) size() int                      { return r.n }
func (r *rankState) root() bool                     { return r.id == 0 }
func (r *rankState) seed(seed uint64) uint64        { return rankSeed(seed, r.id) }
func (r *rankState) collective() learner.Collective { return r.coll }

// iterations counts every rank's steps in TotalSteps.
func (r *rankState) iterations(cfg Config) (int, error) {
	iters := cfg.Iterations() / r.n
	if iters == 0 {
		return 0, fmt.Errorf("%w: TotalSteps %d is less than one iteration of %d ranks × %d steps", ErrConfig,
			cfg.TotalSteps, r.n, cfg.Workers*cfg.Envs*cfg.RolloutSteps)
	}
	return iters, nil
}

// learn trains on the rank's rows: weighted by their number in the cross-rank average, or,
// when the ranks' rows differ (preemption), through the schedule the rank runs itself.
func (r *rankState) learn(ctx context.Context, l *learner.Learner, b *learner.SampleBatch, it, rows int) (learner.Result, error) {
	if p := r.pre; p != nil && p.on {
		return p.learn(ctx, r.coll, b, it)
	}
	if err := r.coll.SetWeight(float64(rows)); err != nil {
		return learner.Result{}, err
	}
	return submit(ctx, l, b)
}

// metrics adds the iteration's cross-rank time (the collective's, since the last iteration)
// and preemption.
func (r *rankState) metrics(m *Metrics, res learner.Result) {
	_, cross := r.coll.Timing()
	allreduce := since(cross, &r.cross)
	m.AllReduceSeconds = Float(allreduce.Seconds())
	m.Preemption = r.pre.metrics()
	if res.Updates > 0 {
		m.AllReducePerUpdate = Float(1e6 * allreduce.Seconds() / float64(res.Updates))
	}
}

// sum adds v over the ranks, in place.
func (r *rankState) sum(ctx context.Context, v []float64, what string) error {
	if err := r.g.AllReduceFloat64(ctx, mpi.Sum, v); err != nil {
		return fmt.Errorf("engine: summing the %s over the ranks: %w", what, err)
	}
	return nil
}

// gather collects every rank's b on rank 0.
func (r *rankState) gather(ctx context.Context, b []byte) ([][]byte, error) {
	return r.g.Gather(ctx, 0, b)
}

// result places the process in its job.
func (r *rankState) result(res *Result) { res.Rank, res.Ranks = r.id, r.n }

// ranksOf checks a run's Options.Ranks against its algorithm: nil (one process) unless the
// group has more than one rank, which only ddppo runs on.
func ranksOf(cfg Config, g mpi.Group) (mpi.Group, error) {
	if g == nil || g.Size() == 1 {
		return nil, nil
	}
	if !capabilities(cfg.Algo).Ranks {
		return nil, fmt.Errorf("%w: %d ranks (an MPI job) train with an algorithm that trains across ranks (--algo %s), not %q",
			ErrConfig, g.Size(), strings.Join(rankedAlgos(), ", "), cfg.Algo)
	}
	return g, nil
}

// rankSeed is rank r's batcher seed: the run's seed for rank 0 (one rank trains as ppo does),
// a different stream of envs for every other rank.
func rankSeed(seed uint64, r int) uint64 {
	if r == 0 {
		return seed
	}
	return seed ^ (uint64(r) * 0xbf58476d1ce4e5b9)
}

// shared is what rank 0 sends the other ranks before training: the configuration (with its
// run ID), the checkpoint to resume from, the policy being fine-tuned, whether checkpoints are
// written (rank 0 has a run directory), or the error that stopped rank 0 before training.
type shared struct {
	Config     []byte `json:"config,omitempty"`
	Checkpoint []byte `json:"checkpoint,omitempty"`
	InitPolicy []byte `json:"init_policy,omitempty"`
	Saving     bool   `json:"saving"`
	Err        string `json:"error,omitempty"`
}

// bcastBytes sends data (rank 0's; nil elsewhere) to every rank: its length, then the bytes.
func bcastBytes(ctx context.Context, g mpi.Group, data []byte) ([]byte, error) {
	n := make([]byte, 8)
	binary.LittleEndian.PutUint64(n, uint64(len(data)))
	if err := g.Bcast(ctx, 0, n); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n)
	if size > 1<<40 {
		return nil, fmt.Errorf("engine: rank 0 announced %d bytes", size)
	}
	buf := make([]byte, size)
	copy(buf, data)
	if err := g.Bcast(ctx, 0, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// send is rank 0's side of the start: it sends s, or err when rank 0 failed before training
// (the other ranks then stop with it instead of waiting).
func send(ctx context.Context, g mpi.Group, s shared, err error) error {
	if err != nil {
		s = shared{Err: err.Error()}
	}
	b, merr := json.Marshal(s)
	if merr != nil {
		return merr
	}
	if _, berr := bcastBytes(ctx, g, b); berr != nil {
		return errors.Join(err, fmt.Errorf("engine: sending the run to the other ranks: %w", berr))
	}
	if err != nil {
		return err
	}
	return agreeStart(ctx, g, nil)
}

// agreeStart is every rank's last step before training: all go on, or all stop when one of
// them could not take the run (err), instead of the others waiting in their first collective.
func agreeStart(ctx context.Context, g mpi.Group, err error) error {
	v := []float64{0}
	if err != nil {
		v[0] = 1
	}
	if aerr := g.AllReduceFloat64(ctx, mpi.Max, v); aerr != nil {
		return errors.Join(err, aerr)
	}
	if err == nil && v[0] > 0 {
		return fmt.Errorf("engine: rank %d: another rank refused the run (its error says why); nothing was trained", g.Rank())
	}
	return err
}

// follow is the start of a rank other than 0: it takes the run from rank 0 and trains it
// writing nothing. For a fresh run, its own configuration (from the same command line) must
// equal rank 0's.
func follow(ctx context.Context, cfg Config, opts Options, resume bool) (Result, error) {
	g := opts.Ranks
	b, err := bcastBytes(ctx, g, nil)
	if err != nil {
		return Result{}, fmt.Errorf("engine: rank %d: waiting for rank 0's run: %w", g.Rank(), err)
	}
	var s shared
	if err := json.Unmarshal(b, &s); err != nil {
		return Result{}, fmt.Errorf("engine: rank %d: rank 0's run: %w", g.Rank(), err)
	}
	if s.Err != "" {
		return Result{}, fmt.Errorf("engine: rank %d: rank 0 stopped before training: %s", g.Rank(), s.Err)
	}
	root, spec, ckpt, err := takeRun(s, cfg, resume)
	if err = agreeStart(ctx, g, err); err != nil {
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
func takeRun(s shared, cfg Config, resume bool) (Config, envs.Spec, *models.Checkpoint, error) {
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

// newRankState joins the trainer to its job: the two-level collective its towers average
// through.
func newRankState(g mpi.Group, towers int) (*rankState, error) {
	c, err := mpi.NewCollective(g, towers)
	if err != nil {
		return nil, err
	}
	return &rankState{g: g, id: g.Rank(), n: g.Size(), coll: c}, nil
}

// agree returns whether any rank's flag is set (a stop asked on one rank stops them all at
// the same iteration).
func (r *rankState) agree(ctx context.Context, flag bool) (bool, error) {
	v := []float64{0}
	if flag {
		v[0] = 1
	}
	err := r.g.AllReduceFloat64(ctx, mpi.Max, v)
	return v[0] > 0, err
}

// paramsHash is the SHA-256 of params' float32 bytes.
func paramsHash(params []float32) [32]byte {
	return sha256.Sum256(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(params))), 4*len(params)))
}

// checkSame compares the ranks' parameters: a mismatch (a rank that diverged) is an error on
// every rank.
func (r *rankState) checkSame(ctx context.Context, params []float32) error {
	if err := r.g.CheckSame(ctx, paramsHash(params)); err != nil {
		return fmt.Errorf("engine: the ranks' parameters differ; the run stops (a rank diverged: the checkpoint before this is the last good one): %w", err)
	}
	return nil
}

// reduceStats replaces this rank's update statistics by their mean over the ranks.
func (r *rankState) reduceStats(ctx context.Context, stats []float64) error {
	if err := r.g.AllReduceFloat64(ctx, mpi.Sum, stats); err != nil {
		return err
	}
	for i := range stats {
		stats[i] /= float64(r.n)
	}
	return nil
}

// reduceEpisodes fills m's episode statistics over every rank's episodes, and its collection
// rate as the sum of the ranks'.
func (r *rankState) reduceEpisodes(ctx context.Context, m *Metrics, eps []batcher.Episode) error {
	sums := []float64{float64(len(eps)), 0, 0, float64(m.CollectSPS)}
	lo, hi := []float64{math.Inf(1)}, []float64{math.Inf(-1)}
	for _, e := range eps {
		sums[1] += e.Return
		sums[2] += float64(e.Length)
		lo[0], hi[0] = math.Min(lo[0], e.Return), math.Max(hi[0], e.Return)
	}
	if err := r.g.AllReduceFloat64(ctx, mpi.Sum, sums); err != nil {
		return err
	}
	if err := r.g.AllReduceFloat64(ctx, mpi.Min, lo); err != nil {
		return err
	}
	if err := r.g.AllReduceFloat64(ctx, mpi.Max, hi); err != nil {
		return err
	}
	m.Episodes, m.CollectSPS = int(sums[0]), Float(sums[3])
	if sums[0] > 0 {
		m.ReturnMean, m.ReturnMin, m.ReturnMax, m.LengthMean = Float(sums[1]/sums[0]), Float(lo[0]), Float(hi[0]), Float(sums[2]/sums[0])
	}
	return nil
}

// gatherSnapshots collects every rank's batcher snapshot into rank 0's checkpoint c (nil on
// the other ranks): rank r's under "batcher.rank<r>", rank 0's under "batcher", and the number
// of ranks.
func (r *rankState) gatherSnapshots(ctx context.Context, snap []byte, c *models.Checkpoint) error {
	all, err := r.g.Gather(ctx, 0, snap)
	if err != nil {
		return err
	}
	if c == nil {
		return nil
	}
	c.Ints["ranks"] = int64(r.n)
	for k := 1; k < len(all); k++ {
		c.Bytes[fmt.Sprintf("batcher.rank%d", k)] = all[k]
	}
	return nil
}

// batcherSnapshot is this rank's batcher snapshot in checkpoint c, which must have been written
// by as many ranks as this run has.
func (r *rankState) batcherSnapshot(c *models.Checkpoint) ([]byte, error) {
	size, rank := r.n, r.id
	if n := max(c.Ints["ranks"], 1); n != int64(size) {
		return nil, fmt.Errorf("%w: the checkpoint was written by %d ranks, this run has %d: resume with mpirun -np %d", ErrConfig, n, size, n)
	}
	if rank == 0 {
		return c.Bytes["batcher"], nil
	}
	b, ok := c.Bytes[fmt.Sprintf("batcher.rank%d", rank)]
	if !ok {
		return nil, fmt.Errorf("engine: the checkpoint holds no batcher snapshot for rank %d", rank)
	}
	return b, nil
}

// Package ddppo is DD-PPO's distribution (Wijmans et al. 2019) as the engine's trainer runs
// it, one process per rank of an MPI job (package learner/mpi): every rank collects with its
// own batchers (env seeds derived from (seed, rank), RankSeed) and trains its own towers, whose
// gradients are averaged locally and then across the ranks, weighted by each rank's rows, at
// every minibatch (mpi.Collective); advantages are standardised over every rank's rows of a
// minibatch. The ranks start from the same weights and apply the same averaged gradients, so
// they stay identical: they compare a hash of their parameters (Rank.CheckSame), and a
// mismatch stops the run.
//
// Rank 0 owns the run: it sends the others the run's configuration, checkpoint and fine-tuned
// policy before training (Send, Receive, AgreeStart), and its checkpoints gather every rank's
// batcher snapshot (Rank.GatherSnapshots). With a sync_frac below what every rank must reach,
// stragglers stop collecting early (straggler preemption, preempt.go).
//
// The package knows nothing of the engine's runs: package engine drives a [Rank] as the
// reducer of a run of several ranks.
//
// Threading: a Rank is used by its trainer's goroutine; its preemption's stop function is
// called by the batchers' workers.
package ddppo

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/learner/mpi"
	"github.com/towerrl/towerrl/models"
)

// Group is a process's place in an MPI job (learner/mpi's World under mpirun, or one of
// mpi.InProcess's ranks).
type Group = mpi.Group

// RankSeed is rank r's batcher seed: the run's seed for rank 0 (one rank trains as ppo does),
// a different stream of envs for every other rank.
func RankSeed(seed uint64, r int) uint64 {
	if r == 0 {
		return seed
	}
	return seed ^ (uint64(r) * 0xbf58476d1ce4e5b9)
}

// Shared is what rank 0 sends the other ranks before training: the configuration (with its
// run ID), the checkpoint to resume from, the policy being fine-tuned, whether checkpoints are
// written (rank 0 has a run directory), or the error that stopped rank 0 before training.
type Shared struct {
	Config     []byte `json:"config,omitempty"`
	Checkpoint []byte `json:"checkpoint,omitempty"`
	InitPolicy []byte `json:"init_policy,omitempty"`
	Saving     bool   `json:"saving"`
	Err        string `json:"error,omitempty"`
}

// bcastBytes sends data (rank 0's; nil elsewhere) to every rank: its length, then the bytes.
func bcastBytes(ctx context.Context, g Group, data []byte) ([]byte, error) {
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

// Send is rank 0's side of the start: it sends s, or err when rank 0 failed before training
// (the other ranks then stop with it instead of waiting), then agrees with them to start
// (AgreeStart).
func Send(ctx context.Context, g Group, s Shared, err error) error {
	if err != nil {
		s = Shared{Err: err.Error()}
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
	return AgreeStart(ctx, g, nil)
}

// AgreeStart is every rank's last step before training: all go on, or all stop when one of
// them could not take the run (err), instead of the others waiting in their first collective.
func AgreeStart(ctx context.Context, g Group, err error) error {
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

// Receive is the start of a rank other than 0: the run rank 0 sends (Send), or the error that
// stopped rank 0 before training.
func Receive(ctx context.Context, g Group) (Shared, error) {
	b, err := bcastBytes(ctx, g, nil)
	if err != nil {
		return Shared{}, fmt.Errorf("engine: rank %d: waiting for rank 0's run: %w", g.Rank(), err)
	}
	var s Shared
	if err := json.Unmarshal(b, &s); err != nil {
		return Shared{}, fmt.Errorf("engine: rank %d: rank 0's run: %w", g.Rank(), err)
	}
	if s.Err != "" {
		return Shared{}, fmt.Errorf("engine: rank %d: rank 0 stopped before training: %s", g.Rank(), s.Err)
	}
	return s, nil
}

// Rank is a process's place in a DD-PPO job of more than one rank.
type Rank struct {
	g        Group
	id, n    int // rank, and ranks in the job
	coll     *mpi.Collective
	cross    time.Duration // the collective's cross-rank time until the last iteration
	slowdown float64       // Options.Slowdown
	pre      *preemption   // straggler preemption (preempt.go), nil when off
}

// Join joins the trainer to its job: the two-level collective its towers average through
// (towers in this process). slowdown is the engine's test hook (Options.Slowdown): the rank's
// batchers collect slowdown times slower (1 or less: none).
func Join(g Group, towers int, slowdown float64) (*Rank, error) {
	c, err := mpi.NewCollective(g, towers)
	if err != nil {
		return nil, err
	}
	return &Rank{g: g, id: g.Rank(), n: g.Size(), coll: c, slowdown: slowdown}, nil
}

// ID is the rank; Size the ranks of the job.
func (r *Rank) ID() int   { return r.id }
func (r *Rank) Size() int { return r.n }

// Seed is this rank's batcher seed for the run's seed (RankSeed).
func (r *Rank) Seed(seed uint64) uint64 { return RankSeed(seed, r.id) }

// Collective is what the rank's towers average their gradients through: locally, then
// across the ranks.
func (r *Rank) Collective() learner.Collective { return r.coll }

// Learn trains on the rank's rows (rows of b, for iteration it): weighted by their number in
// the cross-rank average (then submit trains b as one process would), or, when the ranks' rows
// differ (preemption), through the schedule the rank runs itself.
func (r *Rank) Learn(ctx context.Context, b *learner.SampleBatch, it, rows int, submit func() (learner.Result, error)) (learner.Result, error) {
	if p := r.pre; p != nil && p.on {
		return p.learn(ctx, r.coll, b, it)
	}
	if err := r.coll.SetWeight(float64(rows)); err != nil {
		return learner.Result{}, err
	}
	return submit()
}

// AllReduce is the time the rank spent in the cross-rank all-reduces of its updates since
// the previous call, waiting for the other ranks included.
func (r *Rank) AllReduce() time.Duration {
	_, cross := r.coll.Timing()
	d := cross - r.cross
	r.cross = cross
	return d
}

// Sum adds v over the ranks, in place; what names it in the error.
func (r *Rank) Sum(ctx context.Context, v []float64, what string) error {
	if err := r.g.AllReduceFloat64(ctx, mpi.Sum, v); err != nil {
		return fmt.Errorf("engine: summing the %s over the ranks: %w", what, err)
	}
	return nil
}

// Gather collects every rank's b on rank 0 (in rank order; nil elsewhere).
func (r *Rank) Gather(ctx context.Context, b []byte) ([][]byte, error) { return r.g.Gather(ctx, 0, b) }

// Agree returns whether any rank's flag is set (a stop asked on one rank stops them all at
// the same iteration).
func (r *Rank) Agree(ctx context.Context, flag bool) (bool, error) {
	v := []float64{0}
	if flag {
		v[0] = 1
	}
	err := r.g.AllReduceFloat64(ctx, mpi.Max, v)
	return v[0] > 0, err
}

// CheckSame compares the ranks' parameters by their hash (sum): a mismatch (a rank that
// diverged) is an error on every rank.
func (r *Rank) CheckSame(ctx context.Context, sum [32]byte) error {
	if err := r.g.CheckSame(ctx, sum); err != nil {
		return fmt.Errorf("engine: the ranks' parameters differ; the run stops (a rank diverged: the checkpoint before this is the last good one): %w", err)
	}
	return nil
}

// ReduceStats replaces this rank's update statistics by their mean over the ranks.
func (r *Rank) ReduceStats(ctx context.Context, stats []float64) error {
	if err := r.g.AllReduceFloat64(ctx, mpi.Sum, stats); err != nil {
		return err
	}
	for i := range stats {
		stats[i] /= float64(r.n)
	}
	return nil
}

// Episodes are the statistics of the episodes that ended in an iteration, and the rate it
// collected at.
type Episodes struct {
	N                    int
	ReturnSum, LengthSum float64
	Min, Max             float64 // of the returns (±Inf for none)
	SPS                  float64
}

// ReduceEpisodes is e over every rank's episodes, its rate the sum of the ranks'.
func (r *Rank) ReduceEpisodes(ctx context.Context, e Episodes) (Episodes, error) {
	sums := []float64{float64(e.N), e.ReturnSum, e.LengthSum, e.SPS}
	lo, hi := []float64{e.Min}, []float64{e.Max}
	if err := r.g.AllReduceFloat64(ctx, mpi.Sum, sums); err != nil {
		return e, err
	}
	if err := r.g.AllReduceFloat64(ctx, mpi.Min, lo); err != nil {
		return e, err
	}
	if err := r.g.AllReduceFloat64(ctx, mpi.Max, hi); err != nil {
		return e, err
	}
	return Episodes{N: int(sums[0]), ReturnSum: sums[1], LengthSum: sums[2], Min: lo[0], Max: hi[0], SPS: sums[3]}, nil
}

// GatherSnapshots collects every rank's batcher snapshot into rank 0's checkpoint c (nil on
// the other ranks): rank r's under "batcher.rank<r>", rank 0's under "batcher", and the number
// of ranks.
func (r *Rank) GatherSnapshots(ctx context.Context, snap []byte, c *models.Checkpoint) error {
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

// BatcherSnapshot is this rank's batcher snapshot in checkpoint c, which must have been
// written by as many ranks as this run has (else an error wrapping invalid).
func (r *Rank) BatcherSnapshot(c *models.Checkpoint, invalid error) ([]byte, error) {
	size, rank := r.n, r.id
	if err := CheckRanks(c, size, invalid); err != nil {
		return nil, err
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

// CheckRanks refuses checkpoint c unless it was written by size ranks (a run of one process
// writes none), with an error wrapping invalid that says how to resume it.
func CheckRanks(c *models.Checkpoint, size int, invalid error) error {
	if n := max(c.Ints["ranks"], 1); n != int64(size) {
		return fmt.Errorf("%w: the checkpoint was written by %d ranks, this run has %d: resume with mpirun -np %d", invalid, n, size, n)
	}
	return nil
}

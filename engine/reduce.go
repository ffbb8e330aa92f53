package engine

import (
	"context"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/ddppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// reducer is how a run combines what its process did with the other processes of its job.
// The trainer chooses one when it is made (newTrainer) and never asks which it has: alone (one
// process: nothing to combine), or a rank of a DD-PPO job (ranked, ddppo.go, over package engine/ddppo), whose
// gradients, statistics, episodes, normalisation sums, stop requests and checkpoints are
// combined across the ranks, with straggler preemption (engine/ddppo) when it is on.
//
// An off-policy algorithm trains alone, or across ranks through the same reducer: its updates
// go through learn like any other.
type reducer interface {
	// rank is this process's place in the job (0 alone); size the processes of the job.
	rank() int
	size() int
	// root reports whether this process writes the run (rank 0).
	root() bool
	// seed is the seed of this process's batchers for the run's seed.
	seed(seed uint64) uint64
	// iterations is the iterations of the run of cfg, all processes together.
	iterations(cfg Config) (int, error)
	// collective is what the learner's towers average their gradients through (nil: their
	// own, in-process).
	collective() learner.Collective
	// learn trains the learner l on b (rows rows this process collected) for iteration it.
	learn(ctx context.Context, l *learner.Learner, b *learner.SampleBatch, it, rows int) (learner.Result, error)
	// reduceStats replaces this process's update statistics with their mean over the job.
	reduceStats(ctx context.Context, stats []float64) error
	// reduceEpisodes replaces m's episode statistics (this process's eps) and collection
	// rate with the job's.
	reduceEpisodes(ctx context.Context, m *Metrics, eps []batcher.Episode) error
	// rowsCollected is the rows the job collected this iteration, this process rows.
	rowsCollected(rows int) int64
	// metrics adds the combination's share of an iteration's metrics (res: its update).
	metrics(m *Metrics, res learner.Result)
	// sum adds v over the job, in place (what normalisation statistics take).
	sum(ctx context.Context, v []float64, what string) error
	// gather collects every process's b on the root (in rank order; nil elsewhere).
	gather(ctx context.Context, b []byte) ([][]byte, error)
	// agree reports whether any process's flag is set.
	agree(ctx context.Context, flag bool) (bool, error)
	// checkSame fails when the processes' parameters differ.
	checkSame(ctx context.Context, params []float32) error
	// prepare readies the reducer once the learner's towers are made: minibatch is their
	// minibatch's rows, batch the learner's batch.
	prepare(towers *learner.Towers, batch *learner.SampleBatch, minibatch int)
	// gatherSnapshots puts every process's batcher snapshot into the root's checkpoint c
	// (nil elsewhere); batcherSnapshot is this process's snapshot in checkpoint c.
	gatherSnapshots(ctx context.Context, snap []byte, c *models.Checkpoint) error
	batcherSnapshot(c *models.Checkpoint) ([]byte, error)
	// result adds the process's place to res.
	result(res *Result)
}

// alone is the reducer of a run of one process.
type alone struct{}

func (alone) rank() int                                          { return 0 }
func (alone) size() int                                          { return 1 }
func (alone) root() bool                                         { return true }
func (alone) seed(seed uint64) uint64                            { return seed }
func (alone) iterations(cfg Config) (int, error)                 { return cfg.Iterations(), nil }
func (alone) collective() learner.Collective                     { return nil }
func (alone) reduceStats(context.Context, []float64) error       { return nil }
func (alone) rowsCollected(rows int) int64                       { return int64(rows) }
func (alone) metrics(*Metrics, learner.Result)                   {}
func (alone) sum(context.Context, []float64, string) error       { return nil }
func (alone) agree(_ context.Context, flag bool) (bool, error)   { return flag, nil }
func (alone) checkSame(context.Context, []float32) error         { return nil }
func (alone) result(*Result)                                     {}
func (alone) prepare(*learner.Towers, *learner.SampleBatch, int) {}

func (alone) learn(ctx context.Context, l *learner.Learner, b *learner.SampleBatch, _, _ int) (learner.Result, error) {
	return submit(ctx, l, b)
}

func (alone) reduceEpisodes(context.Context, *Metrics, []batcher.Episode) error { return nil }

func (alone) gather(_ context.Context, b []byte) ([][]byte, error) { return [][]byte{b}, nil }

func (alone) gatherSnapshots(context.Context, []byte, *models.Checkpoint) error { return nil }

func (alone) batcherSnapshot(c *models.Checkpoint) ([]byte, error) {
	if err := ddppo.CheckRanks(c, 1, ErrConfig); err != nil {
		return nil, err
	}
	return c.Bytes["batcher"], nil
}

// submit trains the learner on b: one Submit, its result, and the batch handed back.
func submit(ctx context.Context, l *learner.Learner, b *learner.SampleBatch) (learner.Result, error) {
	if err := l.Submit(ctx, b); err != nil {
		return learner.Result{}, err
	}
	var res learner.Result
	select {
	case res = <-l.Results():
	case <-ctx.Done():
		return learner.Result{}, ctx.Err()
	}
	if res.Err != nil {
		return learner.Result{}, res.Err
	}
	<-l.Released()
	return res, nil
}

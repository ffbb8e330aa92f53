package mpi

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Group is what a DD-PPO run needs of its ranks: *World in an MPI job, or the stand-in ranks
// of InProcess (tests, and trying a multi-rank run without MPI). Every rank makes the same
// calls in the same order; a call returns when every rank has made it.
type Group interface {
	Rank() int
	Size() int
	// AllReduceWeighted: see World.AllReduceWeighted.
	AllReduceWeighted(ctx context.Context, buf []float32, weight float64) error
	// AllReduceFloat64: see World.AllReduceFloat64.
	AllReduceFloat64(ctx context.Context, op Op, buf []float64) error
	// Bcast copies root's buf into every rank's buf (all of one length).
	Bcast(ctx context.Context, root int, buf []byte) error
	// CheckSame: see World.CheckSame.
	CheckSame(ctx context.Context, hash [32]byte) error
	// Gather: see World.Gather.
	Gather(ctx context.Context, root int, data []byte) ([][]byte, error)
	// FinishRollout: see World.FinishRollout.
	FinishRollout(ctx context.Context, steps int64) ([]int64, error)
	// RolloutsFinished: see World.RolloutsFinished. Unlike the calls above it never waits
	// for the other ranks, and may be called from any goroutine.
	RolloutsFinished() (int, error)
}

var _ Group = (*World)(nil)

// InProcess makes n stand-in ranks of one job inside this process, one per goroutine: the same
// results as a World of n ranks (sums in rank order, in float64), without MPI. A call whose
// ctx ends before every rank has made it returns an error naming the ranks that never
// arrived; ranks whose calls do not match (another operation, another length) all get
// ErrOutOfStep.
func InProcess(n int) []Group {
	j := &inProcJob{n: n, rounds: map[uint64]*inProcRound{}}
	g := make([]Group, n)
	for r := range g {
		g[r] = &inProcRank{job: j, rank: r}
	}
	return g
}

type inProcJob struct {
	n      int
	mu     sync.Mutex
	rounds map[uint64]*inProcRound // by call sequence number
}

type inProcRound struct {
	op    call
	in    []any
	seen  []bool
	count int
	out   []any // per rank
	err   error
	done  chan struct{}
}

type inProcRank struct {
	job  *inProcJob
	rank int
	seq  uint64
}

func (r *inProcRank) Rank() int { return r.rank }
func (r *inProcRank) Size() int { return r.job.n }

// call contributes v to the job's next round and returns this rank's share of reduce's
// result, once every rank has contributed.
func (r *inProcRank) call(ctx context.Context, op call, v any, reduce func(in []any) ([]any, error)) (any, error) {
	r.seq++
	j := r.job
	j.mu.Lock()
	rd := j.rounds[r.seq]
	if rd == nil {
		rd = &inProcRound{op: op, in: make([]any, j.n), seen: make([]bool, j.n), done: make(chan struct{})}
		j.rounds[r.seq] = rd
	}
	if rd.op != op {
		rd.err = fmt.Errorf("%w: call #%d is %s on one rank and %s on rank %d", ErrOutOfStep, r.seq, rd.op, op, r.rank)
	}
	rd.in[r.rank], rd.seen[r.rank] = v, true
	rd.count++
	if rd.count == j.n {
		if rd.err == nil {
			rd.out, rd.err = reduce(rd.in)
		}
		delete(j.rounds, r.seq)
		close(rd.done)
	}
	j.mu.Unlock()
	select {
	case <-rd.done:
	case <-ctx.Done():
		j.mu.Lock()
		var missing []int
		for k, ok := range rd.seen {
			if !ok {
				missing = append(missing, k)
			}
		}
		j.mu.Unlock()
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: rank %d waited in %s #%d; %s never arrived: %w", ErrStalled, r.rank, op, r.seq, ranksText(missing), ctx.Err())
		}
		<-rd.done
	}
	if rd.err != nil {
		return nil, rd.err
	}
	return rd.out[r.rank], nil
}

// same checks that every rank's contribution has length n(v).
func same[T any](in []any, n func(T) int) error {
	for k := range in {
		if n(in[k].(T)) != n(in[0].(T)) {
			return fmt.Errorf("%w: rank 0 passed %d values, rank %d %d", ErrOutOfStep, n(in[0].(T)), k, n(in[k].(T)))
		}
	}
	return nil
}

func (r *inProcRank) AllReduceWeighted(ctx context.Context, buf []float32, weight float64) error {
	v := make([]float64, len(buf)+tail)
	packWeighted(v, buf, weight, r.seq+1)
	res, err := r.call(ctx, callWeighted, v, func(in []any) ([]any, error) {
		if err := same(in, func(x []float64) int { return len(x) }); err != nil {
			return nil, err
		}
		sum := make([]float64, len(v))
		for _, x := range in {
			for i, y := range x.([]float64) {
				sum[i] += y
			}
		}
		return slices.Repeat([]any{sum}, len(in)), nil
	})
	if err != nil {
		return err
	}
	if !validWeight(weight) {
		return weightError(weight, r.seq)
	}
	return unpackWeighted(buf, res.([]float64), r.job.n, r.seq)
}

func (r *inProcRank) AllReduceFloat64(ctx context.Context, op Op, buf []float64) error {
	if op != Sum && op != Max && op != Min {
		return fmt.Errorf("%w: reduction %v: use Sum, Max or Min", ErrArgument, op)
	}
	res, err := r.call(ctx, callReduce, slices.Clone(buf), func(in []any) ([]any, error) {
		if err := same(in, func(x []float64) int { return len(x) }); err != nil {
			return nil, err
		}
		acc := slices.Clone(in[0].([]float64))
		for _, x := range in[1:] {
			for i, y := range x.([]float64) {
				switch op {
				case Sum:
					acc[i] += y
				case Max:
					acc[i] = max(acc[i], y)
				case Min:
					acc[i] = min(acc[i], y)
				}
			}
		}
		return slices.Repeat([]any{acc}, len(in)), nil
	})
	if err == nil {
		copy(buf, res.([]float64))
	}
	return err
}

func (r *inProcRank) Bcast(ctx context.Context, root int, buf []byte) error {
	if root < 0 || root >= r.job.n {
		return fmt.Errorf("%w: bcast root %d of %d ranks", ErrArgument, root, r.job.n)
	}
	res, err := r.call(ctx, callBcast, slices.Clone(buf), func(in []any) ([]any, error) {
		if err := same(in, func(x []byte) int { return len(x) }); err != nil {
			return nil, err
		}
		return slices.Repeat([]any{in[root]}, len(in)), nil
	})
	if err == nil {
		copy(buf, res.([]byte))
	}
	return err
}

func (r *inProcRank) CheckSame(ctx context.Context, hash [32]byte) error {
	_, err := r.call(ctx, callCheckSame, hash, func(in []any) ([]any, error) {
		hs := make([][32]byte, len(in))
		for k, h := range in {
			hs[k] = h.([32]byte)
		}
		return make([]any, len(in)), compareHashes(hs)
	})
	return err
}

func (r *inProcRank) Gather(ctx context.Context, root int, data []byte) ([][]byte, error) {
	if root < 0 || root >= r.job.n {
		return nil, fmt.Errorf("%w: gather root %d of %d ranks", ErrArgument, root, r.job.n)
	}
	res, err := r.call(ctx, callGather, slices.Clone(data), func(in []any) ([]any, error) {
		all := make([][]byte, len(in))
		for k, d := range in {
			all[k] = d.([]byte)
		}
		out := make([]any, len(in))
		out[root] = all
		return out, nil
	})
	if err != nil || res == nil {
		return nil, err
	}
	return res.([][]byte), nil
}

func (r *inProcRank) FinishRollout(ctx context.Context, steps int64) ([]int64, error) {
	res, err := r.call(ctx, callFinish, steps, func(in []any) ([]any, error) {
		out := make([]any, len(in))
		for k := range out {
			all := make([]int64, len(in))
			for j, v := range in {
				all[j] = v.(int64)
			}
			out[k] = all
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return res.([]int64), nil
}

// RolloutsFinished counts the other ranks that have made this rank's next call, when it is
// FinishRollout. The rank's own calls are not under way (it is collecting), so its sequence
// number is stable while it polls.
func (r *inProcRank) RolloutsFinished() (int, error) {
	j := r.job
	j.mu.Lock()
	defer j.mu.Unlock()
	rd := j.rounds[r.seq+1]
	if rd == nil || rd.op != callFinish {
		return 0, nil
	}
	n := 0
	for k, ok := range rd.seen {
		if ok && k != r.rank {
			n++
		}
	}
	return n, nil
}

package learner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/towerrl/towerrl/internal/spin"
)

// Collective averages flat float32 buffers across the members of a group: the towers of one
// process, or (later) the processes of a DD-PPO run. Tower code sees only this interface.
type Collective interface {
	// AllReduce replaces buf with the element-wise mean of every member's buf. Each member
	// calls it once per round with its own index and a buffer of the same length; it returns
	// when the round is complete. The sum is taken in member order, so results are
	// deterministic.
	AllReduce(ctx context.Context, member int, buf []float32) error
	// Members is the size of the group.
	Members() int
}

// SumReducer is an optional interface of a Collective whose group spans processes (DD-PPO's
// ranks, package learner/mpi): AllReduceSum replaces buf with the element-wise sum of every
// process's buf. With it, Towers standardise each minibatch's advantages over the rows of
// every process (NormalizeAdvantages), so N processes of B rows train as one of N·B rows.
// Every process calls it at the same points, from one goroutine.
type SumReducer interface {
	AllReduceSum(ctx context.Context, buf []float64) error
}

// Local is the in-process Collective. Once every member has arrived, the members average the
// buffers together, each taking one shard of the values first (its own, then any left by a
// member that went away) and writing the mean of every member's values, added in member order,
// into all the buffers; each returns when every shard is done. Members that arrive earlier spin
// briefly before they park (see spin.For), so towers finishing within microseconds of each
// other pay no thread wake-up. Safe for concurrent use by its members.
type Local struct {
	n     int
	spin  bool        // waits spin first: spin.Auto.Spins(n)
	mu    sync.Mutex  // guards bufs and count
	bufs  [][]float32 // the buffers of the round being filled
	count int

	// A round's state, set by its last member to arrive before it posts arrived, and read by
	// the members until they return: the next round cannot fill before they have.
	cur     [][]float32 // the round's buffers
	err     error       // the round's error
	claimed []atomic.Bool
	pending atomic.Int64 // shards not yet averaged

	arrived *spin.Signal // posted when a round's members have all arrived
	reduced *spin.Signal // posted when a round's shards are all averaged
}

// NewLocal makes an in-process group of n members.
func NewLocal(n int) *Local {
	return &Local{n: n, spin: spin.Auto.Spins(n), bufs: make([][]float32, n), cur: make([][]float32, n),
		claimed: make([]atomic.Bool, n), arrived: spin.New(), reduced: spin.New()}
}

// Members is the size of the group.
func (l *Local) Members() int { return l.n }

// AllReduce implements Collective. A member whose ctx ends before the others have arrived
// returns ctx's error; its buffer stays in the round, which the others complete.
func (l *Local) AllReduce(ctx context.Context, member int, buf []float32) error {
	round, err := l.arrive(ctx, member, buf, false)
	if err != nil || l.n == 1 {
		return err
	}
	for k := range l.n {
		if s := (member + k) % l.n; l.claimed[s].CompareAndSwap(false, true) {
			lo, hi := span(len(buf), l.n, s)
			meanRange(l.cur, lo, hi)
			if l.pending.Add(-1) == 0 {
				l.reduced.Post()
			}
		}
	}
	// No ctx: the shards left are being averaged by members that have all arrived; the
	// buffers must not be handed back before they are done.
	_ = l.reduced.Wait(context.Background(), round, l.spin)
	return nil
}

// meanShard is the reduce-scatter form of AllReduce that Towers use with a Local: when it
// returns, buf[lo:hi] holds the mean of every member's values there (the bits AllReduce
// writes), and sums[k] the square sum of the mean's normBlock k for the blocks of [lo, hi)
// (lo a multiple of normBlock); the rest of buf is unchanged. The other members may still be
// reading buf when it returns: the caller must not write it before they have returned too.
// Every member of a round calls meanShard, each with its own shard.
func (l *Local) meanShard(ctx context.Context, member int, buf []float32, lo, hi int, sums []float64) error {
	if _, err := l.arrive(ctx, member, buf, true); err != nil {
		return err
	}
	if l.n == 1 {
		squareSums(buf, lo, hi, sums)
		return nil
	}
	meanSquareSums(l.cur, buf, lo, hi, sums)
	return nil
}

// arrive puts buf in the current round and returns when every member has (or with ctx's
// error), with the round's number and error. The last to arrive checks the buffers and
// readies the round's shards: for AllReduce (scatter false) as many as members, for
// meanShard none to share.
func (l *Local) arrive(ctx context.Context, member int, buf []float32, scatter bool) (uint64, error) {
	if member < 0 || member >= l.n {
		return 0, fmt.Errorf("%w: member %d of a group of %d", ErrConfig, member, l.n)
	}
	if l.n == 1 {
		return 0, nil // the mean of one buffer is the buffer
	}
	l.mu.Lock()
	if l.bufs[member] != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: member %d called AllReduce twice in one round", ErrConfig, member)
	}
	l.bufs[member] = buf
	l.count++
	round := l.arrived.Load() + 1
	if l.count < l.n {
		l.mu.Unlock()
		if err := l.arrived.Wait(ctx, round, l.spin); err != nil {
			return 0, err
		}
		return round, l.err
	}
	copy(l.cur, l.bufs)
	clear(l.bufs)
	l.count = 0
	l.err = sameLengths(l.cur)
	for i := range l.claimed {
		l.claimed[i].Store(false)
	}
	l.pending.Store(int64(l.n))
	if l.err != nil || scatter {
		l.pending.Store(0)
		l.reduced.Post() // nothing for AllReduce's members to wait for
	}
	l.arrived.Post()
	err := l.err
	l.mu.Unlock()
	return round, err
}

func sameLengths(bufs [][]float32) error {
	for i, b := range bufs {
		if len(b) != len(bufs[0]) {
			return fmt.Errorf("%w: member %d reduced %d values, member 0 %d", ErrConfig, i, len(b), len(bufs[0]))
		}
	}
	return nil
}

// meanChunk is the number of values meanSquareSums averages before it sums their squares:
// whole norm blocks, few enough (16 KiB) that the squares read the mean from L1.
const meanChunk = 8 * normBlock

// meanSquareSums writes into dst[lo:hi] the element-wise mean of bufs there, with meanRange's
// bits (dst may be one of bufs), and into sums[k] the square sum of the mean's normBlock k
// (squareSums' bits) for the blocks of [lo, hi) (lo a multiple of normBlock). It averages a
// chunk at a time in Go and then sums the chunk's squares with the vectorised kernel, which
// reads them from L1: a fifth faster than one Go loop doing both per value, on the critical
// path of every update with two towers (docs/benchmarks.md).
func meanSquareSums(bufs [][]float32, dst []float32, lo, hi int, sums []float64) {
	for c := lo; c < hi; c += meanChunk {
		e := min(c+meanChunk, hi)
		if len(bufs) == 2 {
			mean2(dst[c:e], bufs[0][c:e], bufs[1][c:e])
		} else {
			meanOf(bufs, dst, c, e)
		}
		squareSums(dst, c, e, sums)
	}
}

// meanOf writes into dst[lo:hi] the element-wise mean of bufs there, summed in member order
// (meanRange's bits); dst may be one of bufs.
func meanOf(bufs [][]float32, dst []float32, lo, hi int) {
	inv := 1 / float32(len(bufs))
	for j := lo; j < hi; j++ {
		m := bufs[0][j]
		for _, b := range bufs[1:] {
			m += b[j]
		}
		dst[j] = m * inv
	}
}

// mean2 is d = (a + b)·0.5 element by element (meanRange's bits for two members); d may be a
// or b. Eight values a step, each step's slices cut to eight so that the compiler drops the
// bounds checks.
func mean2(d, a, b []float32) {
	n := len(d)
	a, b = a[:n], b[:n]
	j := 0
	for ; j+8 <= n; j += 8 {
		x, y, z := a[j:j+8:j+8], b[j:j+8:j+8], d[j:j+8:j+8]
		z[0], z[1] = (x[0]+y[0])*0.5, (x[1]+y[1])*0.5
		z[2], z[3] = (x[2]+y[2])*0.5, (x[3]+y[3])*0.5
		z[4], z[5] = (x[4]+y[4])*0.5, (x[5]+y[5])*0.5
		z[6], z[7] = (x[6]+y[6])*0.5, (x[7]+y[7])*0.5
	}
	for ; j < n; j++ {
		d[j] = (a[j] + b[j]) * 0.5
	}
}

// meanRange writes the element-wise mean of bufs over [lo, hi), summed in member order, into
// every buffer.
func meanRange(bufs [][]float32, lo, hi int) {
	acc := bufs[0][lo:hi]
	if len(bufs) == 2 {
		// One pass instead of three (the same operations, so the same bits).
		b := bufs[1][lo:hi]
		for j, x := range b {
			m := (acc[j] + x) * 0.5
			acc[j], b[j] = m, m
		}
		return
	}
	for _, b := range bufs[1:] {
		for j, x := range b[lo:hi] {
			acc[j] += x
		}
	}
	inv := 1 / float32(len(bufs))
	for j := range acc {
		acc[j] *= inv
	}
	for _, b := range bufs[1:] {
		copy(b[lo:hi], acc)
	}
}

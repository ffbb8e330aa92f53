package mpi

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeJob stands in for the ranks of an MPI job inside one process: its ranks' weighted
// all-reduces meet at a barrier, where the last to arrive sums the packed vectors in rank order
// (as MPI_SUM does in some order); each rank then unpacks as World does.
type fakeJob struct {
	n     int
	mu    sync.Mutex // guards cur
	cur   *fakeRound
	ranks []*fakeRank
}

type fakeRound struct {
	vecs  [][]float64
	count int
	sum   []float64
	done  chan struct{}
}

type fakeRank struct {
	job  *fakeJob
	rank int
	seq  uint64
}

func newFakeJob(n int) *fakeJob {
	j := &fakeJob{n: n}
	for r := range n {
		j.ranks = append(j.ranks, &fakeRank{job: j, rank: r})
	}
	return j
}

func (r *fakeRank) AllReduceWeighted(ctx context.Context, buf []float32, weight float64) error {
	r.seq++
	v := make([]float64, len(buf)+tail)
	packWeighted(v, buf, weight, r.seq)
	j := r.job
	j.mu.Lock()
	if j.cur == nil {
		j.cur = &fakeRound{vecs: make([][]float64, j.n), done: make(chan struct{})}
	}
	round := j.cur
	round.vecs[r.rank] = v
	round.count++
	if round.count == j.n {
		round.sum = make([]float64, len(v))
		for _, x := range round.vecs {
			for i := range x {
				round.sum[i] += x[i]
			}
		}
		j.cur = nil
		close(round.done)
	}
	j.mu.Unlock()
	select {
	case <-round.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !validWeight(weight) {
		return weightError(weight, r.seq)
	}
	return unpackWeighted(buf, round.sum, j.n, r.seq)
}

// towerValue is tower m of rank r's element i in round k: every rank can recompute every
// other rank's buffers.
func towerValue(r, m, i, k int) float32 {
	return float32(math.Sin(float64(1+r*7919+m*104729+i*13+k*31))) * float32(1+r)
}

// TestCollectiveTwoLevel runs ranks × towers goroutines through several rounds and checks every
// tower's result against Σ_r w_r·mean_m(x_rm) / Σ_r w_r computed in float64, and that every
// tower of every rank holds the same bits.
func TestCollectiveTwoLevel(t *testing.T) {
	for _, tc := range []struct {
		ranks, towers int
		weights       []float64
	}{
		{1, 1, []float64{5}},
		{1, 3, []float64{5}},
		{2, 1, []float64{100, 25}},
		{2, 2, []float64{1, 1}},
		{3, 2, []float64{64, 16, 40}},
		{3, 3, []float64{10, 0, 30}},
	} {
		job := newFakeJob(tc.ranks)
		cols := make([]*Collective, tc.ranks)
		for r := range cols {
			c, err := newCollective(job.ranks[r], tc.towers)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SetWeight(tc.weights[r]); err != nil {
				t.Fatal(err)
			}
			cols[r] = c
		}
		const n, rounds = 257, 4
		out := make([][][]float32, tc.ranks)
		errs := make(chan error, tc.ranks*tc.towers)
		for k := range rounds {
			var wg sync.WaitGroup
			for r := range tc.ranks {
				out[r] = make([][]float32, tc.towers)
				for m := range tc.towers {
					buf := make([]float32, n)
					for i := range buf {
						buf[i] = towerValue(r, m, i, k)
					}
					out[r][m] = buf
					wg.Go(func() {
						if err := cols[r].AllReduce(t.Context(), m, buf); err != nil {
							errs <- err
						}
					})
				}
			}
			wg.Wait()
			select {
			case err := <-errs:
				t.Fatalf("%d ranks × %d towers, round %d: %v", tc.ranks, tc.towers, k, err)
			default:
			}
			var total float64
			for _, w := range tc.weights {
				total += w
			}
			for i := range n {
				var s float64
				for r := range tc.ranks {
					var mean float64
					for m := range tc.towers {
						mean += float64(towerValue(r, m, i, k))
					}
					s += tc.weights[r] * mean / float64(tc.towers)
				}
				want := float32(s / total)
				got := out[0][0][i]
				// The local mean is taken in float32 (learner.Local): a few ulps from the
				// float64 reference.
				if math.Abs(float64(got-want)) > 4e-7*math.Max(1, math.Abs(float64(want))) {
					t.Fatalf("%d ranks × %d towers, round %d, element %d: got %v, want %v",
						tc.ranks, tc.towers, k, i, got, want)
				}
				for r := range tc.ranks {
					for m := range tc.towers {
						if math.Float32bits(out[r][m][i]) != math.Float32bits(got) {
							t.Fatalf("%d ranks × %d towers, round %d: rank %d tower %d element %d = %v, rank 0 tower 0 %v",
								tc.ranks, tc.towers, k, r, m, i, out[r][m][i], got)
						}
					}
				}
			}
		}
	}
}

func TestCollectiveArguments(t *testing.T) {
	job := newFakeJob(1)
	if _, err := newCollective(job.ranks[0], 0); !errors.Is(err, ErrArgument) {
		t.Errorf("0 towers: got %v, want ErrArgument", err)
	}
	if _, err := NewCollective(nil, 2); !errors.Is(err, ErrArgument) {
		t.Errorf("nil World: got %v, want ErrArgument", err)
	}
	c, err := newCollective(job.ranks[0], 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Members() != 2 || c.Weight() != 1 {
		t.Errorf("Members %d Weight %v, want 2 and 1", c.Members(), c.Weight())
	}
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := c.SetWeight(w); !errors.Is(err, ErrArgument) {
			t.Errorf("SetWeight(%v): got %v, want ErrArgument", w, err)
		}
	}
	if c.Weight() != 1 {
		t.Errorf("a refused SetWeight changed the weight to %v", c.Weight())
	}
	for _, m := range []int{-1, 2} {
		if err := c.AllReduce(t.Context(), m, make([]float32, 3)); !errors.Is(err, ErrArgument) {
			t.Errorf("member %d: got %v, want ErrArgument", m, err)
		}
	}
}

// A tower that never arrives: the others give up with the context's error.
func TestCollectiveAbandoned(t *testing.T) {
	job := newFakeJob(2)
	c, err := newCollective(job.ranks[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for m := range 2 {
		wg.Go(func() { errs[m] = c.AllReduce(ctx, m, make([]float32, 4)) })
	}
	wg.Wait()
	for m, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("tower %d: got %v, want a deadline error", m, err)
		}
	}
}

// slowCross is a cross-process step that takes its time (ignoring the context) and then
// doubles the buffer.
type slowCross struct{ d time.Duration }

func (s slowCross) AllReduceWeighted(_ context.Context, buf []float32, _ float64) error {
	time.Sleep(s.d)
	for i := range buf {
		buf[i] *= 2
	}
	return nil
}

// Towers whose context ends while the last tower is in the cross-process step still return
// only once it is over, with its result in their buffers: nothing writes into a buffer after
// its AllReduce returned.
func TestCollectiveSlowCross(t *testing.T) {
	c, err := newCollective(slowCross{100 * time.Millisecond}, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	bufs := [][]float32{{1, 3}, {3, 5}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for m := range 2 {
		wg.Go(func() { errs[m] = c.AllReduce(ctx, m, bufs[m]) })
	}
	wg.Wait()
	for m := range 2 {
		if errs[m] != nil {
			t.Errorf("tower %d: %v", m, errs[m])
		}
		if want := []float32{4, 8}; !slices.Equal(bufs[m], want) {
			t.Errorf("tower %d: got %v, want %v", m, bufs[m], want)
		}
	}
	if rounds, cross := c.Timing(); rounds != 1 || cross < 100*time.Millisecond || cross > 5*time.Second {
		t.Errorf("Timing = %d rounds, %v; want 1 round of at least the step's 100 ms", rounds, cross)
	}
}

// Every tower of every rank gets ErrArgument when the ranks' weights sum to 0, and the next
// round, with weights, works.
func TestCollectiveRefusedWeights(t *testing.T) {
	job := newFakeJob(2)
	cols := make([]*Collective, 2)
	for r := range cols {
		cols[r], _ = newCollective(job.ranks[r], 2)
	}
	round := func() []error {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got []error
		for r := range 2 {
			for m := range 2 {
				wg.Go(func() {
					err := cols[r].AllReduce(t.Context(), m, []float32{1, 2})
					mu.Lock()
					got = append(got, err)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		return got
	}
	for r := range cols {
		if err := cols[r].SetWeight(0); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range round() {
		if !errors.Is(err, ErrArgument) {
			t.Errorf("got %v, want ErrArgument (weights sum to 0)", err)
		}
	}
	for r := range cols {
		if err := cols[r].SetWeight(3); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range round() {
		if err != nil {
			t.Errorf("the round after a refused one: %v", err)
		}
	}
}

// stalled is a cross-process step that always stalls.
type stalled struct{}

func (stalled) AllReduceWeighted(context.Context, []float32, float64) error {
	return &StallError{Op: "allreduce-weighted", Seq: 1, Size: 2, Cause: context.DeadlineExceeded, Missing: []int{1}}
}

// A stalled cross-process step fails every tower of the round and breaks the Collective.
func TestCollectiveStalled(t *testing.T) {
	c, err := newCollective(stalled{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for m := range 3 {
		wg.Go(func() { errs[m] = c.AllReduce(t.Context(), m, make([]float32, 8)) })
	}
	wg.Wait()
	for m, err := range errs {
		if !errors.Is(err, ErrStalled) {
			t.Errorf("tower %d: got %v, want ErrStalled", m, err)
		}
	}
	if err := c.AllReduce(t.Context(), 0, make([]float32, 8)); !errors.Is(err, ErrBroken) || !errors.Is(err, ErrStalled) {
		t.Errorf("after a stall: got %v, want ErrBroken wrapping the stall", err)
	}
}

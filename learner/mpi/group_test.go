package mpi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// runRanks runs f on each of n in-process ranks concurrently and returns their errors.
func runRanks(n int, f func(g Group) error) []error {
	gs := InProcess(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = f(g) })
	}
	wg.Wait()
	return errs
}

// TestInProcess checks the stand-in ranks' collectives against hand-computed results.
func TestInProcess(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	got := map[int][]float32{}
	errs := runRanks(3, func(g Group) error {
		r := g.Rank()
		// Weighted mean of [r, 10r] with weights 1, 2, 3: (0·1 + 1·2 + 2·3)/6 = 4/3.
		buf := []float32{float32(r), float32(10 * r)}
		if err := g.AllReduceWeighted(ctx, buf, float64(r+1)); err != nil {
			return err
		}
		mu.Lock()
		got[r] = buf
		mu.Unlock()
		s := []float64{float64(r), 1}
		if err := g.AllReduceFloat64(ctx, Sum, s); err != nil {
			return err
		}
		if s[0] != 3 || s[1] != 3 {
			return errors.New("sum wrong")
		}
		m := []float64{float64(r)}
		if err := g.AllReduceFloat64(ctx, Max, m); err != nil || m[0] != 2 {
			return errors.New("max wrong")
		}
		b := []byte{byte(r), byte(r)}
		if err := g.Bcast(ctx, 1, b); err != nil || b[0] != 1 || b[1] != 1 {
			return errors.New("bcast wrong")
		}
		all, err := g.Gather(ctx, 0, []byte(strings.Repeat("x", r)))
		if err != nil {
			return err
		}
		if r == 0 && (len(all) != 3 || len(all[2]) != 2) || r != 0 && all != nil {
			return errors.New("gather wrong")
		}
		return g.CheckSame(ctx, [32]byte{7})
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range 3 {
		if d, e := got[r][0]-4.0/3, got[r][1]-40.0/3; max(d, -d, e, -e) > 1e-5 {
			t.Errorf("rank %d: weighted mean %v, want [4/3, 40/3]", r, got[r])
		}
	}
}

// TestInProcessFailures: differing hashes, calls out of step and a rank that never arrives
// each give every rank a clear error.
func TestInProcessFailures(t *testing.T) {
	errs := runRanks(2, func(g Group) error {
		return g.CheckSame(context.Background(), [32]byte{byte(g.Rank())})
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("rank %d: differing hashes gave %v, want ErrMismatch", r, err)
		}
	}
	errs = runRanks(2, func(g Group) error {
		if g.Rank() == 0 {
			return g.Bcast(context.Background(), 0, []byte{1})
		}
		return g.AllReduceFloat64(context.Background(), Sum, []float64{1})
	})
	for r, err := range errs {
		if !errors.Is(err, ErrOutOfStep) {
			t.Errorf("rank %d: calls out of step gave %v, want ErrOutOfStep", r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	g := InProcess(3)
	err := g[1].AllReduceFloat64(ctx, Sum, []float64{1})
	if !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "ranks 0, 2 never arrived") {
		t.Errorf("a lone rank's call: %v, want ErrStalled naming ranks 0 and 2", err)
	}
}

// TestInProcessFinishRollout: the last rank sees the others finish while it collects
// (RolloutsFinished, which counts only a FinishRollout that is its own next call), then
// every rank gets every rank's steps; a rank that never finishes is named.
func TestInProcessFinishRollout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 3
	seen := make([]int, n)
	errs := runRanks(n, func(g Group) error {
		r := g.Rank()
		if r == n-1 {
			// The others are in another call first: it is not a finished rollout.
			if k, err := g.RolloutsFinished(); err != nil || k != 0 {
				return fmt.Errorf("before any call: RolloutsFinished = %d, %v; want 0", k, err)
			}
		}
		if err := g.AllReduceFloat64(ctx, Sum, []float64{1}); err != nil {
			return err
		}
		for round := range 2 {
			if r == n-1 {
				for {
					k, err := g.RolloutsFinished()
					if err != nil {
						return err
					}
					if k == n-1 {
						seen[r] = k
						break
					}
					if ctx.Err() != nil {
						return fmt.Errorf("round %d: only %d ranks seen finished", round, k)
					}
					time.Sleep(time.Millisecond)
				}
			}
			all, err := g.FinishRollout(ctx, int64(10*round+r))
			if err != nil {
				return err
			}
			if want := []int64{int64(10 * round), int64(10*round + 1), int64(10*round + 2)}; !slices.Equal(all, want) {
				return fmt.Errorf("round %d: FinishRollout = %v, want %v", round, all, want)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if seen[n-1] != n-1 {
		t.Fatalf("the last rank saw %d finished ranks", seen[n-1])
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	g := InProcess(2)
	if _, err := g[0].FinishRollout(short, 5); !errors.Is(err, ErrStalled) || !strings.Contains(err.Error(), "rank 1 never arrived") {
		t.Errorf("a rank that never finishes: %v, want ErrStalled naming rank 1", err)
	}
}

// TestCollectiveZeroWeightSum: a rank of weight 0 (no rows in the round) adds nothing to
// AllReduceSum's statistics, and gets the others' sum.
func TestCollectiveZeroWeightSum(t *testing.T) {
	errs := runRanks(3, func(g Group) error {
		c, err := NewCollective(g, 1)
		if err != nil {
			return err
		}
		w := float64(g.Rank())
		if err := c.SetWeight(w); err != nil {
			return err
		}
		buf := []float64{float64(10 + g.Rank()), 1}
		if err := c.AllReduceSum(context.Background(), buf); err != nil {
			return err
		}
		if want := []float64{11 + 12, 2}; !slices.Equal(buf, want) {
			return fmt.Errorf("sum %v, want %v (rank 0's weight is 0)", buf, want)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

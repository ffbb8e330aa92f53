package learner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// meanRef is the mean AllReduce promises, bit for bit: for two members (a+b)·0.5, else the sum
// in member order times 1/n.
func meanRef(bufs [][]float32) []float32 {
	out := make([]float32, len(bufs[0]))
	for j := range out {
		if len(bufs) == 2 {
			out[j] = (bufs[0][j] + bufs[1][j]) * 0.5
			continue
		}
		s := bufs[0][j]
		for _, b := range bufs[1:] {
			s += b[j]
		}
		out[j] = s * (1 / float32(len(bufs)))
	}
	return out
}

// squaresRef is the square sum of x in float64, value j into partial sum j mod 4, the four
// added as (s0+s1)+(s2+s3): the order the global norm promises for one block.
func squaresRef(x []float32) float64 {
	var s [4]float64
	for j, v := range x {
		s[j%4] += float64(float64(v) * float64(v)) // no fused multiply-add, as the code under test
	}
	return (s[0] + s[1]) + (s[2] + s[3])
}

func randomBufs(rng *rand.Rand, n, length int) [][]float32 {
	bufs := make([][]float32, n)
	for i := range bufs {
		bufs[i] = make([]float32, length)
		for j := range bufs[i] {
			bufs[i][j] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*4))
		}
	}
	return bufs
}

// TestLocalShards: AllReduce writes the mean into every member's buffer, and meanShard into
// each member's own shard with the square sums of its blocks, both with the reference bits,
// round after round, for groups of 1 to 4 and buffers of one to several norm blocks (and of
// shards of several of meanShard's chunks, the last block short).
func TestLocalShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{1, 2, 3, 4} {
		for _, length := range []int{5, normBlock, 4*normBlock + 3, 5*meanChunk + 3} {
			l := NewLocal(n)
			for round := range 6 {
				scatter := round%2 == 1
				bufs := randomBufs(rng, n, length)
				orig := make([][]float32, n)
				for i := range bufs {
					orig[i] = append([]float32(nil), bufs[i]...)
				}
				want := meanRef(orig)
				sums := make([]float64, (length+normBlock-1)/normBlock)
				var wg sync.WaitGroup
				errs := make([]error, n)
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if scatter {
							lo, hi := span(length, n, i)
							errs[i] = l.meanShard(context.Background(), i, bufs[i], lo, hi, sums)
						} else {
							errs[i] = l.AllReduce(context.Background(), i, bufs[i])
						}
					}()
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					lo, hi := 0, length
					if scatter {
						lo, hi = span(length, n, i)
					}
					for j := range length {
						got, exp := bufs[i][j], want[j]
						if j < lo || j >= hi {
							exp = orig[i][j] // outside its shard meanShard leaves the buffer alone
						}
						if math.Float32bits(got) != math.Float32bits(exp) {
							t.Fatalf("n=%d length %d round %d (scatter %v): member %d value %d = %v, want %v", n, length, round, scatter, i, j, got, exp)
						}
					}
				}
				if scatter {
					for k := range sums {
						block := want[k*normBlock : min((k+1)*normBlock, length)]
						if got, exp := sums[k], squaresRef(block); got != exp {
							t.Fatalf("n=%d length %d round %d: block %d square sum %v, want %v", n, length, round, k, got, exp)
						}
					}
				}
			}
		}
	}
}

// TestLocalErrors: a member out of range; buffers of different lengths (every member gets the
// error, the next round works); a second call in one round; a member whose context ends
// before the others arrive returns the context's error, and the round completes without it,
// its buffer averaged with the others as the documentation says.
func TestLocalErrors(t *testing.T) {
	l := NewLocal(2)
	if err := l.AllReduce(context.Background(), 2, []float32{1}); !errors.Is(err, ErrConfig) {
		t.Errorf("member 2 of 2: %v, want ErrConfig", err)
	}
	run := func(bufs [][]float32) []error {
		errs := make([]error, len(bufs))
		var wg sync.WaitGroup
		for i := range bufs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = l.AllReduce(context.Background(), i, bufs[i])
			}()
		}
		wg.Wait()
		return errs
	}
	for i, err := range run([][]float32{{1, 2}, {3}}) {
		if !errors.Is(err, ErrConfig) {
			t.Errorf("lengths 2 and 1: member %d got %v, want ErrConfig", i, err)
		}
	}
	bufs := [][]float32{{1, 2}, {3, 6}}
	if err := errors.Join(run(bufs)...); err != nil || bufs[0][1] != 4 || bufs[1][0] != 2 {
		t.Fatalf("the round after an error: %v, buffers %v", err, bufs)
	}

	// Member 0 arrives with a context that ends; a second call from it in the same round is
	// refused; member 1 then completes the round.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
	defer cancel()
	a, b := []float32{2, 4}, []float32{6, 8}
	if err := l.AllReduce(ctx, 0, a); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("member 0 alone with a context that ends: %v", err)
	}
	if err := l.AllReduce(context.Background(), 0, a); !errors.Is(err, ErrConfig) {
		t.Errorf("member 0 twice in one round: %v, want ErrConfig", err)
	}
	if err := l.AllReduce(context.Background(), 1, b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a, b) != "[4 6] [4 6]" {
		t.Errorf("after member 0 left: %v %v, want the mean in both", a, b)
	}
	if errs := run([][]float32{{1}, {3}}); errors.Join(errs...) != nil {
		t.Fatalf("the round after: %v", errs)
	}
}

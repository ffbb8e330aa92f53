package learner

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// pairSums is a SumReducer of two processes played by two goroutines: each AllReduceSum
// waits for the other's and both get the sum, added in rank order.
type pairSums struct {
	mu   sync.Mutex
	cond *sync.Cond
	gen  int // rounds completed
	bufs [2][]float64
	out  []float64
}

func newPairSums() *pairSums {
	p := &pairSums{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

type pairMember struct {
	p    *pairSums
	rank int
}

func (m pairMember) AllReduceSum(_ context.Context, buf []float64) error {
	p := m.p
	p.mu.Lock()
	defer p.mu.Unlock()
	gen := p.gen
	p.bufs[m.rank] = append([]float64(nil), buf...)
	if p.bufs[1-m.rank] != nil {
		p.out = make([]float64, len(buf))
		for _, b := range p.bufs {
			for i, v := range b {
				p.out[i] += v
			}
		}
		p.bufs = [2][]float64{}
		p.gen++
		p.cond.Broadcast()
	}
	for p.gen == gen {
		p.cond.Wait()
	}
	copy(buf, p.out) // the next round cannot complete before this rank joins it
	return nil
}

// TestNormalizeAcross: two processes standardising their shares of the rows with
// scaleAcross get what one process standardising all of them gets (Standardize: mean and
// Bessel-corrected std, hand-checked on a small case first).
func TestNormalizeAcross(t *testing.T) {
	small := []float32{1, 2, 3, 4}
	Standardize(small)
	// mean 2.5, std sqrt(5/3) = 1.2910
	for i, want := range []float64{-1.5 / 1.2909944, -0.5 / 1.2909944, 0.5 / 1.2909944, 1.5 / 1.2909944} {
		if math.Abs(float64(small[i])-want) > 1e-6 {
			t.Fatalf("Standardize: row %d = %v, want %v", i, small[i], want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		split     int
		mean, std float64
	}{{0, 1, 3}, {1, 1, 3}, {37, 1, 3}, {64, 1, 3}, {100, 1, 3}, {37, 100, 1}, {64, -5e3, 40}, {64, 0, 1e-3}} {
		split := c.split
		x := make([]float32, 128)
		for i := range x {
			x[i] = float32(rng.NormFloat64()*c.std + c.mean)
		}
		want := append([]float32(nil), x...)
		Standardize(want)
		p := newPairSums()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r, part := range [][]float32{x[:split], x[split:]} {
			wg.Go(func() {
				var sc advScale
				sc, errs[r] = scaleAcross(context.Background(), pairMember{p, r}, part)
				sc.apply(part, nil, nil, part)
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("split %d: rank %d: %v", split, r, err)
			}
		}
		for i := range x {
			if math.Abs(float64(x[i]-want[i])) > 1e-6 {
				t.Fatalf("split %d, mean %v, std %v: row %d = %v across two processes, %v in one", split, c.mean, c.std, i, x[i], want[i])
			}
		}
	}
}

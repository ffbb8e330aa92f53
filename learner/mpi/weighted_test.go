package mpi

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// simulate runs the weighted all-reduce's arithmetic for len(bufs) ranks in one process:
// each rank packs, the packed vectors are summed in rank order (what MPI_SUM does, in some
// order), each rank unpacks into a copy of its buffer.
func simulate(bufs [][]float32, weights []float64, seqs []uint64) ([][]float32, []error) {
	n := len(bufs[0])
	sum := make([]float64, n+tail)
	for r, b := range bufs {
		v := make([]float64, n+tail)
		packWeighted(v, b, weights[r], seqs[r])
		for i, x := range v {
			sum[i] += x
		}
	}
	out := make([][]float32, len(bufs))
	errs := make([]error, len(bufs))
	for r, b := range bufs {
		out[r] = make([]float32, len(b))
		copy(out[r], b)
		if !validWeight(weights[r]) {
			errs[r] = weightError(weights[r], seqs[r])
			continue
		}
		errs[r] = unpackWeighted(out[r], sum, len(bufs), seqs[r])
	}
	return out, errs
}

func sameSeq(n int, s uint64) []uint64 {
	seqs := make([]uint64, n)
	for i := range seqs {
		seqs[i] = s
	}
	return seqs
}

func TestWeightedMeanHandWorked(t *testing.T) {
	tests := []struct {
		name    string
		bufs    [][]float32
		weights []float64
		want    []float32
	}{
		// (3·1 + 1·5)/4 = 2, (3·2 + 1·(-2))/4 = 1.
		{"two ranks 3:1", [][]float32{{1, 2}, {5, -2}}, []float64{3, 1}, []float32{2, 1}},
		// Equal weights: the plain mean.
		{"equal weights", [][]float32{{1, 10}, {2, 20}, {6, 60}}, []float64{7, 7, 7}, []float32{3, 30}},
		// A rank with weight 0 contributes nothing.
		{"zero weight", [][]float32{{4}, {1000}}, []float64{2, 0}, []float32{4}},
		// Preemption: 100, 25 and 75 rows: (100·0.5 + 25·(-1) + 75·1)/200 = 0.5.
		{"unequal counts", [][]float32{{0.5}, {-1}, {1}}, []float64{100, 25, 75}, []float32{0.5}},
		{"one rank", [][]float32{{0.1, -7}}, []float64{0.3}, []float32{0.1, -7}},
		{"empty buffers", [][]float32{{}, {}}, []float64{1, 2}, []float32{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errs := simulate(tc.bufs, tc.weights, sameSeq(len(tc.bufs), 7))
			for r := range out {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if diff := cmp.Diff(tc.want, out[r]); diff != "" {
					t.Errorf("rank %d (-want +got):\n%s", r, diff)
				}
			}
		})
	}
}

// TestWeightedMeanReference checks random buffers against Σw·x/Σw computed directly in float64:
// within the rounding of one float64 sum order against another, i.e. at most one float32 ulp.
func TestWeightedMeanReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ranks := range []int{1, 2, 3, 8} {
		const n = 1000
		bufs := make([][]float32, ranks)
		weights := make([]float64, ranks)
		for r := range bufs {
			bufs[r] = make([]float32, n)
			for i := range bufs[r] {
				bufs[r][i] = float32(rng.NormFloat64() * math.Exp(4*rng.NormFloat64()))
			}
			weights[r] = float64(1 + rng.IntN(4096))
		}
		out, errs := simulate(bufs, weights, sameSeq(ranks, 1<<33+5))
		var total float64
		for _, w := range weights {
			total += w
		}
		for i := range n {
			var s float64
			for r := ranks - 1; r >= 0; r-- { // the other order
				s += weights[r] * float64(bufs[r][i])
			}
			want := float32(s / total)
			for r := range out {
				if errs[r] != nil {
					t.Fatalf("%d ranks: rank %d: %v", ranks, r, errs[r])
				}
				if got := out[r][i]; ulps(got, want) > 1 {
					t.Fatalf("%d ranks: element %d on rank %d: got %v, want %v", ranks, i, r, got, want)
				}
				if math.Float32bits(out[r][i]) != math.Float32bits(out[0][i]) {
					t.Fatalf("%d ranks: element %d differs between rank 0 and rank %d", ranks, i, r)
				}
			}
		}
	}
}

func ulps(a, b float32) int64 {
	d := int64(int32(math.Float32bits(a))) - int64(int32(math.Float32bits(b)))
	return max(d, -d)
}

func TestWeightedMeanErrors(t *testing.T) {
	tests := []struct {
		name    string
		weights []float64
		seqs    []uint64
		want    []error // per rank
	}{
		{"all zero", []float64{0, 0}, sameSeq(2, 3), []error{ErrArgument, ErrArgument}},
		{"negative", []float64{1, -1, 2}, sameSeq(3, 3), []error{ErrArgument, ErrArgument, ErrArgument}},
		{"NaN", []float64{math.NaN(), 1}, sameSeq(2, 3), []error{ErrArgument, ErrArgument}},
		{"+Inf", []float64{1, math.Inf(1)}, sameSeq(2, 3), []error{ErrArgument, ErrArgument}},
		{"overflowing sum", []float64{math.MaxFloat64, math.MaxFloat64}, sameSeq(2, 3), []error{ErrArgument, ErrArgument}},
		// 9 + 11 = 2·10: the sum alone would not see it; the sum of squares does.
		{"out of step, same sum", []float64{1, 1, 1}, []uint64{9, 10, 11}, []error{ErrOutOfStep, ErrOutOfStep, ErrOutOfStep}},
		{"out of step", []float64{1, 1}, []uint64{4, 5}, []error{ErrOutOfStep, ErrOutOfStep}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bufs := make([][]float32, len(tc.weights))
			for r := range bufs {
				bufs[r] = []float32{float32(r) + 1, -2}
			}
			out, errs := simulate(bufs, tc.weights, tc.seqs)
			for r, want := range tc.want {
				if !errors.Is(errs[r], want) {
					t.Errorf("rank %d: got %v, want %v", r, errs[r], want)
				}
				if diff := cmp.Diff(bufs[r], out[r]); diff != "" {
					t.Errorf("rank %d: buffer written on error (-before +after):\n%s", r, diff)
				}
			}
		})
	}
}

// The rank whose own weight is invalid names it; the others say how many ranks were at fault.
func TestWeightedMeanErrorText(t *testing.T) {
	_, errs := simulate([][]float32{{1}, {2}}, []float64{1, -3}, sameSeq(2, 12))
	if got, want := errs[1].Error(), "mpi: invalid argument: weight -3 for allreduce-weighted #12: a rank's "+
		"weight is its sample count, finite and not negative"; got != want {
		t.Errorf("rank 1:\n got %s\nwant %s", got, want)
	}
	if got, want := errs[0].Error(), "mpi: invalid argument: 1 rank(s) passed a negative or non-finite "+
		"weight to allreduce-weighted #12 (see their errors)"; got != want {
		t.Errorf("rank 0:\n got %s\nwant %s", got, want)
	}
}

func TestPackWeightedAllocs(t *testing.T) {
	buf := make([]float32, 10000)
	sc := make([]float64, len(buf)+tail)
	if a := testing.AllocsPerRun(10, func() {
		packWeighted(sc, buf, 3, 9)
		_ = unpackWeighted(buf, sc, 1, 9)
	}); a != 0 {
		t.Errorf("pack+unpack allocated %v times", a)
	}
}

// BenchmarkPackUnpack is the arithmetic the weighted all-reduce adds on each rank around MPI.
func BenchmarkPackUnpack(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			buf := make([]float32, n)
			sc := make([]float64, n+tail)
			for b.Loop() {
				packWeighted(sc, buf, 3, 1)
				if err := unpackWeighted(buf, sc, 1, 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gfloat/s")
		})
	}
}

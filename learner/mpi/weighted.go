package mpi

import (
	"fmt"
	"math"
)

// The weighted all-reduce sends, per rank r, the float64 vector
//
//	w_r·buf_r[0], …, w_r·buf_r[n-1], w_r, s_r, s_r², bad_r
//
// and sums it over the ranks in one MPI_Allreduce. Every rank then divides by Σw_r the same
// sums the same way, so every rank gets the same bits as long as MPI hands every rank the same
// sums (Open MPI's algorithms do: each reduced chunk is computed once and distributed). The
// tail checks the call itself: s_r is the rank's call sequence number modulo 2^20, and Σs = N·s
// with Σs² = N·s² holds only when every rank's s is the same (their variance is zero); bad_r
// counts ranks whose own weight was invalid, so every rank returns an error together instead
// of the others stalling.
const tail = 4

// seqMod keeps s² and N·s² exact in float64 for up to 2^12 ranks.
const seqMod = 1 << 20

// packWeighted writes rank's contribution into dst (len(buf)+tail values). An invalid weight
// contributes zeros and marks the rank bad.
func packWeighted(dst []float64, buf []float32, weight float64, seq uint64) {
	dst = dst[:len(buf)+tail]
	bad := !validWeight(weight)
	w := weight
	if bad {
		w = 0
	}
	d := dst[:len(buf)]
	for i, x := range buf {
		d[i] = w * float64(x)
	}
	s := float64(seq % seqMod)
	t := dst[len(buf):]
	t[0], t[1], t[2], t[3] = w, s, s*s, 0
	if bad {
		t[3] = 1
	}
}

// unpackWeighted checks the summed tail and writes the weighted mean into buf. It writes
// nothing when it returns an error.
func unpackWeighted(buf []float32, sum []float64, size int, seq uint64) error {
	sum = sum[:len(buf)+tail]
	t := sum[len(buf):]
	s := float64(seq % seqMod)
	n := float64(size)
	if t[1] != n*s || t[2] != n*s*s {
		return fmt.Errorf("%w: allreduce-weighted #%d met calls with other sequence numbers "+
			"(a rank skipped or added a collective call)", ErrOutOfStep, seq)
	}
	if t[3] != 0 {
		return fmt.Errorf("%w: %v rank(s) passed a negative or non-finite weight to allreduce-weighted #%d "+
			"(see their errors)", ErrArgument, t[3], seq)
	}
	if !(t[0] > 0) || math.IsInf(t[0], 0) {
		return fmt.Errorf("%w: the ranks' weights of allreduce-weighted #%d sum to %v; at least one "+
			"rank needs a positive weight (its sample count)", ErrArgument, seq, t[0])
	}
	inv := 1 / t[0]
	sums := sum[:len(buf)]
	for i := range buf {
		buf[i] = float32(sums[i] * inv)
	}
	return nil
}

func validWeight(w float64) bool { return w >= 0 && !math.IsInf(w, 0) }

// weightError is the error of the rank whose own weight is invalid.
func weightError(w float64, seq uint64) error {
	return fmt.Errorf("%w: weight %v for allreduce-weighted #%d: a rank's weight is its sample "+
		"count, finite and not negative", ErrArgument, w, seq)
}

package kernels

import "fmt"

// Gather copies row perm[i] of src (d values a row) to row i of dst, the learner's gather of a
// shuffled minibatch's rows: the same values as the plain loop, with the source rows fetched
// ahead (gather.c), which pays where the source is larger than the cache. It panics, as an
// index out of range would, when a perm entry is not a row of src or dst is short (the rows
// before a bad entry are copied).
func Gather(dst, src []float32, perm []int, d int) {
	if d < 0 || len(dst) < len(perm)*d {
		panic(fmt.Sprintf("kernels: Gather of %d rows of %d values into %d", len(perm), d, len(dst)))
	}
	bad, ok := gather(dst, src, perm, d)
	if !ok {
		bad = gatherLoop(dst, src, perm, d)
	}
	if bad >= 0 {
		panic(fmt.Sprintf("kernels: Gather: entry %d names row %d of a source of %d rows", bad, perm[bad], len(src)/max(d, 1)))
	}
}

// gatherLoop is Gather in Go; it returns the first i whose perm[i] is out of range, or -1.
func gatherLoop(dst, src []float32, perm []int, d int) int {
	if d == 0 {
		return -1
	}
	rows := len(src) / d
	for i, p := range perm {
		if uint(p) >= uint(rows) {
			return i
		}
		to, from := dst[i*d:(i+1)*d], src[p*d:(p+1)*d]
		if d > 8 {
			copy(to, from)
			continue
		}
		// Short rows (CartPole's 4 observations, a column of one): a loop beats a copy call.
		for k := range to {
			to[k] = from[k]
		}
	}
	return -1
}

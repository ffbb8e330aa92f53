//go:build amd64 && cgo && !purego

// The learner's row gathers (learner.SampleBatch's columns in a shuffled order).

// PF is how many rows ahead twk_gather prefetches: issue 32's run gathers 4,096 rows at random
// from a batch of 65,536 that the cache no longer holds, and with its rows 64 ahead in flight
// the gathers took 56–62 ms of a tower's run against 81–90 for Go's loop (prefetching 16 rows
// ahead 67–75, 128 or 256 no better than 64; the C loop without prefetching 74–79).
#define PF 64

// twk_gather copies row perm[i] of src (d floats a row, rows of them) to row i of dst for
// i < n, fetching the source rows PF ahead into L2. It returns -1, or the first i whose
// perm[i] is not a row of src (rows before it are copied, as Go's loop would have).
long twk_gather(long n, const long *perm, long d, const float *src, long rows, float *dst) {
	for (long i = 0; i < n; i++) {
		if (i + PF < n && (unsigned long)perm[i + PF] < (unsigned long)rows)
			__builtin_prefetch(src + perm[i + PF] * d, 0, 2);
		long p = perm[i];
		if ((unsigned long)p >= (unsigned long)rows)
			return i;
		const float *s = src + p * d;
		float *t = dst + i * d;
		for (long k = 0; k < d; k++)
			t[k] = s[k];
	}
	return -1;
}

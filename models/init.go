package models

import (
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// orthogonal fills dst with a (semi-)orthogonal rows×cols matrix scaled by gain, as
// torch.nn.init.orthogonal_ does for a weight of shape [rows, cols]: the QR factorisation of a
// standard Gaussian matrix (transposed first when rows < cols), with Q's columns sign-corrected
// by the signs of R's diagonal, so the result is uniformly distributed. Rows are orthonormal
// when rows ≤ cols, columns when rows ≥ cols.
//
// With transposed false dst is laid out row-major as [rows, cols]; with transposed true as
// [cols, rows] (the [in, out] layout of linear weights, whose torch shape is [out, in]).
func orthogonal(dst []float32, rows, cols int, gain float64, rng *rand.Rand, transposed bool) {
	m, n := rows, cols
	if rows < cols {
		m, n = cols, rows
	}
	// a is m×n with m ≥ n: Householder QR (LAPACK dgeqrf), then the thin Q = Q·I[m×n]
	// (dormqr), never the full m×m Q.
	a := blas64.General{Rows: m, Cols: n, Stride: n, Data: make([]float64, m*n)}
	for i := range a.Data {
		a.Data[i] = rng.NormFloat64()
	}
	tau := make([]float64, n)
	work := make([]float64, 1)
	lapack64.Geqrf(a, tau, work, -1)
	work = make([]float64, max(int(work[0]), m))
	lapack64.Geqrf(a, tau, work, len(work))
	q := blas64.General{Rows: m, Cols: n, Stride: n, Data: make([]float64, m*n)}
	for j := range n {
		q.Data[j*n+j] = 1
	}
	lapack64.Ormqr(blas.Left, blas.NoTrans, a, tau, q, work, -1)
	work = make([]float64, max(int(work[0]), n))
	lapack64.Ormqr(blas.Left, blas.NoTrans, a, tau, q, work, len(work))
	// Column j of Q times sign(R_jj) times gain.
	scale := make([]float64, n)
	for j := range n {
		scale[j] = gain
		if a.Data[j*n+j] < 0 {
			scale[j] = -gain
		}
	}
	for i := range rows {
		for j := range cols {
			// Element (i, j) of the rows×cols result: Q[i][j] when rows ≥ cols, else Q[j][i].
			var v float64
			if rows >= cols {
				v = q.Data[i*n+j] * scale[j]
			} else {
				v = q.Data[j*n+i] * scale[i]
			}
			if transposed {
				dst[j*rows+i] = float32(v)
			} else {
				dst[i*cols+j] = float32(v)
			}
		}
	}
}

package models

import (
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
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
	// a is m×n with m ≥ n.
	a := mat.NewDense(m, n, nil)
	for i := range m {
		for j := range n {
			a.Set(i, j, rng.NormFloat64())
		}
	}
	var qr mat.QR
	qr.Factorize(a)
	var q, r mat.Dense
	qr.QTo(&q) // m×m
	qr.RTo(&r) // m×n
	// q[:, :n] · diag(sign(r_jj)) · gain is m×n with orthonormal columns (times gain).
	val := func(i, j int) float64 {
		s := 1.0
		if r.At(j, j) < 0 {
			s = -1
		}
		return q.At(i, j) * s * gain
	}
	// Element (row, col) of the rows×cols result: q[row][col] when rows ≥ cols, else the
	// transpose q[col][row].
	at := func(row, col int) float64 {
		if rows >= cols {
			return val(row, col)
		}
		return val(col, row)
	}
	for i := range rows {
		for j := range cols {
			v := float32(at(i, j))
			if transposed {
				dst[j*rows+i] = v
			} else {
				dst[i*cols+j] = v
			}
		}
	}
}

package kernels

import "math"

// The Go twins of the C kernels: the only implementation in a purego, non-cgo or non-amd64
// build (purego.go), and one more level beside the C copies in a native build (native.go), so
// the tests check them on every machine. Gemm, ActGrad, ColSum and Adam have checked the
// shapes before these run; they allocate nothing.

// levelGo is the level of the Go loops in every build.
const levelGo = -1

// tanhHi bounds tanh's argument: beyond it the approximation below is exactly ±1 in float32.
const tanhHi = 7.90531110763549805

// tanhGo is tanh to about one ulp: the rational approximation of Eigen's ptanh_float, with the
// coefficients and order of operations of kernels.c's TANH_RATIONAL. NaN stays NaN.
func tanhGo(x float32) float32 {
	if x > tanhHi {
		x = tanhHi
	}
	if x < -tanhHi {
		x = -tanhHi
	}
	x2 := x * x
	p := x2*-2.76076847742355e-16 + 2.00018790482477e-13
	p = x2*p + -8.60467152213735e-11
	p = x2*p + 5.12229709037114e-08
	p = x2*p + 1.48572235717979e-05
	p = x2*p + 6.37261928875436e-04
	p = x2*p + 4.89352455891786e-03
	p = x * p
	q := x2*1.19825839466702e-06 + 1.18534705686654e-04
	q = x2*q + 2.26843463243900e-03
	q = x2*q + 4.89352518554385e-03
	return p / q
}

// actGo applies act to one value.
func actGo(x float32, act Act) float32 {
	switch act {
	case Tanh:
		return tanhGo(x)
	case ReLU:
		if x > 0 {
			return x
		}
		return 0
	}
	return x
}

// gemmGo is Gemm row by row: with B untransposed each row of C accumulates rows of B scaled by
// op(A)'s entries (contiguous inner loops); with B transposed each entry is a dot product of a
// row of op(A) with a row of B. With y (GemmActGrad), each row is then multiplied by act' at
// Y's row, as actGradGo does.
func gemmGo(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, acc bool, bias []float32, act Act, y []float32, ldy int) {
	dact := None
	if y != nil {
		act, dact = None, act
	}
	// A[i][p] = a[i·rsa + p·csa].
	rsa, csa := lda, 1
	if transA {
		rsa, csa = 1, lda
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch {
		case !transB || k == 0:
			if !acc {
				clear(row)
			}
			for p := range k {
				axpy(a[i*rsa+p*csa], b[p*ldb:p*ldb+n], row)
			}
		case csa == 1:
			ai := a[i*rsa : i*rsa+k]
			for j := range row {
				s := dot(ai, b[j*ldb:j*ldb+k])
				if acc {
					s += row[j]
				}
				row[j] = s
			}
		default:
			for j := range row {
				s := dotStrided(a[i*rsa:], csa, b[j*ldb:j*ldb+k])
				if acc {
					s += row[j]
				}
				row[j] = s
			}
		}
		if bias != nil || act != None {
			for j, s := range row {
				if bias != nil {
					s += bias[j]
				}
				row[j] = actGo(s, act)
			}
		}
		if y != nil {
			actGradGo(dact, y[i*ldy:i*ldy+n], row, row)
		}
	}
}

// axpy is y += alpha·x over len(y) values.
func axpy(alpha float32, x, y []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += alpha * x[i]
	}
}

// dot is Σ x[p]·y[p] over len(y) values, in four partial sums.
func dot(x, y []float32) float32 {
	x = x[:len(y)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(y); i += 4 {
		s0 += x[i] * y[i]
		s1 += x[i+1] * y[i+1]
		s2 += x[i+2] * y[i+2]
		s3 += x[i+3] * y[i+3]
	}
	for ; i < len(y); i++ {
		s0 += x[i] * y[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dotStrided is Σ x[p·inc]·y[p] over len(y) values.
func dotStrided(x []float32, inc int, y []float32) float32 {
	var s float32
	for p, v := range y {
		s += x[p*inc] * v
	}
	return s
}

// actGradGo is dz = dy·act'(y) from the activation's output y.
func actGradGo(act Act, y, dy, dz []float32) {
	dy, dz = dy[:len(y)], dz[:len(y)]
	switch act {
	case Tanh:
		for i, v := range y {
			dz[i] = dy[i] * (1 - v*v)
		}
	case ReLU:
		for i, v := range y {
			if v > 0 {
				dz[i] = dy[i]
			} else {
				dz[i] = 0
			}
		}
	default:
		copy(dz, dy)
	}
}

// colSumGo is dst[j] = Σ_i a[i·n + j] (+dst[j] when acc), row by row.
func colSumGo(m, n int, a, dst []float32, acc bool) {
	dst = dst[:n]
	if !acc {
		clear(dst)
	}
	for i := range m {
		row := a[i*n : i*n+n]
		for j, v := range row {
			dst[j] += v
		}
	}
}

// adamGo is Adam's update in float32, each product rounded before it is added (the explicit
// conversions forbid fused multiply-adds on every architecture), in the C copies' order, so it
// gives their bits. float32(math.Sqrt(float64(v))) is the correctly rounded float32 root.
func adamGo(p, g, m, v []float32, b1, b2, c1, c2, step, sbc2, eps float32) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	for i := range p {
		mi := float32(b1*m[i]) + float32(c1*g[i])
		vi := float32(b2*v[i]) + float32(float32(c2*g[i])*g[i])
		m[i], v[i] = mi, vi
		p[i] -= float32(step*mi) / (float32(float32(math.Sqrt(float64(vi)))/sbc2) + eps)
	}
}

// squareSumsGo is SquareSums block by block, each with four partial sums.
func squareSumsGo(g []float32, block int, sums []float64) {
	for b := range sums {
		x := g[b*block : min((b+1)*block, len(g))]
		var s [4]float64
		for j, v := range x {
			s[j&3] += float64(float64(v) * float64(v)) // exact: fused or not, the same bits
		}
		sums[b] = (s[0] + s[1]) + (s[2] + s[3])
	}
}

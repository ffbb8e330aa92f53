package kernels

import "fmt"

// Act is an activation applied elementwise after a product.
type Act int

// The activations. native.go checks that they equal kernels.h's ACT_* values.
const (
	None Act = 0 // identity
	Tanh Act = 1 // hyperbolic tangent
	ReLU Act = 2 // max(x, 0)
)

// Level names the implementation the kernels use: "avx512", "avx2" or "sse2" for the C copy
// chosen for this CPU, "go" for the plain Go loops (a purego, non-cgo or non-amd64 build).
func Level() string { return levelName(level) }

// need panics unless s holds a rows×cols matrix with leading dimension ld.
func need(name string, s []float32, rows, cols, ld int) {
	if rows < 0 || cols < 0 || ld < max(cols, 1) {
		panic(fmt.Sprintf("kernels: %s is %d×%d with leading dimension %d", name, rows, cols, ld))
	}
	if rows > 0 && cols > 0 && len(s) < (rows-1)*ld+cols {
		panic(fmt.Sprintf("kernels: %s holds %d values, a %d×%d matrix with leading dimension %d needs %d",
			name, len(s), rows, cols, ld, (rows-1)*ld+cols))
	}
}

// Gemm computes C = act(op(A)·op(B) + bias), plus the old C inside the activation when acc is
// set, where op(A) is A [m, k] or, with transA, Aᵀ for A [k, m] (likewise B: [k, n], or
// [n, k] with transB). C is [m, n]. bias, when not nil, holds n values added to every row.
func Gemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, acc bool, bias []float32, act Act) {
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("kernels: bias holds %d values for %d columns", len(bias), n))
	}
	product(transA, transB, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, nil, 0)
}

// GemmActGrad is C = op(A)·op(B) ⊙ act'(Y): the product times the derivative of act at the
// activation's output Y ([m, n], leading dimension ldy), 1−y² for Tanh, [y > 0] for ReLU, 1 for
// None. It is a layer's input gradient carried through the previous layer's activation in one
// pass: the values have the bits of Gemm (no bias, no act) followed by ActGrad on its result.
func GemmActGrad(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, y []float32, ldy int, act Act) {
	need("Y", y, m, n, ldy)
	product(transA, transB, m, n, k, a, lda, b, ldb, c, ldc, false, nil, act, y, ldy)
}

// opShape is the stored shape of A (or B) whose op is [rows, cols] (with transpose t).
func opShape(t bool, rows, cols int) (r, c int) {
	if t {
		return cols, rows
	}
	return rows, cols
}

// product checks the operands of Gemm and GemmActGrad and runs the kernel.
func product(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, acc bool, bias []float32, act Act, y []float32, ldy int) {
	ar, ac := opShape(transA, m, k)
	br, bc := opShape(transB, k, n)
	need("A", a, ar, ac, lda)
	need("B", b, br, bc, ldb)
	need("C", c, m, n, ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		a, b = nil, nil
	}
	gemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, y, ldy)
}

// Linear is y = act(x·w + bias) for x [m, k], w [k, n], y [m, n] (all contiguous) and
// bias [n] or nil: a dense layer.
func Linear(m, n, k int, x, w, bias, y []float32, act Act) {
	Gemm(false, false, m, n, k, x, max(k, 1), w, max(n, 1), y, max(n, 1), false, bias, act)
}

// ActGrad is dz = dy·act'(x), computed from the activation's output y = act(x): 1-y² for
// Tanh, [y > 0] for ReLU, 1 for None. The three slices have the same length; dz may alias dy.
func ActGrad(act Act, y, dy, dz []float32) {
	if len(dy) != len(y) || len(dz) != len(y) {
		panic(fmt.Sprintf("kernels: ActGrad of %d, %d and %d values", len(y), len(dy), len(dz)))
	}
	if len(y) == 0 {
		return
	}
	actGrad(act, y, dy, dz)
}

// ColSum is dst[j] = Σ_i a[i·n + j] over the m rows of a contiguous [m, n] matrix, added to
// dst when acc is set.
func ColSum(m, n int, a, dst []float32, acc bool) {
	need("A", a, m, n, max(n, 1))
	if len(dst) < n {
		panic(fmt.Sprintf("kernels: ColSum into %d values for %d columns", len(dst), n))
	}
	if n == 0 {
		return
	}
	if m == 0 {
		if !acc {
			clear(dst[:n])
		}
		return
	}
	colSum(m, n, a, dst, acc)
}

// Adam applies one Adam step to p from the gradient g, updating the moments m and v in place:
// m = b1·m + c1·g, v = b2·v + c2·g·g, p −= step·m / (√v / sbc2 + eps), element by element in
// float32 with no fused multiply-adds, exactly as written (learner.Adam's reference loop gives
// the same bits, in every implementation). The four slices have the same length and must not
// overlap.
func Adam(p, g, m, v []float32, b1, b2, c1, c2, step, sbc2, eps float32) {
	if len(g) != len(p) || len(m) != len(p) || len(v) != len(p) {
		panic(fmt.Sprintf("kernels: Adam over %d parameters with %d gradients and %d, %d moments", len(p), len(g), len(m), len(v)))
	}
	if len(p) == 0 {
		return
	}
	adam(p, g, m, v, b1, b2, c1, c2, step, sbc2, eps)
}

// SquareSums writes into sums[b] the sum of the squares of block b of g (blocks of block
// values, the last one shorter when len(g) is not a multiple of block), in float64: value j of
// a block goes to partial sum j mod 4, and the block's sum is (s0+s1)+(s2+s3). The squares of
// float32 values are exact in float64, so every implementation gives the same bits: a
// gradient's norm does not depend on the CPU. block must be a positive multiple of 4, and sums
// hold a value per block.
func SquareSums(g []float32, block int, sums []float64) {
	if block <= 0 || block%4 != 0 {
		panic(fmt.Sprintf("kernels: SquareSums over blocks of %d values, want a positive multiple of 4", block))
	}
	blocks := (len(g) + block - 1) / block
	if len(sums) < blocks {
		panic(fmt.Sprintf("kernels: SquareSums of %d blocks into %d sums", blocks, len(sums)))
	}
	if blocks == 0 {
		return
	}
	squareSums(g, block, sums[:blocks])
}

// Axpy is y[i] += w·x[i] over len(x) values, each product rounded to float32 before the sum,
// as Go's loop computes it (the same bits in every implementation). y holds at least len(x)
// values and does not overlap x.
func Axpy(w float32, x, y []float32) {
	if len(y) < len(x) {
		panic(fmt.Sprintf("kernels: Axpy of %d values into %d", len(x), len(y)))
	}
	if len(x) == 0 {
		return
	}
	addScaled(w, x, y)
}

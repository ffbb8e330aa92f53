// Package kernels holds the float32 compute kernels of the policy graphs: a matrix product with
// optional transposes and a fused bias and activation, the activation's derivative, and
// column sums. They are C compiled by cgo in this package, one copy per instruction set (SSE2,
// AVX2+FMA, AVX-512), chosen once at start-up from what the CPU supports; no build flag ties
// the binary to a CPU.
//
// Matrices are row-major []float32 with explicit leading dimensions. The functions keep no
// state and allocate no Go memory (a transposed right operand is packed into a C scratch
// buffer), so they are safe for concurrent use on disjoint outputs. Shapes are the caller's
// contract: a slice too short for its shape panics with a message naming it, before any C
// code runs.
package kernels

/*
#cgo CFLAGS: -O3 -std=gnu11
#include "kernels.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Act is an activation applied elementwise after a product.
type Act int

// The activations.
const (
	None Act = C.ACT_NONE // identity
	Tanh Act = C.ACT_TANH // hyperbolic tangent
	ReLU Act = C.ACT_RELU // max(x, 0)
)

// Instruction-set levels: which copy of the kernels runs.
const (
	levelRef    = C.LEVEL_REF // the plain reference loops
	levelSSE2   = C.LEVEL_SSE2
	levelAVX2   = C.LEVEL_AVX2
	levelAVX512 = C.LEVEL_AVX512
)

// level is the copy in use: the best the CPU supports. Tests switch it (never concurrently
// with kernel calls).
var level = cpuLevel()

func cpuLevel() int { return int(C.twk_cpu_level()) }

// Level names the instruction set the kernels use on this CPU: "avx512", "avx2" or "sse2".
func Level() string {
	switch level {
	case levelAVX512:
		return "avx512"
	case levelAVX2:
		return "avx2"
	case levelSSE2:
		return "sse2"
	}
	return "reference"
}

func ptr(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

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
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	need("A", a, ar, ac, lda)
	need("B", b, br, bc, ldb)
	need("C", c, m, n, ldc)
	if bias != nil && len(bias) < n {
		panic(fmt.Sprintf("kernels: bias holds %d values for %d columns", len(bias), n))
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		a, b = nil, nil
	}
	if C.twk_gemm(C.int(level), b2i(transA), b2i(transB), C.long(m), C.long(n), C.long(k), ptr(a), C.long(lda),
		ptr(b), C.long(ldb), ptr(c), C.long(ldc), b2i(acc), ptr(bias), C.int(act)) != 0 {
		panic("kernels: out of C memory for a packing buffer")
	}
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
	C.twk_act_grad(C.int(level), C.long(len(y)), ptr(y), ptr(dy), ptr(dz), C.int(act))
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
	C.twk_col_sum(C.int(level), C.long(m), C.long(n), ptr(a), ptr(dst), b2i(acc))
}

// Adam applies one Adam step to p from the gradient g, updating the moments m and v in place:
// m = b1·m + c1·g, v = b2·v + c2·g·g, p −= step·m / (√v / sbc2 + eps), element by element in
// float32 with no fused multiply-adds, exactly as written (learner.Adam's reference loop gives
// the same bits). The four slices have the same length and must not overlap.
func Adam(p, g, m, v []float32, b1, b2, c1, c2, step, sbc2, eps float32) {
	if len(g) != len(p) || len(m) != len(p) || len(v) != len(p) {
		panic(fmt.Sprintf("kernels: Adam over %d parameters with %d gradients and %d, %d moments", len(p), len(g), len(m), len(v)))
	}
	if len(p) == 0 {
		return
	}
	C.twk_adam(C.int(level), C.long(len(p)), ptr(p), ptr(g), ptr(m), ptr(v), C.float(b1), C.float(b2),
		C.float(c1), C.float(c2), C.float(step), C.float(sbc2), C.float(eps))
}

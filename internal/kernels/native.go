//go:build amd64 && cgo && !purego

package kernels

/*
#cgo CFLAGS: -O3 -std=gnu11
#include "kernels.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// The Act values are kernels.h's: a mismatch is a compile error (an array length that is
// negative or does not match [0]).
var (
	_ [0]struct{} = [None - C.ACT_NONE]struct{}{}
	_ [0]struct{} = [Tanh - C.ACT_TANH]struct{}{}
	_ [0]struct{} = [ReLU - C.ACT_RELU]struct{}{}
)

// Instruction-set levels: which copy of the C kernels runs (levelGo, the Go loops, is the
// fifth).
const (
	levelRef    = C.LEVEL_REF // the plain reference loops
	levelSSE2   = C.LEVEL_SSE2
	levelAVX2   = C.LEVEL_AVX2
	levelAVX512 = C.LEVEL_AVX512
)

// level is the implementation in use: the best copy the CPU supports. Tests switch it (never
// concurrently with kernel calls).
var level = cpuLevel()

func cpuLevel() int { return int(C.twk_cpu_level()) }

var (
	amxOnce sync.Once
	amxOK   bool
)

// HasBF16 is whether this CPU and OS run BF16 products on a bfloat16 matrix unit (Intel AMX).
// The first call asks Linux for the tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
func HasBF16() bool {
	amxOnce.Do(func() { amxOK = cpuLevel() == levelAVX512 && C.twk_amx_init() == 1 })
	return amxOK
}

// testLevels are the implementations this build can run on this CPU, for the tests.
func testLevels() []int {
	out := []int{levelGo}
	for _, l := range []int{levelRef, levelSSE2, levelAVX2, levelAVX512} {
		if l <= cpuLevel() {
			out = append(out, l)
		}
	}
	return out
}

func levelName(l int) string {
	switch l {
	case levelAVX512:
		return "avx512"
	case levelAVX2:
		return "avx2"
	case levelSSE2:
		return "sse2"
	case levelGo:
		return "go"
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

func gemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, acc bool, bias []float32, act Act, y []float32, ldy int) {
	if level == levelGo {
		gemmGo(transA, transB, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, y, ldy)
		return
	}
	if level == levelAVX512 && bf16Product(m, n, k) {
		if C.twk_gemm_bf16(b2i(transA), b2i(transB), C.long(m), C.long(n), C.long(k), ptr(a), C.long(lda),
			ptr(b), C.long(ldb), ptr(c), C.long(ldc), b2i(acc), ptr(bias), C.int(act), ptr(y), C.long(ldy)) != 0 {
			panic("kernels: out of C memory for a packing buffer")
		}
		return
	}
	if C.twk_gemm(C.int(level), b2i(transA), b2i(transB), C.long(m), C.long(n), C.long(k), ptr(a), C.long(lda),
		ptr(b), C.long(ldb), ptr(c), C.long(ldc), b2i(acc), ptr(bias), C.int(act), ptr(y), C.long(ldy)) != 0 {
		panic("kernels: out of C memory for a packing buffer")
	}
}

func actGrad(act Act, y, dy, dz []float32) {
	if level == levelGo {
		actGradGo(act, y, dy, dz)
		return
	}
	C.twk_act_grad(C.int(level), C.long(len(y)), ptr(y), ptr(dy), ptr(dz), C.int(act))
}

func colSum(m, n int, a, dst []float32, acc bool) {
	if level == levelGo {
		colSumGo(m, n, a, dst, acc)
		return
	}
	C.twk_col_sum(C.int(level), C.long(m), C.long(n), ptr(a), ptr(dst), b2i(acc))
}

func adam(p, g, m, v []float32, b1, b2, c1, c2, step, sbc2, eps float32) {
	if level == levelGo {
		adamGo(p, g, m, v, b1, b2, c1, c2, step, sbc2, eps)
		return
	}
	C.twk_adam(C.int(level), C.long(len(p)), ptr(p), ptr(g), ptr(m), ptr(v), C.float(b1), C.float(b2),
		C.float(c1), C.float(c2), C.float(step), C.float(sbc2), C.float(eps))
}

func addScaled(w float32, x, y []float32) {
	if level == levelGo {
		axpy(w, x, y[:len(x)])
		return
	}
	C.twk_axpy(C.int(level), C.long(len(x)), C.float(w), ptr(x), ptr(y))
}

func squareSums(g []float32, block int, sums []float64) {
	if level == levelGo {
		squareSumsGo(g, block, sums)
		return
	}
	C.twk_square_sums(C.int(level), C.long(len(g)), ptr(g), C.long(block), (*C.double)(unsafe.Pointer(&sums[0])))
}

// goMath is whether the float64 kernels of gomath.c run: they are AVX-512 code.
func goMath() bool { return level == levelAVX512 }

func f64(s []float64) *C.double {
	if len(s) == 0 {
		return nil
	}
	return (*C.double)(unsafe.Pointer(&s[0]))
}

func i32(s []int32) *C.int {
	if len(s) == 0 {
		return nil
	}
	return (*C.int)(unsafe.Pointer(&s[0]))
}

func goExp(x, y []float64) bool {
	if !goMath() {
		return false
	}
	C.twk_go_exp(C.long(len(x)), f64(x), f64(y))
	return true
}

func goLog1p(x, y []float64) bool {
	if !goMath() {
		return false
	}
	C.twk_go_log1p(C.long(len(x)), f64(x), f64(y))
	return true
}

func categorical2(logits []float32, acts []int32, ls, p, lp, h []float64) (int, bool) {
	if !goMath() {
		return 0, false
	}
	return int(C.twk_cat2(C.long(len(acts)), ptr(logits), i32(acts), f64(ls), f64(p), f64(lp), f64(h))), true
}

func categorical2Backward(ls, p []float64, acts []int32, h []float64, dLogp []float32, dEnt float64, dLogits []float32) bool {
	if !goMath() {
		return false
	}
	C.twk_cat2_backward(C.long(len(acts)), f64(ls), f64(p), i32(acts), f64(h), ptr(dLogp), C.double(dEnt), ptr(dLogits))
	return true
}

//go:build !amd64 || !cgo || purego

package kernels

// level is the implementation in use: always the Go loops in this build.
var level = levelGo

// testLevels are the implementations this build can run, for the tests.
func testLevels() []int { return []int{levelGo} }

func levelName(int) string { return "go" }

func gemm(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, acc bool, bias []float32, act Act, y []float32, ldy int) {
	gemmGo(transA, transB, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, y, ldy)
}

func actGrad(act Act, y, dy, dz []float32) { actGradGo(act, y, dy, dz) }

func colSum(m, n int, a, dst []float32, acc bool) { colSumGo(m, n, a, dst, acc) }

func adam(p, g, m, v []float32, b1, b2, c1, c2, step, sbc2, eps float32) {
	adamGo(p, g, m, v, b1, b2, c1, c2, step, sbc2, eps)
}

func squareSums(g []float32, block int, sums []float64) { squareSumsGo(g, block, sums) }

func addScaled(w float32, x, y []float32) { axpy(w, x, y[:len(x)]) }

// HasBF16 is false: the Go loops have no bfloat16 matrix unit.
func HasBF16() bool { return false }

func goExp(x, y []float64) bool   { return false }
func goLog1p(x, y []float64) bool { return false }
func categorical2(logits []float32, acts []int32, ls, p, lp, h []float64) (int, bool) {
	return 0, false
}
func categorical2Backward(ls, p []float64, acts []int32, h []float64, dLogp []float32, dEnt float64, dLogits []float32) bool {
	return false
}

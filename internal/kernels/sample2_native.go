//go:build amd64 && cgo && !purego

package kernels

/*
long twk_sample2(long rows, long chunk, const float *logits, const double *u, int *acts, float *logp);
*/
import "C"

func categorical2Sample(chunk int, logits []float32, u []float64, acts []int32, logp []float32) (int, bool) {
	if !goMath() {
		return 0, false
	}
	if len(acts) == 0 {
		return 0, true
	}
	return int(C.twk_sample2(C.long(len(acts)), C.long(chunk), ptr(logits), f64(u), i32(acts), ptr(logp))), true
}

//go:build amd64 && cgo && !purego

package kernels

/*
long twk_gather(long n, const long *perm, long d, const float *src, long rows, float *dst);
*/
import "C"

import "unsafe"

// gather is Gather's C loop; it returns the first i whose perm[i] is out of range, or -1.
func gather(dst, src []float32, perm []int, d int) (int, bool) {
	if len(perm) == 0 || d == 0 {
		return -1, true
	}
	rows := len(src) / d
	bad := C.twk_gather(C.long(len(perm)), (*C.long)(unsafe.Pointer(unsafe.SliceData(perm))), C.long(d), ptr(src), C.long(rows), ptr(dst))
	return int(bad), true
}

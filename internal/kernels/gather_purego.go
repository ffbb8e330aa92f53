//go:build !amd64 || !cgo || purego

package kernels

// gather has no C loop in this build: Gather runs Go's.
func gather(dst, src []float32, perm []int, d int) (int, bool) { return -1, false }

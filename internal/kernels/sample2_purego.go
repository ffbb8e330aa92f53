//go:build !amd64 || !cgo || purego

package kernels

// categorical2Sample has no kernel in this build: models/head draws every row.
func categorical2Sample(chunk int, logits []float32, u []float64, acts []int32, logp []float32) (int, bool) {
	return 0, false
}

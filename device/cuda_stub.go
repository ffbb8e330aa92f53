//go:build !towerrl_cuda

package device

import "fmt"

func init() {
	Register("cuda", CUDA)
}

// CUDA opens the CUDA GPU with the given ordinal. This build has no CUDA
// support: it always returns an error wrapping ErrNoCUDA.
func CUDA(ordinal int) (Device, error) {
	return nil, fmt.Errorf("cuda:%d: %w", ordinal, ErrNoCUDA)
}

//go:build cuda

package device

import (
	"errors"
	"fmt"
)

func init() {
	Register("cuda", CUDA)
}

// errCUDAPending is returned until the CUDA back end (gorgonia.org/cu) lands.
var errCUDAPending = errors.New("device: the cuda build tag is set but the CUDA back end is not implemented yet")

// CUDA opens the CUDA GPU with the given ordinal.
//
// The cuda build tag is reserved for the gorgonia.org/cu back end; until it is
// implemented this returns an error wrapping ErrNoCUDA.
func CUDA(ordinal int) (Device, error) {
	return nil, fmt.Errorf("cuda:%d: %w: %w", ordinal, errCUDAPending, ErrNoCUDA)
}

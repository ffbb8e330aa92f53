//go:build towerrl_cuda

package device

import (
	"errors"
	"fmt"
	"sync"

	"github.com/towerrl/towerrl/internal/cuda"
)

func init() {
	Register("cuda", CUDA)
}

// gpu is a CUDA GPU: its primary context (package internal/cuda) and the memory of the
// tensors mirrored on it.
type gpu struct {
	ctx *cuda.Context

	mu     sync.Mutex // guards allocs and closed
	allocs []cuda.Ptr
	closed bool
}

// CUDA opens the CUDA GPU with the given ordinal: it loads the driver (libcuda.so.1) and
// cuBLAS at the first call, and retains the GPU's primary context. An error names what is
// missing (the libraries, a GPU, the ordinal).
func CUDA(ordinal int) (Device, error) {
	ctx, err := cuda.Open(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cuda:%d: %w", ordinal, err)
	}
	return &gpu{ctx: ctx}, nil
}

func (g *gpu) Kind() Kind     { return KindCUDA }
func (g *gpu) Ordinal() int   { return g.ctx.Ordinal() }
func (g *gpu) String() string { return fmt.Sprintf("cuda:%d", g.ctx.Ordinal()) }

// CUDAContext is the GPU's context, for the CUDA code of other towerrl packages.
func (g *gpu) CUDAContext() *cuda.Context { return g.ctx }

// Mirror allocates device memory for host and copies host into it.
func (g *gpu) Mirror(name string, host []float32, shape ...int) (*Tensor, error) {
	t, err := newTensor(g, name, host, shape)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("device: mirroring %q on %s: %w", name, g, cuda.ErrClosed)
	}
	p, err := g.ctx.Alloc(len(host))
	if err != nil {
		return nil, fmt.Errorf("device: mirroring %q on %s: %w", name, g, err)
	}
	g.allocs = append(g.allocs, p)
	t.ptr = uintptr(p)
	if err := g.ctx.Upload(p, host); err != nil {
		return nil, fmt.Errorf("device: mirroring %q on %s: %w", name, g, err)
	}
	return t, nil
}

// Sync copies the tensor's host slice into its device memory.
func (g *gpu) Sync(t *Tensor) error {
	if t == nil || t.dev != Device(g) {
		return fmt.Errorf("%w: syncing %v on %s", ErrForeign, t, g)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("device: syncing %v: %w", t, cuda.ErrClosed)
	}
	return g.ctx.Upload(cuda.Ptr(t.ptr), t.host)
}

// Close frees the tensors' memory and releases the context. It is idempotent.
func (g *gpu) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	for _, p := range g.allocs {
		errs = append(errs, g.ctx.Free(p))
	}
	g.allocs = nil
	return errors.Join(append(errs, g.ctx.Close())...)
}

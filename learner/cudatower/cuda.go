//go:build towerrl_cuda

package cudatower

import (
	"errors"
	"fmt"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/internal/cuda"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// New builds a tower of rows rows of alg's loss over params' MLP on the CUDA device dev
// (device.CUDA), reading params.Data() in place. The tower has its own cuBLAS handle; Close
// frees it and the tower's GPU memory, not the device.
func New(dev device.Device, params *models.Params, rows int, alg algo.Algorithm) (learner.Tower, error) {
	cd, ok := dev.(interface{ CUDAContext() *cuda.Context })
	if dev == nil || dev.Kind() != device.KindCUDA || !ok {
		return nil, fmt.Errorf("cudatower: %v is not a CUDA device; open one with device.CUDA (CPU towers: policy.Towers, package engine/policy)", dev)
	}
	if params == nil || alg == nil {
		return nil, errors.New("cudatower: New needs the model's parameters and an algorithm")
	}
	ctx := cd.CUDAContext()
	blas, _, err := ctx.NewBLAS()
	if err != nil {
		return nil, fmt.Errorf("cudatower: on %v: %w", dev, err)
	}
	return newTower(&gpu{ctx: ctx, blas: blas}, params, params.Data(), rows, alg)
}

// gpu is the backend on a CUDA context.
type gpu struct {
	ctx  *cuda.Context
	blas *cuda.BLAS
}

func (g *gpu) alloc(n int) (ptr, error) {
	p, err := g.ctx.Alloc(n)
	return ptr(p), err
}
func (g *gpu) free(p ptr) error                      { return g.ctx.Free(cuda.Ptr(p)) }
func (g *gpu) upload(dst ptr, src []float32) error   { return g.ctx.Upload(cuda.Ptr(dst), src) }
func (g *gpu) download(dst []float32, src ptr) error { return g.ctx.Download(dst, cuda.Ptr(src)) }
func (g *gpu) fill(dst ptr, n int, v float32) error  { return g.ctx.Fill(cuda.Ptr(dst), n, v) }
func (g *gpu) close() error                          { return g.blas.Close() }

func (g *gpu) gemm(transA, transB bool, m, n, k int, a ptr, lda int, b ptr, ldb int, beta float32, c ptr, ldc int) error {
	return g.blas.Gemm(transA, transB, m, n, k, cuda.Ptr(a), lda, cuda.Ptr(b), ldb, beta, cuda.Ptr(c), ldc)
}

func (g *gpu) biasAct(y, b ptr, rows, cols, act int) error {
	return g.ctx.BiasAct(cuda.Ptr(y), cuda.Ptr(b), rows, cols, act)
}

func (g *gpu) actGrad(dz, y ptr, n, act int) error {
	return g.ctx.ActGrad(cuda.Ptr(dz), cuda.Ptr(y), n, act)
}

//go:build towerrl_cuda

package cuda

//go:generate ./gen_ptx.sh

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// The few CUDA driver and cuBLAS types and constants used, declared here so that no CUDA
// header is needed to build (their ABI has not changed since CUDA 4 and cuBLAS v2).
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *cublasHandle_t;
typedef int cublasStatus_t;

typedef struct {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
		unsigned, CUstream, void **, void **);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	cublasStatus_t (*cublasCreate)(cublasHandle_t *);
	cublasStatus_t (*cublasDestroy)(cublasHandle_t);
	cublasStatus_t (*cublasGetVersion)(cublasHandle_t, int *);
	cublasStatus_t (*cublasSgemm)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int,
		const float *, int, const float *, float *, int);
} towerrl_cuda_api;

static towerrl_cuda_api api;
static void *libcuda, *libcublas;

// towerrl_cuda_load opens the driver and cuBLAS and resolves every entry point; on failure it
// returns a message (static or from dlerror) naming what is missing.
static const char *towerrl_cuda_load(const char *cublas_name, char *which, size_t which_len) {
	if (!libcuda) {
		libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!libcuda) return dlerror();
	}
#define SYM(lib, field, name) \
	if (!(*(void **)&api.field = dlsym(lib, name))) { strncpy(which, name, which_len - 1); return "missing symbol"; }
	SYM(libcuda, cuInit, "cuInit");
	SYM(libcuda, cuDriverGetVersion, "cuDriverGetVersion");
	SYM(libcuda, cuDeviceGetCount, "cuDeviceGetCount");
	SYM(libcuda, cuDeviceGet, "cuDeviceGet");
	SYM(libcuda, cuDeviceGetName, "cuDeviceGetName");
	SYM(libcuda, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(libcuda, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	SYM(libcuda, cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(libcuda, cuCtxSynchronize, "cuCtxSynchronize");
	SYM(libcuda, cuMemAlloc, "cuMemAlloc_v2");
	SYM(libcuda, cuMemFree, "cuMemFree_v2");
	SYM(libcuda, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(libcuda, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(libcuda, cuMemsetD32, "cuMemsetD32_v2");
	SYM(libcuda, cuModuleLoadData, "cuModuleLoadData");
	SYM(libcuda, cuModuleUnload, "cuModuleUnload");
	SYM(libcuda, cuModuleGetFunction, "cuModuleGetFunction");
	SYM(libcuda, cuLaunchKernel, "cuLaunchKernel");
	SYM(libcuda, cuGetErrorString, "cuGetErrorString");
	if (!libcublas) {
		libcublas = dlopen(cublas_name, RTLD_NOW | RTLD_LOCAL);
		if (!libcublas) return dlerror();
	}
	SYM(libcublas, cublasCreate, "cublasCreate_v2");
	SYM(libcublas, cublasDestroy, "cublasDestroy_v2");
	SYM(libcublas, cublasGetVersion, "cublasGetVersion_v2");
	SYM(libcublas, cublasSgemm, "cublasSgemm_v2");
#undef SYM
	return NULL;
}

static const char *towerrl_cuda_errstr(CUresult r) {
	const char *s = NULL;
	if (api.cuGetErrorString && api.cuGetErrorString(r, &s) == 0 && s) return s;
	return "unknown CUDA error";
}

static CUresult towerrl_init(void) { return api.cuInit(0); }
static CUresult towerrl_driver_version(int *v) { return api.cuDriverGetVersion(v); }
static CUresult towerrl_device_count(int *n) { return api.cuDeviceGetCount(n); }

static CUresult towerrl_open(int ordinal, CUdevice *dev, CUcontext *ctx, char *name, int name_len) {
	CUresult r = api.cuDeviceGet(dev, ordinal);
	if (r) return r;
	if ((r = api.cuDeviceGetName(name, name_len, *dev))) return r;
	if ((r = api.cuDevicePrimaryCtxRetain(ctx, *dev))) return r;
	return api.cuCtxSetCurrent(*ctx);
}

static CUresult towerrl_release(CUdevice dev) { return api.cuDevicePrimaryCtxRelease(dev); }

static CUresult towerrl_alloc(CUcontext ctx, CUdeviceptr *p, size_t bytes) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuMemAlloc(p, bytes);
}

static CUresult towerrl_free(CUcontext ctx, CUdeviceptr p) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuMemFree(p);
}

static CUresult towerrl_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t bytes) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuMemcpyHtoD(dst, src, bytes);
}

static CUresult towerrl_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t bytes) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuMemcpyDtoH(dst, src, bytes);
}

static CUresult towerrl_fill(CUcontext ctx, CUdeviceptr dst, unsigned bits, size_t n) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuMemsetD32(dst, bits, n);
}

static CUresult towerrl_sync(CUcontext ctx) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuCtxSynchronize();
}

static CUresult towerrl_module(CUcontext ctx, const char *ptx, CUmodule *m) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuModuleLoadData(m, ptx);
}

static CUresult towerrl_unload(CUcontext ctx, CUmodule m) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	return r ? r : api.cuModuleUnload(m);
}

static CUresult towerrl_function(CUmodule m, const char *name, CUfunction *f) {
	return api.cuModuleGetFunction(f, m, name);
}

// towerrl_launch_pp_iii launches a kernel of signature (float*, const float*, int, int, int)
// (bias_act) on the default stream.
static CUresult towerrl_launch_pp_iii(CUcontext ctx, CUfunction f, unsigned grid, unsigned block,
		CUdeviceptr a, CUdeviceptr b, int x, int y, int z) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	if (r) return r;
	void *args[] = {&a, &b, &x, &y, &z};
	return api.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}

// towerrl_launch_pp_ii launches a kernel of signature (float*, const float*, int, int)
// (act_grad) on the default stream.
static CUresult towerrl_launch_pp_ii(CUcontext ctx, CUfunction f, unsigned grid, unsigned block,
		CUdeviceptr a, CUdeviceptr b, int x, int y) {
	CUresult r = api.cuCtxSetCurrent(ctx);
	if (r) return r;
	void *args[] = {&a, &b, &x, &y};
	return api.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, args, NULL);
}

static int towerrl_blas_create(CUcontext ctx, cublasHandle_t *h, int *version) {
	if (api.cuCtxSetCurrent(ctx)) return -1;
	int s = api.cublasCreate(h);
	if (s) return s;
	return api.cublasGetVersion(*h, version);
}

static int towerrl_blas_destroy(CUcontext ctx, cublasHandle_t h) {
	if (api.cuCtxSetCurrent(ctx)) return -1;
	return api.cublasDestroy(h);
}

// towerrl_sgemm is cublasSgemm with alpha 1 (column-major, as cuBLAS).
static int towerrl_sgemm(CUcontext ctx, cublasHandle_t h, int ta, int tb, int m, int n, int k,
		CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c, int ldc) {
	if (api.cuCtxSetCurrent(ctx)) return -1;
	float one = 1.f;
	return api.cublasSgemm(h, ta, tb, m, n, k, &one, (const float *)a, lda, (const float *)b, ldb,
		&beta, (float *)c, ldc);
}
*/
import "C"

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"
)

//go:embed kernels.ptx
var kernelsPTX string

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrLibrary is wrapped by Open's error when the driver or cuBLAS cannot be loaded.
	ErrLibrary = errors.New("cuda: cannot load the CUDA libraries")
	// ErrCUDA is wrapped by the errors the driver reports.
	ErrCUDA = errors.New("cuda: driver error")
	// ErrCUBLAS is wrapped by the errors cuBLAS reports.
	ErrCUBLAS = errors.New("cuda: cuBLAS error")
	// ErrClosed is returned by a Context's methods after Close.
	ErrClosed = errors.New("cuda: context closed")
)

// CUBLASNames are the cuBLAS libraries Open tries, in order.
var CUBLASNames = []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"}

var load struct {
	once   sync.Once
	err    error
	cublas string // the cuBLAS library loaded
}

// loadLibraries opens the driver and the first cuBLAS of CUBLASNames that loads, once.
func loadLibraries() (string, error) {
	load.once.Do(func() {
		var msgs []string
		which := make([]byte, 128)
		for _, name := range CUBLASNames {
			cname := C.CString(name)
			msg := C.towerrl_cuda_load(cname, (*C.char)(unsafe.Pointer(&which[0])), C.size_t(len(which)))
			C.free(unsafe.Pointer(cname))
			if msg == nil {
				load.cublas = name
				return
			}
			m := C.GoString(msg)
			if m == "missing symbol" {
				m += " " + C.GoString((*C.char)(unsafe.Pointer(&which[0])))
			}
			msgs = append(msgs, m)
			if strings.Contains(m, "libcuda.so.1") {
				break // no driver: no cuBLAS will help
			}
		}
		load.err = fmt.Errorf("%w: %s (the driver's libcuda.so.1 and one of %s must be on the library path: put the CUDA libraries' folders, e.g. the Python environment's nvidia/*/lib, in LD_LIBRARY_PATH)",
			ErrLibrary, strings.Join(msgs, "; "), strings.Join(CUBLASNames, ", "))
	})
	return load.cublas, load.err
}

func check(r C.CUresult, what string) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%w %d (%s) in %s", ErrCUDA, int(r), C.GoString(C.towerrl_cuda_errstr(r)), what)
}

func checkBLAS(s C.int, what string) error {
	if s == 0 {
		return nil
	}
	if s == -1 {
		return fmt.Errorf("%w: making the context current for %s", ErrCUDA, what)
	}
	return fmt.Errorf("%w: status %d in %s", ErrCUBLAS, int(s), what)
}

// Info describes the GPU a Context drives and the libraries it loaded.
type Info struct {
	Name          string // the device's name, e.g. "NVIDIA H200"
	Driver        int    // the driver's CUDA version, e.g. 13000
	CUBLAS        string // the cuBLAS library loaded
	CUBLASVersion int    // its version, e.g. 130100
}

// Context is one GPU's primary context with the tower's kernels loaded. It is safe for
// concurrent use; work is issued on the legacy default stream, in call order per thread.
type Context struct {
	ordinal int
	dev     C.CUdevice
	ctx     C.CUcontext
	mod     C.CUmodule
	biasAct C.CUfunction
	actGrad C.CUfunction
	info    Info

	mu     sync.Mutex // guards closed and the release of the context
	closed bool
}

// Open loads the libraries (once per process), initialises the driver and retains the
// primary context of GPU ordinal.
func Open(ordinal int) (*Context, error) {
	if ordinal < 0 {
		return nil, fmt.Errorf("cuda: GPU ordinal %d is negative", ordinal)
	}
	cublas, err := loadLibraries()
	if err != nil {
		return nil, err
	}
	if err := check(C.towerrl_init(), "cuInit (is there an NVIDIA GPU and its driver?)"); err != nil {
		return nil, err
	}
	var n C.int
	if err := check(C.towerrl_device_count(&n), "cuDeviceGetCount"); err != nil {
		return nil, err
	}
	if ordinal >= int(n) {
		return nil, fmt.Errorf("cuda: no GPU %d: the driver sees %d", ordinal, int(n))
	}
	c := &Context{ordinal: ordinal, info: Info{CUBLAS: cublas}}
	var drv C.int
	if err := check(C.towerrl_driver_version(&drv), "cuDriverGetVersion"); err != nil {
		return nil, err
	}
	c.info.Driver = int(drv)
	// cgo refuses a pointer into a struct that holds Go pointers (c does): the C calls fill
	// locals, copied into c after.
	name := make([]byte, 256)
	var dev C.CUdevice
	var ctx C.CUcontext
	if err := check(C.towerrl_open(C.int(ordinal), &dev, &ctx, (*C.char)(unsafe.Pointer(&name[0])), C.int(len(name))), "opening the GPU"); err != nil {
		return nil, err
	}
	c.dev, c.ctx = dev, ctx
	c.info.Name = C.GoString((*C.char)(unsafe.Pointer(&name[0])))
	ptx := C.CString(kernelsPTX)
	defer C.free(unsafe.Pointer(ptx))
	var mod C.CUmodule
	if err := check(C.towerrl_module(c.ctx, ptx, &mod), "loading the kernels' PTX (sm_90)"); err != nil {
		return nil, errors.Join(err, c.release())
	}
	c.mod = mod
	for _, k := range []struct {
		name string
		f    *C.CUfunction
	}{{"bias_act", &c.biasAct}, {"act_grad", &c.actGrad}} {
		cn := C.CString(k.name)
		var f C.CUfunction
		err := check(C.towerrl_function(c.mod, cn, &f), "finding kernel "+k.name)
		C.free(unsafe.Pointer(cn))
		if err != nil {
			return nil, errors.Join(err, c.release())
		}
		*k.f = f
	}
	return c, nil
}

// Info describes the GPU and the libraries (CUBLASVersion once a BLAS handle was made).
func (c *Context) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// Ordinal is the GPU's index.
func (c *Context) Ordinal() int { return c.ordinal }

func (c *Context) release() error {
	var err error
	if c.mod != nil {
		err = check(C.towerrl_unload(c.ctx, c.mod), "cuModuleUnload")
		c.mod = nil
	}
	return errors.Join(err, check(C.towerrl_release(c.dev), "cuDevicePrimaryCtxRelease"))
}

// Close unloads the kernels and releases the primary context. It is idempotent. Memory and
// BLAS handles must be freed before.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.release()
}

func (c *Context) live() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// Ptr is a device address.
type Ptr uint64

// Add is p advanced by n float32s.
func (p Ptr) Add(n int) Ptr { return p + Ptr(4*n) }

// Alloc allocates n float32s of device memory (uninitialised).
func (c *Context) Alloc(n int) (Ptr, error) {
	if err := c.live(); err != nil {
		return 0, err
	}
	if n < 1 {
		n = 1 // cuMemAlloc refuses 0 bytes; an empty tensor still gets an address
	}
	var p C.CUdeviceptr
	if err := check(C.towerrl_alloc(c.ctx, &p, C.size_t(4*n)), fmt.Sprintf("allocating %d float32s", n)); err != nil {
		return 0, err
	}
	return Ptr(p), nil
}

// Free releases memory from Alloc.
func (c *Context) Free(p Ptr) error {
	if p == 0 {
		return nil
	}
	return check(C.towerrl_free(c.ctx, C.CUdeviceptr(p)), "cuMemFree")
}

// Upload copies src to dst (synchronously).
func (c *Context) Upload(dst Ptr, src []float32) error {
	if len(src) == 0 {
		return nil
	}
	return check(C.towerrl_htod(c.ctx, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(4*len(src))), "copying to the GPU")
}

// Download copies len(dst) float32s from src (synchronously, after the work before it).
func (c *Context) Download(dst []float32, src Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return check(C.towerrl_dtoh(c.ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(4*len(dst))), "copying from the GPU")
}

// Fill sets n float32s at dst to v.
func (c *Context) Fill(dst Ptr, n int, v float32) error {
	return check(C.towerrl_fill(c.ctx, C.CUdeviceptr(dst), C.uint(math.Float32bits(v)), C.size_t(n)), "cuMemsetD32")
}

// Sync waits for the context's work to finish.
func (c *Context) Sync() error { return check(C.towerrl_sync(c.ctx), "cuCtxSynchronize") }

// Activation codes of the kernels.
const (
	ActNone = 0
	ActTanh = 1
	ActReLU = 2
)

// grid is the launch size of an element-wise kernel over n values.
func grid(n int) (C.uint, C.uint) {
	const block = 256
	g := min((n+block-1)/block, 65535)
	return C.uint(max(g, 1)), block
}

// BiasAct sets y[r, j] = act(y[r, j] + b[j]) over a row-major [rows, cols] y.
func (c *Context) BiasAct(y, b Ptr, rows, cols, act int) error {
	g, bl := grid(rows * cols)
	return check(C.towerrl_launch_pp_iii(c.ctx, c.biasAct, g, bl, C.CUdeviceptr(y), C.CUdeviceptr(b), C.int(rows), C.int(cols), C.int(act)), "bias_act")
}

// ActGrad multiplies dz[i] by the activation's derivative at the output y[i], for n values.
func (c *Context) ActGrad(dz, y Ptr, n, act int) error {
	g, bl := grid(n)
	return check(C.towerrl_launch_pp_ii(c.ctx, c.actGrad, g, bl, C.CUdeviceptr(dz), C.CUdeviceptr(y), C.int(n), C.int(act)), "act_grad")
}

// BLAS is a cuBLAS handle on a Context.
type BLAS struct {
	c *Context
	h C.cublasHandle_t
}

// NewBLAS makes a cuBLAS handle on c and returns it with cuBLAS's version.
func (c *Context) NewBLAS() (*BLAS, int, error) {
	if err := c.live(); err != nil {
		return nil, 0, err
	}
	var h C.cublasHandle_t
	var v C.int
	if err := checkBLAS(C.towerrl_blas_create(c.ctx, &h, &v), "cublasCreate"); err != nil {
		return nil, 0, err
	}
	b := &BLAS{c: c, h: h}
	c.mu.Lock()
	c.info.CUBLASVersion = int(v)
	c.mu.Unlock()
	return b, int(v), nil
}

// Close destroys the handle. It is idempotent.
func (b *BLAS) Close() error {
	if b.h == nil {
		return nil
	}
	err := checkBLAS(C.towerrl_blas_destroy(b.c.ctx, b.h), "cublasDestroy")
	b.h = nil
	return err
}

// Gemm is cuBLAS's column-major C = op(A)·op(B) + beta·C, op(X) = Xᵀ when its flag is set,
// op(A) m×k, op(B) k×n, C m×n.
func (b *BLAS) Gemm(transA, transB bool, m, n, k int, a Ptr, lda int, x Ptr, ldb int, beta float32, cp Ptr, ldc int) error {
	ta, tb := C.int(0), C.int(0)
	if transA {
		ta = 1
	}
	if transB {
		tb = 1
	}
	return checkBLAS(C.towerrl_sgemm(b.c.ctx, b.h, ta, tb, C.int(m), C.int(n), C.int(k), C.CUdeviceptr(a), C.int(lda),
		C.CUdeviceptr(x), C.int(ldb), C.float(beta), C.CUdeviceptr(cp), C.int(ldc)), "cublasSgemm")
}

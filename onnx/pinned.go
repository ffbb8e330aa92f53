package onnx

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>

// The CUDA runtime's page-locking calls, found at run time in the libcudart.so.13 that the
// CUDA provider plugin loaded (towerrl links no CUDA library).
typedef int (*towerrl_host_register)(void *ptr, size_t size, unsigned int flags);
typedef int (*towerrl_host_unregister)(void *ptr);

static towerrl_host_register towerrl_register_fn;
static towerrl_host_unregister towerrl_unregister_fn;

// towerrl_cudart_open finds cudaHostRegister and cudaHostUnregister; 0 when both are found,
// 1 when no libcudart.so.13 is loaded or loadable, 2 when it lacks them.
static int towerrl_cudart_open(void) {
	if (towerrl_register_fn != NULL && towerrl_unregister_fn != NULL) {
		return 0;
	}
	void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
	if (h == NULL) {
		h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
	}
	if (h == NULL) {
		return 1;
	}
	towerrl_register_fn = (towerrl_host_register) dlsym(h, "cudaHostRegister");
	towerrl_unregister_fn = (towerrl_host_unregister) dlsym(h, "cudaHostUnregister");
	return (towerrl_register_fn != NULL && towerrl_unregister_fn != NULL) ? 0 : 2;
}

static int towerrl_host_register_call(void *ptr, size_t size) {
	return towerrl_register_fn(ptr, size, 0); // cudaHostRegisterDefault
}

static int towerrl_host_unregister_call(void *ptr) {
	return towerrl_unregister_fn(ptr);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// cudart records the one look-up of the CUDA runtime's page-locking calls.
var cudart struct {
	once sync.Once
	rc   C.int // towerrl_cudart_open's answer
}

// pageSize is the alignment and granularity of page-locked buffers: each gets pages of its
// own, since the CUDA runtime refuses to register a page twice.
const pageSize = 4096

// pageAligned returns n uint64s starting on a page boundary, in memory of whole pages that
// nothing else shares.
func pageAligned(n int) []uint64 {
	bytes := (n*8 + pageSize - 1) / pageSize * pageSize
	raw := make([]uint64, (bytes+pageSize)/8)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % pageSize); rem != 0 {
		off = (pageSize - rem) / 8
	}
	return raw[off : off+bytes/8 : off+bytes/8]
}

// pinHost page-locks mem (from [pageAligned]) with the CUDA runtime's cudaHostRegister, so
// that ONNX Runtime's copies between it and the GPU run at the bus's speed rather than
// through the driver's staging buffers. The memory is Go's and does not move (Go's collector
// does not move heap objects); the caller keeps it alive until [unpinHost].
func pinHost(mem []uint64) error {
	if len(mem) == 0 {
		return nil
	}
	cudart.once.Do(func() { cudart.rc = C.towerrl_cudart_open() })
	switch cudart.rc {
	case 1:
		return fmt.Errorf("no CUDA runtime (libcudart.so.13) to page-lock host memory with")
	case 2:
		return fmt.Errorf("libcudart.so.13 lacks cudaHostRegister")
	}
	if rc := C.towerrl_host_register_call(unsafe.Pointer(unsafe.SliceData(mem)), C.size_t(len(mem)*8)); rc != 0 {
		return fmt.Errorf("cudaHostRegister of %s failed with CUDA error %d", formatBytes(int64(len(mem)*8)), int(rc))
	}
	return nil
}

// unpinHost undoes [pinHost].
func unpinHost(mem []uint64) error {
	if len(mem) == 0 {
		return nil
	}
	if rc := C.towerrl_host_unregister_call(unsafe.Pointer(unsafe.SliceData(mem))); rc != 0 {
		return fmt.Errorf("onnx: cudaHostUnregister failed with CUDA error %d", int(rc))
	}
	return nil
}

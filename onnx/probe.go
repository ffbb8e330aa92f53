package onnx

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The first two members of ONNX Runtime's OrtApiBase, stable across every release.
typedef struct {
	const void *(*GetApi)(uint32_t version);
	const char *(*GetVersionString)(void);
} towerrl_api_base;

typedef const towerrl_api_base *(*towerrl_get_api_base)(void);

// towerrl_probe opens the library at path and asks it for a C API version, without
// touching any global state of onnxruntime_go. It returns 0 when the library serves
// api_version, 1 when it cannot be opened, 2 when it is not ONNX Runtime, 3 when it
// is ONNX Runtime but too old. version and msg receive NUL-terminated text.
// The handle is never closed: onnxruntime_go opens the same file next, and unloading
// a half-initialised runtime is not worth the risk.
static int towerrl_probe(const char *path, uint32_t api_version,
		char *version, size_t version_len, char *msg, size_t msg_len) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		strncpy(msg, e ? e : "dlopen failed", msg_len - 1);
		return 1;
	}
	towerrl_get_api_base get = (towerrl_get_api_base) dlsym(h, "OrtGetApiBase");
	if (get == NULL) {
		return 2;
	}
	const towerrl_api_base *base = get();
	if (base == NULL || base->GetVersionString == NULL || base->GetApi == NULL) {
		return 2;
	}
	const char *v = base->GetVersionString();
	strncpy(version, v ? v : "unknown", version_len - 1);
	if (base->GetApi(api_version) == NULL) {
		return 3;
	}
	return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// probeLibrary checks that path is an ONNX Runtime library serving C API version api, and
// returns the runtime's version string.
func probeLibrary(path string, api uint32) (string, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var version, msg [256]C.char
	rc := C.towerrl_probe(cpath, C.uint32_t(api), &version[0], C.size_t(len(version)), &msg[0], C.size_t(len(msg)))
	v := C.GoString(&version[0])
	switch rc {
	case 0:
		return v, nil
	case 1:
		return "", fmt.Errorf("cannot load %s: %s", path, C.GoString(&msg[0]))
	case 2:
		return "", fmt.Errorf("%s is not an ONNX Runtime library (no OrtGetApiBase)", path)
	default:
		return v, fmt.Errorf("%s is ONNX Runtime %s, which lacks C API version %d: towerrl needs ONNX Runtime %s or newer",
			path, v, api, Version)
	}
}

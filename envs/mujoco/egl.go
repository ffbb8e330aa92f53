//go:build mujoco && cgo

package mujoco

/*
#cgo LDFLAGS: -lmujoco -ldl
#include <mujoco/mujoco.h>
#include <dlfcn.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

// The guard of cgo.go: MuJoCo's errors longjmp to twr_jmp with the message in twr_msg.
extern __thread jmp_buf* twr_jmp;
extern __thread char twr_msg[512];
#define TWR_ERRLEN 512

static void twr_copy_error(char* err) {
	strncpy(err, twr_msg, TWR_ERRLEN - 1);
	err[TWR_ERRLEN - 1] = 0;
}

// EGL is loaded with dlopen when a renderer is first made, so that a binary built with MuJoCo
// starts, steps its envs and says what to install on a machine without libEGL, and so that
// building needs no EGL headers. The types and values below are EGL 1.5's (Khronos egl.h,
// eglext.h): handles are pointers, EGLint is 32 bits.
typedef void* EGLDisplay;
typedef void* EGLConfig;
typedef void* EGLContext;
typedef void* EGLSurface;
typedef int EGLint;
typedef unsigned int EGLBoolean;
typedef unsigned int EGLenum;

#define EGL_SUCCESS 0x3000
#define EGL_NONE 0x3038
#define EGL_ALPHA_SIZE 0x3021
#define EGL_BLUE_SIZE 0x3022
#define EGL_GREEN_SIZE 0x3023
#define EGL_RED_SIZE 0x3024
#define EGL_DEPTH_SIZE 0x3025
#define EGL_STENCIL_SIZE 0x3026
#define EGL_SURFACE_TYPE 0x3033
#define EGL_PBUFFER_BIT 0x0001
#define EGL_RENDERABLE_TYPE 0x3040
#define EGL_OPENGL_BIT 0x0008
#define EGL_EXTENSIONS 0x3055
#define EGL_VENDOR 0x3053
#define EGL_OPENGL_API 0x30A2
#define EGL_PLATFORM_SURFACELESS_MESA 0x31DD

static struct {
	void* lib;
	void* (*getProcAddress)(const char*);
	EGLDisplay (*getDisplay)(void*);
	EGLDisplay (*getPlatformDisplayEXT)(EGLenum, void*, const EGLint*);
	EGLBoolean (*initialize)(EGLDisplay, EGLint*, EGLint*);
	EGLBoolean (*chooseConfig)(EGLDisplay, const EGLint*, EGLConfig*, EGLint, EGLint*);
	EGLBoolean (*bindAPI)(EGLenum);
	EGLContext (*createContext)(EGLDisplay, EGLConfig, EGLContext, const EGLint*);
	EGLBoolean (*makeCurrent)(EGLDisplay, EGLSurface, EGLSurface, EGLContext);
	EGLBoolean (*destroyContext)(EGLDisplay, EGLContext);
	EGLint (*getError)(void);
	const char* (*queryString)(EGLDisplay, EGLint);
} twr_egl;

#define TWR_EGL_SYM(field, sym) \
	if (!(*(void**)&twr_egl.field = dlsym(twr_egl.lib, sym))) { \
		snprintf(err, errlen, "%s has no %s", name, sym); twr_egl.lib = NULL; return 1; }

// twr_egl_load opens the EGL library (libEGL.so.1) and resolves the calls used here; 0, or 1
// with the reason in err. Called until it succeeds, under a lock.
static int twr_egl_load(const char* name, char* err, int errlen) {
	twr_egl.lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
	if (!twr_egl.lib) { snprintf(err, errlen, "%s", dlerror()); return 1; }
	TWR_EGL_SYM(getProcAddress, "eglGetProcAddress")
	TWR_EGL_SYM(getDisplay, "eglGetDisplay")
	TWR_EGL_SYM(initialize, "eglInitialize")
	TWR_EGL_SYM(chooseConfig, "eglChooseConfig")
	TWR_EGL_SYM(bindAPI, "eglBindAPI")
	TWR_EGL_SYM(createContext, "eglCreateContext")
	TWR_EGL_SYM(makeCurrent, "eglMakeCurrent")
	TWR_EGL_SYM(destroyContext, "eglDestroyContext")
	TWR_EGL_SYM(getError, "eglGetError")
	TWR_EGL_SYM(queryString, "eglQueryString")
	*(void**)&twr_egl.getPlatformDisplayEXT = twr_egl.getProcAddress("eglGetPlatformDisplayEXT");
	return 0;
}

// twr_view is one offscreen renderer: an EGL context (no surface: MuJoCo draws into its own
// framebuffer object) and MuJoCo's scene, camera and GPU context for one model.
typedef struct {
	EGLDisplay dpy;
	EGLContext ctx;
	mjvScene scn;
	mjvCamera cam;
	mjvOption opt;
	mjvPerturb pert;
	mjrContext con;
	int width, height;
	int made; // 1 once mjv_makeScene, 2 once mjr_makeContext succeeded
} twr_view;

static EGLDisplay twr_display(char* err, int errlen) {
	EGLDisplay d = NULL;
	const char* ext = twr_egl.queryString(NULL, EGL_EXTENSIONS); // client extensions
	if (twr_egl.getPlatformDisplayEXT && ext && strstr(ext, "EGL_MESA_platform_surfaceless")) {
		d = twr_egl.getPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA, NULL, NULL);
	}
	EGLint maj, min;
	if (d && twr_egl.initialize(d, &maj, &min)) return d;
	d = twr_egl.getDisplay(NULL); // EGL_DEFAULT_DISPLAY
	if (d && twr_egl.initialize(d, &maj, &min)) return d;
	snprintf(err, errlen, "no EGL display (surfaceless or default; eglInitialize: error 0x%x)", twr_egl.getError());
	return NULL;
}

// twr_view_new makes an EGL context current on the calling thread and sets up MuJoCo's
// renderer for m at width × height (m's offscreen buffer must be as large). It returns the
// view with its context released, or NULL with the reason in err.
static twr_view* twr_view_new(const mjModel* m, int width, int height, char* err, int errlen) {
	twr_view* v = calloc(1, sizeof(twr_view));
	if (!v) { snprintf(err, errlen, "out of memory"); return NULL; }
	v->width = width; v->height = height;
	v->dpy = twr_display(err, errlen);
	if (!v->dpy) { free(v); return NULL; }
	EGLint full[] = {EGL_RED_SIZE, 8, EGL_GREEN_SIZE, 8, EGL_BLUE_SIZE, 8, EGL_ALPHA_SIZE, 8,
		EGL_DEPTH_SIZE, 24, EGL_STENCIL_SIZE, 8, EGL_SURFACE_TYPE, EGL_PBUFFER_BIT,
		EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_NONE};
	// Any surface type (EGL's default asks for windows, which a surfaceless display has none of).
	EGLint any[] = {EGL_SURFACE_TYPE, 0, EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_NONE};
	EGLConfig cfg = NULL;
	EGLint n = 0;
	if (!twr_egl.chooseConfig(v->dpy, full, &cfg, 1, &n) || n < 1) {
		n = 0;
		if (!twr_egl.chooseConfig(v->dpy, any, &cfg, 1, &n) || n < 1) {
			snprintf(err, errlen, "EGL has no OpenGL configuration (eglChooseConfig: error 0x%x)", twr_egl.getError());
			free(v); return NULL;
		}
	}
	if (!twr_egl.bindAPI(EGL_OPENGL_API)) {
		snprintf(err, errlen, "EGL cannot bind desktop OpenGL (eglBindAPI: error 0x%x)", twr_egl.getError());
		free(v); return NULL;
	}
	v->ctx = twr_egl.createContext(v->dpy, cfg, NULL, NULL);
	if (!v->ctx) {
		snprintf(err, errlen, "eglCreateContext failed: error 0x%x", twr_egl.getError());
		free(v); return NULL;
	}
	if (!twr_egl.makeCurrent(v->dpy, NULL, NULL, v->ctx)) {
		snprintf(err, errlen, "eglMakeCurrent without a surface failed: error 0x%x", twr_egl.getError());
		twr_egl.destroyContext(v->dpy, v->ctx); free(v); return NULL;
	}
	jmp_buf jb;
	if (setjmp(jb)) {
		twr_jmp = NULL;
		snprintf(err, errlen, "MuJoCo: %s", twr_msg);
		if (v->made >= 1) mjv_freeScene(&v->scn);
		twr_egl.makeCurrent(v->dpy, NULL, NULL, NULL);
		twr_egl.destroyContext(v->dpy, v->ctx); // frees whatever mjr_makeContext had made
		free(v); return NULL;
	}
	twr_jmp = &jb;
	mjv_defaultScene(&v->scn);
	mjv_defaultCamera(&v->cam);
	mjv_defaultOption(&v->opt);
	mjv_defaultPerturb(&v->pert);
	mjr_defaultContext(&v->con);
	mjv_makeScene(m, &v->scn, 1000); // Gymnasium's max_geom
	v->made = 1;
	mjr_makeContext(m, &v->con, mjFONTSCALE_150);
	v->made = 2;
	mjr_setBuffer(mjFB_OFFSCREEN, &v->con);
	twr_jmp = NULL;
	if (v->con.currentBuffer != mjFB_OFFSCREEN || v->con.offWidth < width || v->con.offHeight < height) {
		snprintf(err, errlen, "MuJoCo's offscreen buffer is %dx%d, not the %dx%d asked for", v->con.offWidth, v->con.offHeight, width, height);
		mjr_freeContext(&v->con); mjv_freeScene(&v->scn);
		twr_egl.makeCurrent(v->dpy, NULL, NULL, NULL);
		twr_egl.destroyContext(v->dpy, v->ctx); free(v); return NULL;
	}
	twr_egl.makeCurrent(v->dpy, NULL, NULL, NULL);
	return v;
}

// twr_view_bind makes v's context current on the calling thread (0), or says why not (1).
static int twr_view_bind(twr_view* v, char* err) {
	if (twr_egl.makeCurrent(v->dpy, NULL, NULL, v->ctx)) return 0;
	snprintf(err, TWR_ERRLEN, "eglMakeCurrent failed: error 0x%x", twr_egl.getError());
	return 1;
}

static void twr_view_unbind(twr_view* v) { twr_egl.makeCurrent(v->dpy, NULL, NULL, NULL); }

// twr_view_render draws d's state through v's camera (bound on this thread) into rgb
// (width × height × 3 bytes, bottom row first, as OpenGL reads them); 0, or 1 with the reason
// in err.
static int twr_view_render(twr_view* v, const mjModel* m, mjData* d, unsigned char* rgb, char* err) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return 1; }
	twr_jmp = &jb;
	mjrRect vp = {0, 0, v->width, v->height};
	mjv_updateScene(m, d, &v->opt, &v->pert, &v->cam, mjCAT_ALL, &v->scn);
	mjr_render(vp, &v->scn, &v->con);
	mjr_readPixels(rgb, NULL, vp, &v->con);
	twr_jmp = NULL;
	return 0;
}

// twr_view_free frees v's MuJoCo and EGL resources (its context bound on this thread first).
static void twr_view_free(twr_view* v) {
	twr_egl.makeCurrent(v->dpy, NULL, NULL, v->ctx);
	mjr_freeContext(&v->con);
	mjv_freeScene(&v->scn);
	twr_egl.makeCurrent(v->dpy, NULL, NULL, NULL);
	twr_egl.destroyContext(v->dpy, v->ctx);
	free(v);
}

// twr_copy_model is mj_copyModel into a new model (NULL on failure, with the reason in err).
static mjModel* twr_copy_model(const mjModel* m, char* err) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return NULL; }
	twr_jmp = &jb;
	mjModel* c = mj_copyModel(NULL, m);
	twr_jmp = NULL;
	return c;
}

// twr_forward is mj_forward (0), or 1 with the reason in err.
static int twr_forward(const mjModel* m, mjData* d, char* err) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return 1; }
	twr_jmp = &jb;
	mj_forward(m, d);
	twr_jmp = NULL;
	return 0;
}

// twr_ref_render is the tests' reference for a frame, with plain MuJoCo calls and nothing of
// twr_view: a fresh mjData of m in state (qpos, qvel) after mj_forward, drawn at width ×
// height through m's camera named "track" in its own EGL context, into out (top row first,
// RGB). 0, or 1 with the reason in err (TWR_ERRLEN bytes).
static int twr_ref_render(const mjModel* m, const double* qpos, const double* qvel, int width, int height,
		unsigned char* out, char* err) {
	EGLDisplay dpy = twr_display(err, TWR_ERRLEN);
	if (!dpy) return 1;
	EGLint attr[] = {EGL_SURFACE_TYPE, 0, EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_NONE};
	EGLConfig cfg; EGLint n = 0;
	if (!twr_egl.chooseConfig(dpy, attr, &cfg, 1, &n) || n < 1 || !twr_egl.bindAPI(EGL_OPENGL_API)) {
		snprintf(err, TWR_ERRLEN, "reference: no EGL configuration"); return 1;
	}
	EGLContext ctx = twr_egl.createContext(dpy, cfg, NULL, NULL);
	if (!ctx || !twr_egl.makeCurrent(dpy, NULL, NULL, ctx)) { snprintf(err, TWR_ERRLEN, "reference: no EGL context"); return 1; }
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return 1; }
	twr_jmp = &jb;
	mjData* d = mj_makeData(m);
	memcpy(d->qpos, qpos, sizeof(mjtNum) * m->nq);
	memcpy(d->qvel, qvel, sizeof(mjtNum) * m->nv);
	mj_forward(m, d);
	mjvScene scn; mjvCamera cam; mjvOption opt; mjvPerturb pert; mjrContext con;
	mjv_defaultScene(&scn); mjv_defaultCamera(&cam); mjv_defaultOption(&opt); mjv_defaultPerturb(&pert);
	mjr_defaultContext(&con);
	mjv_makeScene(m, &scn, 1000);
	mjr_makeContext(m, &con, mjFONTSCALE_150);
	mjr_setBuffer(mjFB_OFFSCREEN, &con);
	cam.type = mjCAMERA_FIXED;
	cam.fixedcamid = mj_name2id(m, mjOBJ_CAMERA, "track");
	mjrRect vp = {0, 0, width, height};
	mjv_updateScene(m, d, &opt, &pert, &cam, mjCAT_ALL, &scn);
	mjr_render(vp, &scn, &con);
	unsigned char* up = malloc(3 * width * height);
	mjr_readPixels(up, NULL, vp, &con);
	for (int y = 0; y < height; y++) memcpy(out + 3 * width * y, up + 3 * width * (height - 1 - y), 3 * width);
	free(up);
	mjr_freeContext(&con);
	mjv_freeScene(&scn);
	mj_deleteData(d);
	twr_jmp = NULL;
	twr_egl.makeCurrent(dpy, NULL, NULL, NULL);
	twr_egl.destroyContext(dpy, ctx);
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"sync"
	"unsafe"
)

// ErrNoRenderer is wrapped by the error of a renderer that cannot be made on this machine.
var ErrNoRenderer = errors.New("mujoco: no offscreen OpenGL renderer")

// installHint says what a Debian or Ubuntu machine needs for MuJoCo to draw offscreen.
const installHint = "MuJoCo draws offscreen through EGL and Mesa's software OpenGL (llvmpipe); install them: " +
	"apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri"

// eglLibrary is the EGL library's name (a test names a missing one).
var eglLibrary = "libEGL.so.1"

var (
	eglMu     sync.Mutex
	eglLoaded bool
)

// loadEGL opens the EGL library, once it succeeds (a failure is tried again on the next call).
func loadEGL() error {
	eglMu.Lock()
	defer eglMu.Unlock()
	if eglLoaded {
		return nil
	}
	name := C.CString(eglLibrary)
	defer C.free(unsafe.Pointer(name))
	var buf [512]C.char
	if C.twr_egl_load(name, &buf[0], C.int(len(buf))) != 0 {
		return fmt.Errorf("%w: cannot load %s (%s); %s", ErrNoRenderer, eglLibrary, C.GoString(&buf[0]), installHint)
	}
	eglLoaded = true
	return nil
}

// view is an offscreen renderer of one model: an EGL context and MuJoCo's scene and GPU
// context. Its methods must be called on one OS thread, locked by the caller
// (runtime.LockOSThread) from newView to free.
type view struct {
	v             *C.twr_view
	rgb           unsafe.Pointer // width × height × 3 bytes (C memory)
	width, height int
	err           errBuf
}

// newView makes a width × height renderer of md (whose offscreen buffer must be as large) and
// leaves its context current on the calling thread.
func newView(md *model, width, height int) (*view, error) {
	if err := loadEGL(); err != nil {
		return nil, err
	}
	var buf [512]C.char
	v := C.twr_view_new(md.m, C.int(width), C.int(height), &buf[0], C.int(len(buf)))
	if v == nil {
		return nil, fmt.Errorf("%w: %s; %s", ErrNoRenderer, C.GoString(&buf[0]), installHint)
	}
	w := &view{v: v, rgb: C.malloc(C.size_t(width * height * 3)), width: width, height: height, err: newErrBuf()}
	if C.twr_view_bind(v, w.err.p) != 0 {
		err := fmt.Errorf("%w: %s", ErrNoRenderer, w.err)
		w.free()
		return nil, err
	}
	return w, nil
}

// camera is the view's mjvCamera.
func (w *view) camera() *C.mjvCamera { return &w.v.cam }

// render draws d's state into img (width × height), the first row at the top.
func (w *view) render(md *model, d *data, img *image.RGBA) error {
	if C.twr_view_render(w.v, md.m, d.d, (*C.uchar)(w.rgb), w.err.p) != 0 {
		return fmt.Errorf("%w: rendering: %s", errMuJoCo, w.err)
	}
	rgb := unsafe.Slice((*byte)(w.rgb), w.width*w.height*3)
	for y := range w.height {
		src := rgb[(w.height-1-y)*w.width*3 : (w.height-y)*w.width*3] // OpenGL's rows go up
		dst := img.Pix[y*img.Stride : y*img.Stride+4*w.width]
		for x := range w.width {
			dst[4*x], dst[4*x+1], dst[4*x+2], dst[4*x+3] = src[3*x], src[3*x+1], src[3*x+2], 255
		}
	}
	return nil
}

// free releases the view (its context first made current on this thread) and the thread.
func (w *view) free() {
	if w.v != nil {
		C.twr_view_free(w.v)
		w.v = nil
	}
	if w.rgb != nil {
		C.free(w.rgb)
		w.rgb = nil
	}
	w.err.free()
}

// copyModel is mj_copyModel: a model the renderer may change (its offscreen buffer's size).
func copyModel(md *model) (*C.mjModel, error) {
	eb := newErrBuf()
	defer eb.free()
	m := C.twr_copy_model(md.m, eb.p)
	if m == nil {
		return nil, fmt.Errorf("%w: mj_copyModel: %s", errMuJoCo, eb)
	}
	return m, nil
}

// forward is mj_forward on d.
func (md *model) forward(d *data) error {
	if C.twr_forward(md.m, d.d, d.err.p) != 0 {
		return fmt.Errorf("%w: mj_forward: %s", errMuJoCo, d.err)
	}
	return nil
}

// fixedCamera films through the model's camera id (mjCAMERA_FIXED).
func (w *view) fixedCamera(id int) {
	w.v.cam._type = C.mjCAMERA_FIXED
	w.v.cam.fixedcamid = C.int(id)
}

// freeCamera films with a free camera looking at lookat from distance, at elevation degrees
// (0: mjv_defaultCamera's) and mjv_defaultCamera's azimuth.
func (w *view) freeCamera(lookat [3]float64, distance, elevation float64) {
	cam := &w.v.cam
	cam._type = C.mjCAMERA_FREE
	cam.fixedcamid = -1
	for i, x := range lookat {
		cam.lookat[i] = C.mjtNum(x)
	}
	cam.distance = C.mjtNum(distance)
	if elevation != 0 {
		cam.elevation = C.mjtNum(elevation)
	}
}

// cameraID is the index of the model's camera named name, or an error.
func (md *model) cameraID(name string) (int, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	id := int(C.mj_name2id(md.m, C.mjOBJ_CAMERA, cname))
	if id < 0 {
		return 0, fmt.Errorf("%w: the model has no camera %q", errMuJoCo, name)
	}
	return id, nil
}

// geomMedian is the median of the geoms' positions in d, axis by axis (Gymnasium's
// np.median(data.geom_xpos[:, i])).
func (md *model) geomMedian(d *data) [3]float64 {
	n := int(md.m.ngeom)
	xpos := f64s(d.d.geom_xpos, 3*n)
	var out [3]float64
	col := make([]float64, n)
	for i := range 3 {
		for g := range n {
			col[g] = xpos[3*g+i]
		}
		out[i] = median(col)
	}
	return out
}

// extent is the model's stat.extent (its size, which a free camera's distance starts from).
func (md *model) extent() float64 { return float64(md.m.stat.extent) }

// deleteModel frees a model made by copyModel.
func deleteModel(md *model) {
	if md.m != nil {
		C.mj_deleteModel(md.m)
		md.m = nil
	}
}

// refRender is twr_ref_render (the tests' reference frame): width × height × 3 bytes of RGB,
// the top row first. Call it on a locked OS thread.
func refRender(md *model, qpos, qvel []float64, width, height int) ([]byte, error) {
	if err := loadEGL(); err != nil {
		return nil, err
	}
	out := C.malloc(C.size_t(3 * width * height))
	defer C.free(out)
	eb := newErrBuf()
	defer eb.free()
	if C.twr_ref_render(md.m, (*C.double)(unsafe.Pointer(&qpos[0])), (*C.double)(unsafe.Pointer(&qvel[0])),
		C.int(width), C.int(height), (*C.uchar)(out), eb.p) != 0 {
		return nil, fmt.Errorf("reference render: %s", eb)
	}
	return C.GoBytes(out, C.int(3*width*height)), nil
}

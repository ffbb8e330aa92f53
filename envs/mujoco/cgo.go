//go:build mujoco && cgo

package mujoco

/*
#cgo LDFLAGS: -lmujoco
#include <mujoco/mujoco.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

// MuJoCo reports internal failures through mju_user_error and, with no handler, ends the
// process. The calls below set a jump buffer first, so an error unwinds to the call that made
// it and becomes a Go error; no Go frame lies between setjmp and longjmp. Warnings (a diverged
// simulation is reset by MuJoCo itself and counted in d->warning) are not printed: MuJoCo's
// default would write them to stdout and to MUJOCO_LOG.TXT in the working directory.
// twr_jmp and twr_msg have external linkage: the renderer's guarded calls (egl.go) use them too.
__thread jmp_buf* twr_jmp;
__thread char twr_msg[512];

static void twr_error(const char* msg) {
	strncpy(twr_msg, msg, sizeof twr_msg - 1);
	twr_msg[sizeof twr_msg - 1] = 0;
	if (twr_jmp) longjmp(*twr_jmp, 1);
	abort(); // unreachable: every call into MuJoCo goes through the guards below
}

static void twr_warning(const char* msg) { (void)msg; }

static void twr_init(void) {
	mju_user_error = twr_error;
	mju_user_warning = twr_warning;
}

// TWR_ERRLEN is the size of the buffers the guarded calls below copy MuJoCo's message into, in
// the call that failed: twr_msg is thread-local, and a goroutine may resume on another thread
// between two cgo calls.
#define TWR_ERRLEN 512

static void twr_copy_error(char* err) {
	strncpy(err, twr_msg, TWR_ERRLEN - 1);
	err[TWR_ERRLEN - 1] = 0;
}

// twr_load compiles the model held in xml (len bytes) under the name file through a virtual
// file system; on failure it returns NULL with the reason in err.
static mjModel* twr_load(const char* file, const char* xml, int len, char* err, int errlen) {
	jmp_buf jb;
	mjModel* volatile m = NULL;
	mjVFS* volatile vfs = malloc(sizeof(mjVFS));
	if (!vfs) { strncpy(err, "out of memory", errlen); return NULL; }
	if (setjmp(jb)) {
		twr_jmp = NULL;
		strncpy(err, twr_msg, errlen - 1);
		free(vfs);
		return NULL;
	}
	twr_jmp = &jb;
	mj_defaultVFS(vfs);
	if (mj_makeEmptyFileVFS(vfs, file, len) != 0) {
		strncpy(err, "cannot add the model to MuJoCo's virtual file system", errlen - 1);
	} else {
		memcpy(vfs->filedata[vfs->nfile - 1], xml, len);
		m = mj_loadXML(file, vfs, err, errlen);
		mj_deleteVFS(vfs);
	}
	twr_jmp = NULL;
	free(vfs);
	return m;
}

static mjData* twr_make_data(const mjModel* m, char* err) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return NULL; }
	twr_jmp = &jb;
	mjData* d = mj_makeData(m);
	twr_jmp = NULL;
	return d;
}

// twr_reset is mj_resetData, then qpos and qvel set (nq and nv values) and mj_forward: the
// reset of Gymnasium's MujocoEnv followed by set_state. It returns 0, or 1 with the reason in
// err (TWR_ERRLEN bytes).
static int twr_reset(const mjModel* m, mjData* d, const double* qpos, const double* qvel, char* err) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return 1; }
	twr_jmp = &jb;
	mj_resetData(m, d);
	memcpy(d->qpos, qpos, sizeof(mjtNum) * m->nq);
	memcpy(d->qvel, qvel, sizeof(mjtNum) * m->nv);
	mj_forward(m, d);
	twr_jmp = NULL;
	return 0;
}

// twr_set_state is Gymnasium's set_state: qpos and qvel, then mj_forward; on failure, 1 with
// the reason in err.
static int twr_set_state(const mjModel* m, mjData* d, const double* qpos, const double* qvel, char* err) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return 1; }
	twr_jmp = &jb;
	memcpy(d->qpos, qpos, sizeof(mjtNum) * m->nq);
	memcpy(d->qvel, qvel, sizeof(mjtNum) * m->nv);
	mj_forward(m, d);
	twr_jmp = NULL;
	return 0;
}

// twr_step is Gymnasium's do_simulation for n envs whose ctrl is already written: mj_step
// frame_skip times, then mj_rnePostConstraint where rne is set (it fills cfrc_ext). It returns
// 0, or 1 + the index of the env where MuJoCo failed (the reason in err).
static int twr_step(const mjModel* m, mjData** d, int n, int frame_skip, int rne, char* err) {
	jmp_buf jb;
	volatile int i = 0;
	if (setjmp(jb)) { twr_jmp = NULL; twr_copy_error(err); return 1 + i; }
	twr_jmp = &jb;
	for (; i < n; i++) {
		for (int k = 0; k < frame_skip; k++) mj_step(m, d[i]);
		if (rne) mj_rnePostConstraint(m, d[i]);
	}
	twr_jmp = NULL;
	return 0;
}

// twr_bare_steps is the bare physics loop the benchmarks compare the VecEnv with: mj_step
// steps times on d, ctrl as it is.
static void twr_bare_steps(const mjModel* m, mjData* d, long steps) {
	jmp_buf jb;
	if (setjmp(jb)) { twr_jmp = NULL; return; }
	twr_jmp = &jb;
	for (long k = 0; k < steps; k++) mj_step(m, d);
	twr_jmp = NULL;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"
)

var initOnce sync.Once

// version is the MuJoCo library's version string, as mj_versionString gives it.
func version() string {
	return C.GoString(C.mj_versionString())
}

// model is a compiled MuJoCo model (mjModel), immutable once loaded and shared by every env of
// its kind; it is never freed (one per environment id per process).
type model struct {
	m                 *C.mjModel
	nq, nv, nu, nbody int
	nsite             int
	timestep          float64   // opt.timestep
	dt                float64   // timestep × the env's frame_skip (Gymnasium's dt)
	qpos0             []float64 // the model's initial qpos (Gymnasium's init_qpos)
	bodyMass          []float64 // nbody
	ctrlRange         []float64 // nu × 2
	ctrlLimited       []bool    // nu
}

// loadModel compiles xml (the contents of a model file named file).
func loadModel(file string, xml []byte) (*model, error) {
	initOnce.Do(func() { C.twr_init() })
	cfile := C.CString(file)
	defer C.free(unsafe.Pointer(cfile))
	cxml := C.CBytes(xml)
	defer C.free(cxml)
	var errbuf [1000]C.char
	m := C.twr_load(cfile, (*C.char)(cxml), C.int(len(xml)), &errbuf[0], C.int(len(errbuf)))
	if m == nil {
		return nil, fmt.Errorf("mujoco: compiling %s: %s", file, C.GoString(&errbuf[0]))
	}
	md := &model{
		m: m, nq: int(m.nq), nv: int(m.nv), nu: int(m.nu), nbody: int(m.nbody), nsite: int(m.nsite),
		timestep: float64(m.opt.timestep),
	}
	md.qpos0 = append([]float64(nil), f64s(m.qpos0, md.nq)...)
	md.bodyMass = append([]float64(nil), f64s(m.body_mass, md.nbody)...)
	md.ctrlRange = append([]float64(nil), f64s(m.actuator_ctrlrange, 2*md.nu)...)
	for _, l := range unsafe.Slice((*C.mjtByte)(unsafe.Pointer(m.actuator_ctrllimited)), md.nu) {
		md.ctrlLimited = append(md.ctrlLimited, l != 0)
	}
	return md, nil
}

// f64s views n mjtNums at p (C memory) as a Go slice.
func f64s(p *C.mjtNum, n int) []float64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(p)), n)
}

// data is one env's mjData and Go views of the arrays the envs read; the views stay valid for
// the data's life (MuJoCo 2.2 allocates every array once, in one buffer).
type data struct {
	d                *C.mjData
	err              errBuf // the message of a failed reset or set_state
	qpos, qvel, ctrl []float64
	xpos, xipos      []float64 // nbody × 3
	cinert           []float64 // nbody × 10
	cvel, cfrcExt    []float64 // nbody × 6
	qfrcActuator     []float64 // nv
	qfrcConstraint   []float64 // nv
	siteXpos         []float64 // nsite × 3
	act              []float64 // na
	qaccWarmstart    []float64 // nv

	// saved lists the arrays a snapshot keeps: the state mj_step reads (qpos, qvel, act,
	// ctrl, the solver's warm start qacc_warmstart) and every derived array the observations
	// and rewards read as mj_step left them (computed at the start of its last substep, so
	// not derivable again from qpos by mj_forward).
	saved [][]float64
}

var errMuJoCo = errors.New("mujoco")

// Every guarded call copies MuJoCo's message into a buffer of the caller's (errBuf) in the
// call that failed: twr_msg is thread-local, and a goroutine may resume on another thread
// between two cgo calls (reading it in a second call once gave an empty message).

// errBuf is a C buffer of TWR_ERRLEN bytes for a guarded call's message.
type errBuf struct{ p *C.char }

func newErrBuf() errBuf { return errBuf{(*C.char)(C.calloc(C.TWR_ERRLEN, 1))} }

func (e errBuf) String() string { return C.GoString(e.p) }

func (e *errBuf) free() {
	if e.p != nil {
		C.free(unsafe.Pointer(e.p))
		e.p = nil
	}
}

// newData allocates an mjData for md.
func newData(md *model) (*data, error) {
	eb := newErrBuf()
	d := C.twr_make_data(md.m, eb.p)
	if d == nil {
		defer eb.free()
		return nil, fmt.Errorf("%w: mj_makeData: %s", errMuJoCo, eb)
	}
	dt := &data{
		d:              d,
		err:            eb,
		qpos:           f64s(d.qpos, md.nq),
		qvel:           f64s(d.qvel, md.nv),
		ctrl:           f64s(d.ctrl, md.nu),
		xpos:           f64s(d.xpos, 3*md.nbody),
		xipos:          f64s(d.xipos, 3*md.nbody),
		cinert:         f64s(d.cinert, 10*md.nbody),
		cvel:           f64s(d.cvel, 6*md.nbody),
		cfrcExt:        f64s(d.cfrc_ext, 6*md.nbody),
		qfrcActuator:   f64s(d.qfrc_actuator, md.nv),
		qfrcConstraint: f64s(d.qfrc_constraint, md.nv),
		siteXpos:       f64s(d.site_xpos, 3*md.nsite),
		act:            f64s(d.act, int(md.m.na)),
		qaccWarmstart:  f64s(d.qacc_warmstart, md.nv),
	}
	dt.saved = [][]float64{dt.qpos, dt.qvel, dt.act, dt.ctrl, dt.qaccWarmstart,
		dt.xpos, dt.xipos, dt.cinert, dt.cvel, dt.cfrcExt, dt.qfrcActuator, dt.qfrcConstraint, dt.siteXpos}
	return dt, nil
}

func (d *data) free() {
	if d.d != nil {
		C.mj_deleteData(d.d)
		d.d = nil
	}
	d.err.free()
}

// time is the simulation time.
func (d *data) time() float64 { return float64(d.d.time) }

// setTime sets the simulation time.
func (d *data) setTime(t float64) { d.d.time = C.mjtNum(t) }

// reset is MujocoEnv.reset's mj_resetData then set_state(qpos, qvel).
func (md *model) reset(d *data, qpos, qvel []float64) error {
	if C.twr_reset(md.m, d.d, (*C.double)(unsafe.Pointer(&qpos[0])), (*C.double)(unsafe.Pointer(&qvel[0])), d.err.p) != 0 {
		return fmt.Errorf("%w: reset: %s", errMuJoCo, d.err)
	}
	return nil
}

// setState is Gymnasium's set_state.
func (md *model) setState(d *data, qpos, qvel []float64) error {
	if C.twr_set_state(md.m, d.d, (*C.double)(unsafe.Pointer(&qpos[0])), (*C.double)(unsafe.Pointer(&qvel[0])), d.err.p) != 0 {
		return fmt.Errorf("%w: set_state: %s", errMuJoCo, d.err)
	}
	return nil
}

// step runs do_simulation on the n envs of p from its lo-th. When MuJoCo fails, it returns the
// index (from lo) of the env it failed in, whose step is incomplete, and the error; the envs
// after it have not been stepped.
func (md *model) step(p dataPtrs, lo, n, frameSkip int, rne bool) (int, error) {
	r := C.int(0)
	if rne {
		r = 1
	}
	if k := C.twr_step(md.m, p.at(lo), C.int(n), C.int(frameSkip), r, p.err.p); k != 0 {
		return int(k) - 1, fmt.Errorf("%w: mj_step: %s", errMuJoCo, p.err)
	}
	return 0, nil
}

// dataPtrs is a C array of mjData pointers, for twr_step, with the buffer of its message.
type dataPtrs struct {
	p   **C.mjData
	n   int
	err errBuf
}

func newDataPtrs(ds []*data) dataPtrs {
	p := (**C.mjData)(C.malloc(C.size_t(len(ds)) * C.size_t(unsafe.Sizeof((*C.mjData)(nil)))))
	s := unsafe.Slice(p, len(ds))
	for i, d := range ds {
		s[i] = d.d
	}
	return dataPtrs{p: p, n: len(ds), err: newErrBuf()}
}

// at returns the address of the i-th pointer.
func (p dataPtrs) at(i int) **C.mjData {
	return (**C.mjData)(unsafe.Add(unsafe.Pointer(p.p), uintptr(i)*unsafe.Sizeof((*C.mjData)(nil))))
}

func (p *dataPtrs) free() {
	if p.p != nil {
		C.free(unsafe.Pointer(p.p))
		p.p = nil
	}
	p.err.free()
}

// bareSteps is the bare C loop of mj_step on d (the benchmarks' reference).
func (md *model) bareSteps(d *data, steps int) {
	C.twr_bare_steps(md.m, d.d, C.long(steps))
}

// finite reports whether every value of x is finite.
func finite(x []float64) bool {
	for _, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// bodyID is the index of the body named name, or an error naming it.
func (md *model) bodyID(name string) (int, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	id := int(C.mj_name2id(md.m, C.mjOBJ_BODY, cname))
	if id < 0 {
		return 0, fmt.Errorf("%w: the model has no body %q", errMuJoCo, name)
	}
	return id, nil
}

// rnePostConstraint is mj_rnePostConstraint (the tests' reference).
func (md *model) rnePostConstraint(d *data) { C.mj_rnePostConstraint(md.m, d.d) }

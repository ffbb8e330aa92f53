//go:build mpi && cgo

package mpi

/*
#include <stdlib.h>
#include "shim.h"

#cgo noescape tmpi_init
#cgo nocallback tmpi_init
#cgo noescape tmpi_test_for
#cgo nocallback tmpi_test_for
#cgo noescape tmpi_poll_ask
#cgo nocallback tmpi_poll_ask
#cgo noescape tmpi_ask
#cgo nocallback tmpi_ask
#cgo noescape tmpi_error_string
#cgo nocallback tmpi_error_string
#cgo noescape tmpi_fin_count
#cgo nocallback tmpi_fin_count
#cgo noescape tmpi_fin_test_for
#cgo nocallback tmpi_fin_test_for
#cgo noescape tmpi_fin_take
#cgo nocallback tmpi_fin_take
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// MPI can be initialised once per process; initMu guards initialised.
var (
	initMu      sync.Mutex
	initialised bool
)

// World is this process's place in an MPI job: its rank among Size ranks, and the collective
// calls between them. Every rank must make the same collective calls in the same order with
// buffers of the same length; a World checks the order and names the ranks that stall. Calls
// are serialised (safe for concurrent use, but the order of concurrent calls would differ
// between ranks: make them from one goroutine, or one tower at a time as Collective does).
type World struct {
	rank, size int
	cfg        Config
	thread     chan func() // runs functions on the OS thread that initialised MPI

	mu         sync.Mutex // guards every field below and every MPI call
	seq        uint64     // collective calls started
	req        C.MPI_Request
	scratch    unsafe.Pointer // C memory for packed and received data, scratchLen bytes
	scratchLen int
	pin        runtime.Pinner // pins caller buffers while MPI holds them
	broken     error
	finalized  bool
	lag        time.Duration // finalizeLagEnv's pause for this rank
}

// Init initialises MPI (once per process; a second call is an error) and returns this
// process's World. Launched by mpirun or srun it joins their job; started alone it is a job
// of one rank.
func Init(cfg Config) (*World, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	initMu.Lock()
	defer initMu.Unlock()
	if initialised {
		return nil, fmt.Errorf("%w: Init called twice in one process (MPI initialises once): "+
			"pass the first *World along", ErrArgument)
	}
	w := &World{cfg: cfg, thread: make(chan func())}
	res := make(chan error)
	go w.mainThread(res)
	initialised = true // even after a failure: MPI cannot be initialised again
	if err := <-res; err != nil {
		return nil, err
	}
	return w, nil
}

// mainThread initialises MPI on an OS thread of its own and keeps it, because MPI_Finalize
// must run on the thread that initialised MPI; Finalize sends its call here.
func (w *World) mainThread(res chan<- error) {
	runtime.LockOSThread()
	var rank, size, provided C.int
	var err error
	if rc := C.tmpi_init(&rank, &size, &provided); rc != C.MPI_SUCCESS {
		res <- fmt.Errorf("MPI_Init_thread: %w", mpiError(rc))
		return
	}
	if provided < C.MPI_THREAD_SERIALIZED {
		C.tmpi_finalize()
		res <- fmt.Errorf("%w: MPI_Init_thread granted thread level %d, below MPI_THREAD_SERIALIZED: "+
			"Go calls MPI from any OS thread; use an MPI built with thread support", ErrMPI, int(provided))
		return
	}
	w.rank, w.size = int(rank), int(size)
	if w.lag, err = finalizeLag(w.rank); err != nil {
		C.tmpi_finalize()
		res <- err
		return
	}
	res <- nil
	for f := range w.thread {
		f()
	}
}

// finalizeLagEnv is a test hook (scripts/mpi_test.sh): RANK:DURATION makes rank RANK pause
// for DURATION between Finalize's barrier and MPI_Finalize, as a rank descheduled there would.
const finalizeLagEnv = "TOWERRL_TEST_FINALIZE_LAG"

// finalizeLag is rank's pause under finalizeLagEnv (0: none).
func finalizeLag(rank int) (time.Duration, error) {
	v := os.Getenv(finalizeLagEnv)
	if v == "" {
		return 0, nil
	}
	rs, ds, ok := strings.Cut(v, ":")
	r, err1 := strconv.Atoi(rs)
	d, err2 := time.ParseDuration(ds)
	if !ok || err1 != nil || err2 != nil || r < 0 || d < 0 {
		return 0, fmt.Errorf("%w: %s=%q: want RANK:DURATION, e.g. 0:200ms", ErrArgument, finalizeLagEnv, v)
	}
	if r != rank {
		return 0, nil
	}
	return d, nil
}

// Rank is this process's rank, 0 … Size-1.
func (w *World) Rank() int { return w.rank }

// Size is the number of ranks in the job.
func (w *World) Size() int { return w.size }

// Finalize waits (within ctx and Config.Timeout) until every rank reaches Finalize, then shuts
// MPI down. It is idempotent. On a broken World it returns the failure and shuts nothing down:
// call Abort. No collective may be called after it.
func (w *World) Finalize(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finalized {
		return nil
	}
	if err := w.barrier(ctx); err != nil {
		return fmt.Errorf("mpi: finalize: %w", err)
	}
	w.finalized = true
	time.Sleep(w.lag)
	if w.scratch != nil {
		C.free(w.scratch)
		w.scratch, w.scratchLen = nil, 0
	}
	rc := make(chan C.int)
	w.thread <- func() { rc <- C.tmpi_finalize() }
	close(w.thread)
	if r := <-rc; r != C.MPI_SUCCESS {
		return fmt.Errorf("MPI_Finalize: %w", mpiError(r))
	}
	return nil
}

// Abort ends every rank of the job at once (MPI_Abort): mpirun then exits with a non-zero
// status. It is the way out after a StallError, when the stalled ranks can neither finish the
// collective nor finalize. It does not return.
func (w *World) Abort(code int) {
	C.tmpi_abort(C.int(code))
	os.Exit(code) // MPI_Abort does not return; in case it does
}

// AllReduceWeighted replaces buf on every rank with Σ_r weight_r·buf_r / Σ_r weight_r, the
// weighted mean of every rank's buf, computed in float64 and the same bits on every rank. A
// rank's weight is its sample count: finite, not negative, and positive on at least one rank.
// An invalid weight on any rank makes every rank return an error (ErrArgument) and leaves buf
// as it was. It allocates nothing once its scratch space has grown to the buffer's size.
func (w *World) AllReduceWeighted(ctx context.Context, buf []float32, weight float64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(buf) + tail
	if err := w.start(callWeighted, n); err != nil {
		return err
	}
	seq := w.seq
	p, err := w.grow(8 * n)
	if err != nil {
		return err
	}
	sc := unsafe.Slice((*float64)(p), n)
	packWeighted(sc, buf, weight, seq)
	if w.size > 1 {
		if err := w.allReduce(ctx, callWeighted, seq, sc, Sum); err != nil {
			return err
		}
	}
	if !validWeight(weight) {
		return weightError(weight, seq)
	}
	err = unpackWeighted(buf, sc, w.size, seq)
	if errors.Is(err, ErrOutOfStep) {
		w.broken = err
	}
	return err
}

// AllReduceFloat64 replaces buf on every rank with the element-wise op (Sum, Max, Min) of every
// rank's buf: statistics such as advantage sums and counts. A sum is taken in MPI's order,
// the same bits on every rank.
func (w *World) AllReduceFloat64(ctx context.Context, op Op, buf []float64) error {
	if op != Sum && op != Max && op != Min {
		return fmt.Errorf("%w: reduction %v: use Sum, Max or Min", ErrArgument, op)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.start(callReduce, len(buf)); err != nil {
		return err
	}
	if w.size == 1 {
		return nil
	}
	p := w.pinned(unsafe.Pointer(unsafe.SliceData(buf)), len(buf))
	return w.unpinAfter(w.allReduce(ctx, callReduce, w.seq, unsafe.Slice((*float64)(p), len(buf)), op))
}

// allReduce sums (or takes the Max or Min of) buf, which C may read (MPI's scratch or pinned),
// over the ranks for call c #seq. The ranks first meet in a polled MPI_Ibarrier, which honours
// ctx and Config.Timeout and names a rank that never comes (w.wait); only then do they make
// the blocking MPI_Allreduce, which every rank has by then reached: the deadline's guarantee
// at the barrier's price (about 1.4 µs), for Open MPI's tuned blocking all-reduce instead of
// libnbc's schedule behind MPI_Iallreduce, which moves data only as MPI_Test is polled (10k
// float64 on 2 ranks of this machine: 53.6 µs polled, 34.6 µs through the barrier and the
// blocking call). A rank killed between the two ends the job as any killed rank does (mpirun
// aborts it).
func (w *World) allReduce(ctx context.Context, c call, seq uint64, buf []float64, op Op) error {
	if err := w.wait(ctx, c, seq, C.tmpi_ibarrier(&w.req)); err != nil {
		return err
	}
	if rc := C.tmpi_allreduce_f64((*C.double)(unsafe.Pointer(unsafe.SliceData(buf))), C.int(len(buf)), C.int(op)); rc != C.MPI_SUCCESS {
		w.broken = fmt.Errorf("%v #%d: %w", c, seq, mpiError(rc))
		return w.broken
	}
	return nil
}

// Bcast copies root's buf into every other rank's buf; every rank passes a buf of the same
// length.
func (w *World) Bcast(ctx context.Context, root int, buf []byte) error {
	if root < 0 || root >= w.size {
		return fmt.Errorf("%w: bcast root %d of %d ranks", ErrArgument, root, w.size)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.start(callBcast, len(buf)); err != nil {
		return err
	}
	if w.size == 1 {
		return nil
	}
	p := w.pinned(unsafe.Pointer(unsafe.SliceData(buf)), len(buf))
	rc := C.tmpi_ibcast(p, C.int(len(buf)), C.int(root), &w.req)
	return w.unpinAfter(w.wait(ctx, callBcast, w.seq, rc))
}

// BcastFloat32 is Bcast of a float32 buffer: root's parameters to every rank.
func (w *World) BcastFloat32(ctx context.Context, root int, buf []float32) error {
	return w.Bcast(ctx, root, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), 4*len(buf)))
}

// Barrier returns once every rank has called it.
func (w *World) Barrier(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.barrier(ctx)
}

func (w *World) barrier(ctx context.Context) error {
	if err := w.start(callBarrier, 0); err != nil {
		return err
	}
	if w.size == 1 {
		return nil
	}
	return w.wait(ctx, callBarrier, w.seq, C.tmpi_ibarrier(&w.req))
}

// CheckSame compares every rank's hash (of its parameters, say): nil when all are equal, else
// a *MismatchError naming the ranks that differ, the same error on every rank.
func (w *World) CheckSame(ctx context.Context, hash [32]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.start(callCheckSame, 32*w.size); err != nil {
		return err
	}
	p, err := w.grow(32 * (w.size + 1))
	if err != nil {
		return err
	}
	sc := unsafe.Slice((*byte)(p), 32*(w.size+1))
	copy(sc, hash[:])
	all := sc[32:]
	if w.size == 1 {
		copy(all, hash[:])
	} else {
		rc := C.tmpi_iallgather(unsafe.Pointer(&sc[0]), 32, unsafe.Pointer(&all[0]), &w.req)
		if err := w.wait(ctx, callCheckSame, w.seq, rc); err != nil {
			return err
		}
	}
	hashes := make([][32]byte, w.size)
	for r := range hashes {
		copy(hashes[r][:], all[32*r:])
	}
	return compareHashes(hashes)
}

// Gather collects every rank's data (any length) at root: root gets them in rank order, every
// other rank nil. It takes two collective calls (the lengths, then the data).
func (w *World) Gather(ctx context.Context, root int, data []byte) ([][]byte, error) {
	if root < 0 || root >= w.size {
		return nil, fmt.Errorf("%w: gather root %d of %d ranks", ErrArgument, root, w.size)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.start(callGatherSizes, 8*w.size); err != nil {
		return nil, err
	}
	p, err := w.grow(8 * (w.size + 1))
	if err != nil {
		return nil, err
	}
	sizes := unsafe.Slice((*int64)(p), w.size+1)
	sizes[0] = int64(len(data))
	if w.size == 1 {
		sizes[1] = sizes[0]
	} else {
		rc := C.tmpi_iallgather(unsafe.Pointer(&sizes[0]), 8, unsafe.Pointer(&sizes[1]), &w.req)
		if err := w.wait(ctx, callGatherSizes, w.seq, rc); err != nil {
			return nil, err
		}
	}
	counts := make([]C.int, w.size)
	displs := make([]C.int, w.size)
	var total int64
	for r, n := range sizes[1:] {
		counts[r], displs[r] = C.int(n), C.int(total)
		total += n
	}
	// Every rank sees the same sizes, so every rank refuses together.
	if err := w.start(callGather, int(min(total, math.MaxInt))); err != nil {
		return nil, err
	}
	var out []byte
	if w.rank == root {
		out = make([]byte, total)
	}
	if w.size == 1 {
		copy(out, data)
	} else {
		send := w.pinned(unsafe.Pointer(unsafe.SliceData(data)), len(data))
		recv := w.pinned(unsafe.Pointer(unsafe.SliceData(out)), len(out))
		pc := (*C.int)(w.pinned(unsafe.Pointer(&counts[0]), 1))
		pd := (*C.int)(w.pinned(unsafe.Pointer(&displs[0]), 1))
		rc := C.tmpi_igatherv(send, C.int(len(data)), recv, pc, pd, C.int(root), &w.req)
		if err := w.unpinAfter(w.wait(ctx, callGather, w.seq, rc)); err != nil {
			return nil, err
		}
	}
	if w.rank != root {
		return nil, nil
	}
	res := make([][]byte, w.size)
	for r := range res {
		res[r] = out[displs[r] : displs[r]+counts[r] : displs[r]+counts[r]]
	}
	return res, nil
}

// FinishRollout tells every other rank that this rank has finished collecting its rollout of
// the iteration, of steps steps, and waits until every rank has said the same; it returns
// every rank's steps in rank order. It is DD-PPO's straggler preemption: while a rank
// collects, RolloutsFinished counts the ranks that are already here, and the rank stops early
// once enough of them are. It counts as a collective call (every rank makes it in the same
// place of its sequence; ErrOutOfStep otherwise) and honours ctx and Config.Timeout like the
// others: a rank that never finishes collecting is named by the *StallError.
func (w *World) FinishRollout(ctx context.Context, steps int64) ([]int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.start(callFinish, 0); err != nil {
		return nil, err
	}
	seq := w.seq
	all := make([]int64, w.size)
	all[w.rank] = steps
	if w.size == 1 {
		return all, nil
	}
	rc := C.tmpi_fin_send(C.int64_t(seq), C.int64_t(steps))
	if err := w.wait(ctx, callFinish, seq, rc); err != nil {
		return nil, err
	}
	pairs := make([]C.int64_t, 2*w.size)
	C.tmpi_fin_take(&pairs[0])
	for r := range w.size {
		if r == w.rank {
			continue
		}
		if s := uint64(pairs[2*r]); s != seq {
			w.broken = fmt.Errorf("%w: %v #%d met rank %d's call #%d (a rank skipped or added a collective call)",
				ErrOutOfStep, callFinish, seq, r, s)
			return nil, w.broken
		}
		all[r] = int64(pairs[2*r+1])
	}
	return all, nil
}

// RolloutsFinished is the number of other ranks that have called FinishRollout as their next
// call after this rank's last one: those whose rollouts of this iteration are complete. It
// never waits for the other ranks (it waits for a call of this World under way on another
// goroutine), allocates nothing, and may be called from several goroutines: a rank's batcher
// workers poll it between env steps.
func (w *World) RolloutsFinished() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finalized {
		return 0, fmt.Errorf("%w: %v after Finalize", ErrFinalized, callFinish)
	}
	if w.broken != nil {
		return 0, fmt.Errorf("%w: %v: %w", ErrBroken, callFinish, w.broken)
	}
	if w.size == 1 {
		return 0, nil
	}
	var n C.int
	if rc := C.tmpi_fin_count(&n); rc != C.MPI_SUCCESS {
		w.broken = fmt.Errorf("%v: counting the finished ranks: %w", callFinish, mpiError(rc))
		return 0, w.broken
	}
	return int(n), nil
}

// start checks that a call of n elements can be made and counts it. A refusal for length is
// the same on every rank that passes the same length, so it counts no call.
func (w *World) start(c call, n int) error {
	if w.finalized {
		return fmt.Errorf("%w: %v after Finalize", ErrFinalized, c)
	}
	if w.broken != nil {
		return fmt.Errorf("%w: %v: %w", ErrBroken, c, w.broken)
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("%w: %v of %d elements: one MPI call carries at most %d; split the buffer",
			ErrArgument, c, n, math.MaxInt32)
	}
	w.seq++
	return nil
}

// grow returns the scratch space, at least n bytes of C memory (outside Go's heap, so MPI may
// hold it across calls). A failure to grow counts as a broken World: the call was counted and
// the other ranks are in it.
func (w *World) grow(n int) (unsafe.Pointer, error) {
	if n <= w.scratchLen {
		return w.scratch, nil
	}
	if w.scratch != nil {
		C.free(w.scratch)
	}
	w.scratch, w.scratchLen = C.malloc(C.size_t(n)), n
	if w.scratch == nil {
		w.scratchLen = 0
		w.broken = fmt.Errorf("mpi: out of memory allocating %d bytes of scratch", n)
		return nil, w.broken
	}
	return w.scratch, nil
}

// pinned pins the Go memory at p until unpinAfter, so MPI may hold it across calls. An empty
// buffer is passed as NULL.
func (w *World) pinned(p unsafe.Pointer, n int) unsafe.Pointer {
	if n == 0 || p == nil {
		return nil
	}
	w.pin.Pin(p)
	return p
}

// unpinAfter unpins the caller's buffers once a call has completed. After a stall MPI still
// holds them, so they stay pinned: the job is going to be aborted.
func (w *World) unpinAfter(err error) error {
	if w.broken == nil {
		w.pin.Unpin()
	}
	return err
}

// The polling of wait: slices of back-to-back polls between checks while spinning; after
// Config.Spin, naps doubling up to maxNap, each followed by a napSlice of polls.
const (
	pollSlice = time.Millisecond
	napSlice  = 100 * time.Microsecond
	maxNap    = time.Millisecond
)

// wait polls the collective started with return code rc until it completes, ctx ends, the
// deadline passes, or another rank says it gave up. Any failure breaks the World.
func (w *World) wait(ctx context.Context, c call, seq uint64, rc C.int) error {
	if rc != C.MPI_SUCCESS {
		w.broken = fmt.Errorf("%v #%d: %w", c, seq, mpiError(rc))
		return w.broken
	}
	begin := time.Now()
	var deadline time.Time
	if w.cfg.Timeout > 0 {
		deadline = begin.Add(w.cfg.Timeout)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	// Poll back to back (yielding the CPU between polls) for Config.Spin, coming up every
	// pollSlice to check the context, the deadline and the other ranks' messages; then sleep
	// between shorter polls. A collective moves its data only while MPI is polled on every
	// rank, so a rank that sleeps slows the others down: sleeping is for long waits.
	spinEnd := begin.Add(w.cfg.Spin)
	nap := 50 * time.Microsecond
	var done C.int
	for {
		slice := pollSlice
		if left := time.Until(spinEnd); left <= 0 {
			time.Sleep(nap)
			nap = min(2*nap, maxNap)
			slice = napSlice
		} else if left < slice {
			slice = left
		}
		if c == callFinish {
			rc = C.tmpi_fin_test_for(C.double(slice.Seconds()), &done)
		} else {
			rc = C.tmpi_test_for(&w.req, C.double(slice.Seconds()), &done)
		}
		if rc != C.MPI_SUCCESS || done != 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return w.stall(c, seq, begin, err, nil)
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return w.stall(c, seq, begin, context.DeadlineExceeded, nil)
		}
		if s, ok, err := pollAsk(); err != nil {
			w.broken = fmt.Errorf("%v #%d: polling control messages: %w", c, seq, err)
			return w.broken
		} else if ok {
			return w.stall(c, seq, begin, &GaveUpError{s}, &s)
		}
	}
	if rc != C.MPI_SUCCESS {
		w.broken = fmt.Errorf("%v #%d: %w", c, seq, mpiError(rc))
		return w.broken
	}
	return nil
}

// stall tells every other rank that this one gave up on call c, listens for up to Config.Grace
// for where the others are, and breaks the World with the resulting *StallError.
func (w *World) stall(c call, seq uint64, begin time.Time, cause error, first *RankState) error {
	e := &StallError{Op: c.String(), Seq: seq, Rank: w.rank, Size: w.size, Cause: cause,
		Waited: time.Since(begin)}
	heard := make(map[int]RankState)
	if first != nil {
		heard[first.Rank] = *first
	}
	msg := [3]C.int64_t{C.int64_t(w.rank), C.int64_t(seq), C.int64_t(c)}
	if rc := C.tmpi_ask(&msg[0]); rc == C.MPI_SUCCESS {
		end := time.Now().Add(w.cfg.Grace)
		for len(heard) < w.size-1 && time.Now().Before(end) {
			s, ok, err := pollAsk()
			if err != nil {
				break
			}
			if !ok {
				time.Sleep(time.Millisecond)
				continue
			}
			heard[s.Rank] = s
		}
	}
	for r := range w.size {
		if r == w.rank {
			continue
		}
		if s, ok := heard[r]; ok {
			e.Others = append(e.Others, s)
		} else {
			e.Missing = append(e.Missing, r)
		}
	}
	w.broken = e
	return e
}

// pollAsk receives one pending "gave up" message, if any.
func pollAsk() (RankState, bool, error) {
	var msg [3]C.int64_t
	var got C.int
	if rc := C.tmpi_poll_ask(&msg[0], &got); rc != C.MPI_SUCCESS {
		return RankState{}, false, mpiError(rc)
	}
	if got == 0 {
		return RankState{}, false, nil
	}
	return RankState{Rank: int(msg[0]), Seq: uint64(msg[1]), Op: call(msg[2]).String()}, true, nil
}

// allReduceBlockingFloat32 is a plain blocking MPI_Allreduce (sum) of float32: the benchmarks'
// baseline for the polled float64 path. It bypasses the call checks.
func (w *World) allReduceBlockingFloat32(buf []float32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pin.Pin(unsafe.SliceData(buf))
	defer w.pin.Unpin()
	if rc := C.tmpi_allreduce_f32_blocking((*C.float)(unsafe.SliceData(buf)), C.int(len(buf))); rc != C.MPI_SUCCESS {
		return mpiError(rc)
	}
	return nil
}

// mpiError is MPI's message for a return code.
func mpiError(rc C.int) error {
	var s [512]C.char
	C.tmpi_error_string(rc, &s[0], C.int(len(s)))
	return fmt.Errorf("%w: %s (code %d)", ErrMPI, C.GoString(&s[0]), int(rc))
}

// Package cuda is towerrl's narrow binding to an NVIDIA GPU: the CUDA driver API and cuBLAS,
// both loaded at run time with dlopen, and the few kernels the CUDA tower needs, compiled to
// PTX for sm_90 (Hopper) by nvcc and embedded. It is compiled only with the build tag
// towerrl_cuda; without it the package holds nothing but this documentation.
//
// Why not gorgonia.org/cu: its package init calls cuInit and exits the process when that
// fails (a machine without a GPU dies before main), it links libcuda and libcublas at build
// time (CUDA 11.8's cuBLAS here, 561 MB with cuBLASLt, is not on the H200, which has CUDA 13's
// libcublas.so.13), and it does not compile against CUDA 13's headers (cuCtxCreate is
// cuCtxCreate_v4 there). Why not the build tag cuda: gorgonia.org/gorgonia turns its own CUDA
// engine on under that tag, which needs cuDNN's headers and library (gorgonia.org/cu/dnn), so
// no binary that trains (every one imports gorgonia) builds with it here. docs/GPU.md says
// more.
//
// Nothing is linked: [Open] loads libcuda.so.1 (the driver's) and libcublas (libcublas.so.13,
// .12 or .11, from LD_LIBRARY_PATH or the system), and a machine without them gets an error
// that names the library, never a crash at start-up. Every call makes the context current on
// the calling thread inside the same cgo call, so callers need not lock OS threads. A
// [Context] is safe for concurrent use; all work goes to the legacy default stream and the
// copies are synchronous, so each caller's sequence of calls runs in order and two callers'
// (two towers on one GPU) run one after the other, interleaved. A [BLAS] handle belongs to
// one goroutine at a time.
package cuda

// Package device names the places a float32 buffer can live (the host CPU,
// a CUDA GPU) and the tensors placed on them.
//
// A [Device] is opened by name with [Open] ("cpu", "cuda", "cuda:1") or
// directly with [CPU] and [CUDA]. Devices register their kind with [Register]
// at init; a duplicate kind panics. The CPU is always available. CUDA support
// is compiled in only with the build tag towerrl_cuda (not cuda, under which
// gorgonia builds its own CUDA engine and needs cuDNN); without it [CUDA] and
// Open("cuda") return an error wrapping [ErrNoCUDA] that names the tag. With
// it nothing is linked: the driver (libcuda.so.1) and cuBLAS are loaded when a
// GPU is first opened, and a machine without them gets an error naming them.
//
// A [Tensor] is a named, shaped float32 buffer tagged with its device. The
// usual way to get one is [Device.Mirror]: a device tensor that mirrors a
// host slice. On the CPU the tensor is the host slice itself (zero copy) and
// [Device.Sync] does nothing; on a GPU the tensor owns device memory and Sync
// copies the host slice into it. [CheckDevice] verifies that tensors live
// where the caller expects and names the first one that does not.
//
// Lifecycle: open a device, mirror buffers, Sync after each host write, and
// Close the device when done (closing the CPU does nothing). A tensor must not
// be used after its device is closed.
//
// Threading: devices and the registry are safe for concurrent use. A Tensor
// is a value with no lock: it may be read from many goroutines, but Sync on a
// tensor must not run concurrently with readers of that tensor's memory.
//
// Ownership: a CPU tensor aliases the host slice given to Mirror; the caller
// keeps owning that slice and must keep it alive and unresized while the
// tensor is in use. Device memory belongs to the device that allocated it.
package device

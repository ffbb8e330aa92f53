// Package batcher collects experience: W worker goroutines, each owning a vectorised environment
// of M envs and an ONNX policy session, write trajectories into preallocated columnar buffers.
// Policies are hot-swapped between steps without pausing collection. It computes no gradients.
package batcher

// Package cudatower is a learner tower on an NVIDIA GPU: the forward and backward passes of
// towerrl's own MLPs (package models: separate or shared trunks, tanh or ReLU, categorical or
// Gaussian heads) run on the GPU through cuBLAS and two kernels (package internal/cuda), and
// the algorithm's loss over the heads' outputs runs on the CPU, as the CPU tower's does: the
// same algo.Loss on a small gorgonia graph whose inputs are the heads.
//
// One Grad, for a tower of R rows: the shared parameters (the flat vector the optimiser
// updates on the host) and the R observations are copied to the GPU; each layer is one
// matrix product (cuBLAS, float32, no TF32) and one bias-and-activation kernel; the heads'
// outputs (R × (actions + 1) values) come back; the loss runs on the CPU and gives its
// gradient with respect to the heads, which goes back to the GPU; each layer's backward pass
// is an activation-derivative kernel and three products (weight gradient, bias gradient as a
// product with a vector of ones, input gradient); the flat gradient comes back into the
// caller's buffer. The Gaussian head's log standard deviation, a parameter the network does
// not touch, gets its gradient from the loss on the CPU.
//
// Build: the GPU code is compiled only with the build tag towerrl_cuda (not cuda: under that
// tag gorgonia builds its own CUDA engine, which needs cuDNN). Without it [New] and the
// factory of [Towers] return an error wrapping device.ErrNoCUDA. With it, nothing CUDA is
// linked: the driver and cuBLAS are loaded when a CUDA device is opened (device.CUDA).
//
// Threading: a tower belongs to one goroutine at a time, as learner.Tower requires. Towers on
// one GPU share its primary context and issue their work on the default stream.
package cudatower

// Package kernels holds the float32 compute kernels of the policy graphs: a matrix product with
// optional transposes and a fused bias and activation (or, GemmActGrad, times an activation's
// derivative), the activation's derivative, column sums, Adam's update and the block square
// sums of a gradient's norm; the products' precision (SetPrecision: float32, or bfloat16 on
// Intel AMX); and, for the losses' float64 maths, Go's math.Exp and the two-logit categorical
// head (its math.Exp and math.Log1p) eight rows at a time, bit for bit as Go computes them
// (GoExp, Categorical2), and the same head's sampling with its float32 exp (Categorical2Sample);
// and the batcher's hottest env, CartPole-v1's step, eight envs at a time (CartPole.Step), bit
// for bit as envs' Go loop.
//
// # Two implementations
//
// On amd64 with cgo, the kernels are C compiled by cgo in this package, one copy per
// instruction set (SSE2, AVX2+FMA, AVX-512), chosen once at start-up from what the CPU
// supports; no build flag ties the binary to a CPU. Everywhere else (other architectures,
// CGO_ENABLED=0), and on amd64 when the build is tagged purego, they are plain Go loops
// (generic.go): the same contracts, slower. The build constraint is
// `amd64 && cgo && !purego` for the C kernels (native.go, kernels.c) and its negation for the
// Go ones (purego.go), so `go test -tags purego` rules a C kernel bug in or out in one command.
// Level names the implementation in use. The tests run every implementation the build and CPU
// have (the Go loops always among them) against the same float64 references.
//
// Products, sums and tanh agree between the implementations to float32 rounding (the order of
// the additions differs, and tanh is the same rational approximation in both). Adam gives the
// same bits in every implementation: element by element in float32, no fused multiply-adds; so
// do SquareSums (float64 sums of exact squares in a fixed order). Within one implementation,
// GemmActGrad gives the bits of Gemm followed by ActGrad.
//
// # Use
//
// Matrices are row-major []float32 with explicit leading dimensions. The functions keep no
// state and allocate no Go memory (the C matrix product packs a transposed right operand into
// a C scratch buffer), so they are safe for concurrent use on disjoint outputs. Shapes are the
// caller's contract: a slice too short for its shape panics with a message naming it, before
// any kernel runs.
package kernels

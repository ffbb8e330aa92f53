package kernels

import (
	"fmt"
	"sync/atomic"
)

// Precision is what the matrix products (Gemm, GemmActGrad, Linear) may round their operands
// to, for the whole process, as PyTorch's torch.set_float32_matmul_precision sets it for
// PyTorch's: a permission the CPU may not be able to use.
type Precision int32

const (
	// Float32 products: every operand as it is, every product and sum in float32 (the default).
	Float32 Precision = iota
	// BF16 products: where the CPU has a bfloat16 matrix unit (Intel AMX: AMX-BF16 with
	// AVX512-BF16, granted by the OS), each element of A and B is rounded to bfloat16 (8
	// significant bits; round to nearest even, subnormals read as zero) and the products are
	// summed in float32 by the tile unit, for products of at least 16 rows, 16 columns and a
	// reduction of 32 (smaller ones, and every product on another CPU, stay Float32). The
	// bias, the activation or its derivative, and everything outside the products stay
	// float32.
	BF16
)

func (p Precision) String() string {
	switch p {
	case Float32:
		return "float32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", int32(p))
}

// ParsePrecision reads a precision's name, as String writes it.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "float32", "":
		return Float32, nil
	case "bf16":
		return BF16, nil
	}
	return Float32, fmt.Errorf("kernels: unknown matrix-product precision %q (float32 or bf16)", s)
}

var precision atomic.Int32

// SetPrecision sets the products' precision for the whole process (safe for concurrent use,
// but a product running while it changes may use either). It returns whether the CPU will use
// it: false for BF16 on a CPU or OS without a bfloat16 matrix unit, whose products then stay
// Float32.
func SetPrecision(p Precision) bool {
	if p != Float32 && p != BF16 {
		panic(fmt.Sprintf("kernels: SetPrecision(%d)", int32(p)))
	}
	precision.Store(int32(p))
	return p == Float32 || HasBF16()
}

// GetPrecision is the precision SetPrecision last set (Float32 until then).
func GetPrecision() Precision { return Precision(precision.Load()) }

// bf16Product is whether a product of this shape runs in bfloat16.
func bf16Product(m, n, k int) bool {
	return Precision(precision.Load()) == BF16 && m >= 16 && n >= 16 && k >= 32 && HasBF16()
}

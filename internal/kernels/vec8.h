// Eight-lane vector types of the same-bits kernels (cartpole.c, sample2.c): eight float64 or
// int64 values (one AVX-512 register), eight float32 or int32 values (one AVX register). The
// includer turns floating-point contraction off around its code (#pragma GCC optimize
// "fp-contract=off"): Go never fuses a multiply and an add on amd64.
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef double vd8 __attribute__((vector_size(64)));
typedef int64_t vl8 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

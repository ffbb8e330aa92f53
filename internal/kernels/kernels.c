//go:build amd64 && cgo && !purego

// float32 kernels for package kernels: one copy per instruction set (impl.h), chosen at run
// time by the level the Go side passes (see cpuLevel). No -march flags: each copy carries its
// own target attribute, so the object runs on any x86-64 CPU.

#include <immintrin.h>
#include <stdlib.h>

#include "kernels.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

// KC is the block of the reduction dimension whose panel of B stays in cache.
#define KC 256

// TANH_HI bounds tanh's argument: beyond it the approximation below is exactly ±1 in float32.
#define TANH_HI 7.90531110763549805f

// TANH_RATIONAL sets out to tanh(x) for x already clamped to [-TANH_HI, TANH_HI]: the rational
// approximation of Eigen's ptanh_float. T is float or one of impl.h's vector types (GCC vector
// arithmetic takes scalar operands), so the scalar and vector forms share these coefficients and
// this order of operations, and give the same results.
#define TANH_RATIONAL(T, x, out)                                              \
	do {                                                                  \
		T x2_ = (x) * (x);                                            \
		T p_ = x2_ * -2.76076847742355e-16f + 2.00018790482477e-13f;  \
		p_ = x2_ * p_ + -8.60467152213735e-11f;                       \
		p_ = x2_ * p_ + 5.12229709037114e-08f;                        \
		p_ = x2_ * p_ + 1.48572235717979e-05f;                        \
		p_ = x2_ * p_ + 6.37261928875436e-04f;                        \
		p_ = x2_ * p_ + 4.89352455891786e-03f;                        \
		p_ = (x) * p_;                                                \
		T q_ = x2_ * 1.19825839466702e-06f + 1.18534705686654e-04f;   \
		q_ = x2_ * q_ + 2.26843463243900e-03f;                        \
		q_ = x2_ * q_ + 4.89352518554385e-03f;                        \
		(out) = p_ / q_;                                              \
	} while (0)

// tanh_s is the scalar form of impl.h's vector tanh.
static inline float tanh_s(float x) {
	x = x > TANH_HI ? TANH_HI : x;
	x = x < -TANH_HI ? -TANH_HI : x;
	float y;
	TANH_RATIONAL(float, x, y);
	return y;
}

static inline float act_s(float x, int act) {
	switch (act) {
	case ACT_TANH:
		return tanh_s(x);
	case ACT_RELU:
		return x > 0 ? x : 0;
	default:
		return x;
	}
}

// ref_gemm is the plain triple loop with general strides: A[i][p] = a[i·rsa + p·csa],
// B[p][j] = b[p·rsb + j·csb], C[i][j] = c[i·rsc + j·csc]. The kernels use it for edges.
static void ref_gemm(long m, long n, long k, const float *a, long rsa, long csa, const float *b,
		     long rsb, long csb, float *c, long rsc, long csc, int acc, const float *bias,
		     int act) {
	for (long i = 0; i < m; i++)
		for (long j = 0; j < n; j++) {
			float s = 0;
			for (long p = 0; p < k; p++)
				s += a[i * rsa + p * csa] * b[p * rsb + j * csb];
			float *cp = c + i * rsc + j * csc;
			if (acc)
				s += *cp;
			if (bias)
				s += bias[j];
			*cp = act_s(s, act);
		}
}

#define SFX sse2
#define TGT
#define VL 4
#define NV 2
#define MR 4
#define VSQRT(x) ((V)_mm_sqrt_ps((__m128)(x)))
#include "impl.h"
#undef VSQRT
#undef SFX
#undef TGT
#undef VL
#undef NV
#undef MR

#define SFX avx2
#define TGT __attribute__((target("avx2,fma")))
#define VL 8
#define NV 2
#define MR 6
#define VSQRT(x) ((V)_mm256_sqrt_ps((__m256)(x)))
#include "impl.h"
#undef VSQRT
#undef SFX
#undef TGT
#undef VL
#undef NV
#undef MR

#define SFX avx512
#define TGT __attribute__((target("avx512f,avx2,fma")))
#define VL 16
#define NV 4
#define MR 6
#define VSQRT(x) ((V)_mm512_sqrt_ps((__m512)(x)))
#include "impl.h"
#undef VSQRT
#undef SFX
#undef TGT
#undef VL
#undef NV
#undef MR

int twk_cpu_level(void) {
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
		return LEVEL_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return LEVEL_AVX2;
	return LEVEL_SSE2;
}

int twk_gemm(int level, int ta, int tb, long m, long n, long k, const float *a, long lda,
	     const float *b, long ldb, float *c, long ldc, int acc, const float *bias, int act,
	     const float *y, long ldy) {
	switch (level) {
	case LEVEL_AVX512:
		return gemm_avx512(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, y, ldy);
	case LEVEL_AVX2:
		return gemm_avx2(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, y, ldy);
	case LEVEL_SSE2:
		return gemm_sse2(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act, y, ldy);
	default:
		ref_gemm(m, n, k, a, ta ? 1 : lda, ta ? lda : 1, b, tb ? 1 : ldb, tb ? ldb : 1, c,
			 ldc, 1, acc, bias, y ? ACT_NONE : act);
		if (y) // the derivative as twk_act_grad gives it at this level
			act_grad_rows_sse2(m, n, c, ldc, y, ldy, act);
		return 0;
	}
}

void twk_act_grad(int level, long n, const float *y, const float *dy, float *dz, int act) {
	switch (level) {
	case LEVEL_AVX512:
		act_grad_avx512(n, y, dy, dz, act);
		return;
	case LEVEL_AVX2:
		act_grad_avx2(n, y, dy, dz, act);
		return;
	default:
		act_grad_sse2(n, y, dy, dz, act);
		return;
	}
}

void twk_col_sum(int level, long m, long n, const float *a, float *dst, int acc) {
	switch (level) {
	case LEVEL_AVX512:
		col_sum_avx512(m, n, a, dst, acc);
		return;
	case LEVEL_AVX2:
		col_sum_avx2(m, n, a, dst, acc);
		return;
	default:
		col_sum_sse2(m, n, a, dst, acc);
		return;
	}
}

void twk_adam(int level, long n, float *p, const float *g, float *m, float *v, float b1, float b2,
	      float c1, float c2, float step, float sbc2, float eps) {
	switch (level) {
	case LEVEL_AVX512:
		adam_avx512(n, p, g, m, v, b1, b2, c1, c2, step, sbc2, eps);
		return;
	case LEVEL_AVX2:
		adam_avx2(n, p, g, m, v, b1, b2, c1, c2, step, sbc2, eps);
		return;
	default:
		adam_sse2(n, p, g, m, v, b1, b2, c1, c2, step, sbc2, eps);
		return;
	}
}

void twk_axpy(int level, long n, float w, const float *x, float *y) {
	switch (level) {
	case LEVEL_AVX512:
		axpy_avx512(n, w, x, y);
		return;
	case LEVEL_AVX2:
		axpy_avx2(n, w, x, y);
		return;
	default:
		axpy_sse2(n, w, x, y);
		return;
	}
}

void twk_square_sums(int level, long n, const float *g, long block, double *sums) {
	switch (level) {
	case LEVEL_AVX512:
		square_sums_avx512(n, g, block, sums);
		return;
	case LEVEL_AVX2:
		square_sums_avx2(n, g, block, sums);
		return;
	default:
		square_sums_sse2(n, g, block, sums);
		return;
	}
}

#include "amx.h"

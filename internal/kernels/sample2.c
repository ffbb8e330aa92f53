//go:build amd64 && cgo && !purego

// models/head's two-logit categorical sampling (sampleBinary: expShifted's float32 exp,
// logsOnePlus's log and binaryRows' draw) eight rows at a time with AVX-512, bit for bit as Go
// computes it on amd64: every float32 operation rounded to float32 and every float64 one to
// float64, in Go's order, with no fused multiply-adds (Go compiles none for GOAMD64=v1), and
// the draw's choices made with the same integer operations on the same bits.

#include "vec8.h"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

#define S2_TGT __attribute__((target("avx512f,avx512dq,avx512vl,avx2")))

typedef uint32_t vu8 __attribute__((vector_size(32)));
typedef uint64_t vq8 __attribute__((vector_size(64)));

// binary8 is sampleBinary on eight rows whose logits l0, l1 are finite, with uniform numbers
// u: the actions into *act, the log-probabilities into *lp.
static inline S2_TGT void binary8(vf8 l0, vf8 l1, vd8 u, vi8 *act, vf8 *lp) {
	// neg = −max(l₁ − l₀, l₀ − l₁): −|l₁ − l₀| for finite logits, −0 for equal ones.
	vf8 d = l1 - l0;
	vf8 v = (vf8)((vu8)d | 0x80000000u);
	v = v - 0.0f; // expShifted's v −= m, m = 0
	// expShifted (Cephes' expf) on v ≤ 0.
	vi8 n = __builtin_convertvector(v * 1.44269504088896341f - 0.5f, vi8); // truncation
	vf8 f = __builtin_convertvector(n, vf8);
	vf8 r = v - f * 0.693359375f - f * -2.12194440e-4f;
	vf8 p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
		 1.6666665459e-1f) * r + 5.0000001201e-1f;
	vf8 y = (p * r * r + r + 1.0f) * (vf8)((vu8)(n + 127) << 23);
	vi8 live = v >= -87.33654f;
	vf8 e = (vf8)((vi8)y & live);
	// logsOnePlus: logSeries(logReduce(1 + e)).
	vd8 e64 = __builtin_convertvector(e, vd8);
	vd8 sum = 1.0 + e64;
	vq8 b = (vq8)sum;
	const uint64_t mant = (1ULL << 52) - 1;
	vq8 up = ((b & mant) - 0x6a09e667f3bcdULL) >> 63 ^ 1;
	vl8 k = (vl8)(b >> 52) - 1023 + (vl8)up;
	vd8 fr = (vd8)((b & mant) | (1023 - up) << 52);
	vd8 s = (fr - 1.0) / (fr + 1.0);
	vd8 s2 = s * s;
	vd8 dk = (vd8)_mm512_cvtepi64_pd((__m512i)k);
	vd8 lg = dk * 0.693147180559945309417232121458176568 +
		 2.0 * s * (1.0 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9)))));
	// binaryRows.
	vu8 km = (vu8)(l0 - l1) >> 31;
	vu8 sel = -km;
	vu8 xb = (vu8)e, one = (vu8){0} + 0x3f800000u;
	vf8 e0 = (vf8)(one ^ ((one ^ xb) & sel));
	vu8 e1b = xb ^ ((xb ^ one) & sel);
	vq8 tb = (vq8)(u * sum), e0b = (vq8)__builtin_convertvector(e0, vd8);
	vu8 hi = __builtin_convertvector((e0b - tb - 1) >> 63, vu8);
	vu8 a = hi & (-e1b >> 31);
	*act = (vi8)a;
	vd8 l064 = __builtin_convertvector(l0, vd8), l164 = __builtin_convertvector(l1, vd8);
	vq8 negd = (vq8)(l164 - l064) | 0x8000000000000000ULL;
	vq8 flip = __builtin_convertvector(a ^ km, vq8);
	vd8 off = (vd8)(negd & -flip);
	*lp = __builtin_convertvector(off - lg, vf8);
}

// all_finite is whether the n floats of x are all finite.
static inline S2_TGT int all_finite(const float *x, long n) {
	uint32_t bad = 0;
	for (long i = 0; i < n; i++) {
		uint32_t b;
		memcpy(&b, x + i, 4);
		bad |= (b & 0x7f800000u) == 0x7f800000u;
	}
	return !bad;
}

// twk_sample2 is models/head's sampleBinary over rows rows of two logits with given uniform
// numbers u, chunk rows at a time: it draws each chunk whose logits are all finite, actions
// into acts and (logp not NULL) log-probabilities into logp, and stops at the first chunk
// holding a logit ±Inf or NaN, writing nothing of it. It returns the rows drawn.
S2_TGT long twk_sample2(long rows, long chunk, const float *logits, const double *u, int *acts, float *logp) {
	for (long c = 0; c < rows; c += chunk) {
		long cn = rows - c < chunk ? rows - c : chunk;
		if (!all_finite(logits + 2 * c, 2 * cn))
			return c;
		for (long i = c; i < c + cn; i += 8) {
			long nr = c + cn - i < 8 ? c + cn - i : 8;
			vf8 l0 = {0}, l1 = {0};
			vd8 uv = {0};
			if (nr == 8) {
				__m512 lg = _mm512_loadu_ps(logits + 2 * i);
				__m512 de = _mm512_permutexvar_ps(
				    _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), lg);
				l0 = (vf8)_mm512_castps512_ps256(de);
				l1 = (vf8)_mm512_extractf32x8_ps(de, 1);
				memcpy(&uv, u + i, sizeof uv);
			} else {
				for (long l = 0; l < nr; l++) {
					l0[l] = logits[2 * (i + l)];
					l1[l] = logits[2 * (i + l) + 1];
					uv[l] = u[i + l];
				}
			}
			vi8 a;
			vf8 lp;
			binary8(l0, l1, uv, &a, &lp);
			memcpy(acts + i, &a, 4 * nr);
			if (logp)
				memcpy(logp + i, &lp, 4 * nr);
		}
	}
	return rows;
}

#pragma GCC pop_options

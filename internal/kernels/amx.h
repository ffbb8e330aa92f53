// The bfloat16 matrix product on Intel AMX (twk_gemm_bf16): C = op(A)·op(B) with every
// element of A and B rounded to bfloat16 (round to nearest even; subnormals read as zero, as
// VCVTNEPS2BF16 does), the products summed in float32 by the tile unit, then the epilogue of
// the float32 kernels (acc, bias, act, or the derivative act'(Y)) in float32 with the AVX-512
// helpers of impl.h. kernels.c includes this file after impl.h's AVX-512 copy.
//
// The operands are packed into the tile unit's layouts: op(A) as bf16 rows [mp][kp] (k
// contiguous; 32 rows at a time just before their use, or all at once when op(A) = Aᵀ, which
// bf16_cols converts and transposes in registers), op(B) as pairs of k rows interleaved
// [kp/2][np][2] (the "VNNI" layout; op(B) = Bᵀ through B's converted rows, transposed as 32-bit
// pairs by tr32), all padded with zeros to whole tiles (mp, np multiples of 16, kp of 32).

#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TGT __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16,avx2,fma")))
#define AMX_INLINE static inline __attribute__((always_inline)) AMX_TGT

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

// twk_amx_init is 1 when the CPU has AMX-BF16, AMX-TILE and AVX512-BF16, the OS saves the
// tile state (XCR0 bits 17 and 18) and granted this process the tile data; 0 otherwise.
int twk_amx_init(void) {
	unsigned a, b, c, d;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
	if (a < 7)
		return 0;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
	int amx = (d >> 22 & 1) && (d >> 24 & 1) && (b >> 16 & 1) && (b >> 30 & 1); // AMX-BF16, AMX-TILE, AVX512F, AVX512BW
	unsigned max1 = a;
	if (!amx || max1 < 1)
		return 0;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
	if (!(a >> 5 & 1)) // AVX512-BF16
		return 0;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	if (!(c >> 27 & 1)) // OSXSAVE
		return 0;
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & 0x600e6) != 0x600e6) // SSE, AVX, opmask, ZMM, tile config and data
		return 0;
	return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct {
	unsigned char palette, start;
	unsigned char reserved[14];
	unsigned short colsb[16];
	unsigned char rows[16];
} amx_cfg;

// bf16_rows writes rows [0, rows) of the float32 matrix src (rows ld apart, cols values) as
// bf16 into dst [rowsp][colsp] (colsp a multiple of 32; rows dld words apart), zero-padded to
// colsp columns and rowsp rows.
static AMX_TGT void bf16_rows(long rows, long cols, const float *src, long ld, unsigned short *dst,
			      long rowsp, long colsp, long dld) {
	for (long r = 0; r < rows; r++) {
		const float *s = src + r * ld;
		unsigned short *o = dst + r * dld;
		for (long p = 0; p < colsp; p += 32) {
			long left = cols - p;
			__mmask16 m0 = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
			__mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
			__m512 x0 = _mm512_maskz_loadu_ps(m0, s + p);
			__m512 x1 = _mm512_maskz_loadu_ps(m1, s + p + 16);
			_mm512_storeu_si512(o + p, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
		}
	}
	for (long r = rows; r < rowsp; r++)
		__builtin_memset(dst + r * dld, 0, colsp * 2);
}

// bf16_pairs writes the float32 matrix src [k][n] (rows ld apart) as bf16 pairs of rows,
// dst [kp/2][np][2]: dst[q][j] = (src[2q][j], src[2q+1][j]), zero-padded to kp rows (a
// multiple of 32) and np columns (a multiple of 16).
static AMX_TGT void bf16_pairs(long k, long n, const float *src, long ld, unsigned short *dst,
			       long kp, long np) {
	const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
					    39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
	const __m512i hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24,
					    55, 23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
	for (long q = 0; q < kp / 2; q++) {
		long p = 2 * q;
		const float *s0 = src + p * ld, *s1 = s0 + ld;
		unsigned short *o = dst + q * np * 2;
		for (long j = 0; j < np; j += 32) {
			long left = n - j;
			__mmask16 m0 = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
			__mmask16 m1 = left >= 32 ? 0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
			__m512 a0 = p < k ? _mm512_maskz_loadu_ps(m0, s0 + j) : _mm512_setzero_ps();
			__m512 a1 = p < k ? _mm512_maskz_loadu_ps(m1, s0 + j + 16) : _mm512_setzero_ps();
			__m512 b0 = p + 1 < k ? _mm512_maskz_loadu_ps(m0, s1 + j) : _mm512_setzero_ps();
			__m512 b1 = p + 1 < k ? _mm512_maskz_loadu_ps(m1, s1 + j + 16) : _mm512_setzero_ps();
			// words 0-31: row p's 32 columns; 32-63: row p+1's.
			__m512i r0 = (__m512i)_mm512_cvtne2ps_pbh(a1, a0);
			__m512i r1 = (__m512i)_mm512_cvtne2ps_pbh(b1, b0);
			_mm512_storeu_si512(o + 2 * j, _mm512_permutex2var_epi16(r0, lo, r1));
			if (j + 16 < np)
				_mm512_storeu_si512(o + 2 * j + 32, _mm512_permutex2var_epi16(r0, hi, r1));
		}
	}
}

// tr16 transposes the 16×16 matrix of 32-bit values in r (r[i] is row i) in place.
AMX_INLINE void tr16(__m512i r[16]) {
	__m512i t[16];
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	// r[4g + s], 128-bit lane L: column 4L + s of rows 4g … 4g+3.
	for (int g = 0; g < 16; g += 4) {
		r[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
		r[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
		r[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
		r[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
	}
	// t[s] (s < 4): columns s, 8+s of rows 0-7; t[4+s]: columns 4+s, 12+s; t[8+s] and
	// t[12+s] the same of rows 8-15.
	for (int s = 0; s < 4; s++) {
		t[s] = _mm512_shuffle_i32x4(r[s], r[4 + s], 0x88);
		t[4 + s] = _mm512_shuffle_i32x4(r[s], r[4 + s], 0xdd);
		t[8 + s] = _mm512_shuffle_i32x4(r[8 + s], r[12 + s], 0x88);
		t[12 + s] = _mm512_shuffle_i32x4(r[8 + s], r[12 + s], 0xdd);
	}
	// r[i] is column i.
	for (int s = 0; s < 8; s++) {
		r[s] = _mm512_shuffle_i32x4(t[s], t[8 + s], 0x88);
		r[8 + s] = _mm512_shuffle_i32x4(t[s], t[8 + s], 0xdd);
	}
}

// tr32 transposes the 32-bit matrix src [rows][cols] (rows sld apart) into dst [cols][rows]
// (rows dld apart); rows and cols are multiples of 16.
static AMX_TGT void tr32(long rows, long cols, const unsigned *src, long sld, unsigned *dst, long dld) {
	for (long r0 = 0; r0 < rows; r0 += 16)
		for (long c0 = 0; c0 < cols; c0 += 16) {
			__m512i r[16];
			for (int i = 0; i < 16; i++)
				r[i] = _mm512_loadu_si512(src + (r0 + i) * sld + c0);
			tr16(r);
			for (int i = 0; i < 16; i++)
				_mm512_storeu_si512(dst + (c0 + i) * dld + r0, r[i]);
		}
}

// bf16_cols writes the transpose of the float32 matrix src [k][m] (rows ld apart) as bf16
// rows, dst [mp][kp] (rows dld words apart; mp a multiple of 16, kp of 32), zero-padded: each
// 32×16 block is converted two rows at a time into pairs and transposed as 32-bit pairs in
// registers.
static AMX_TGT void bf16_cols(long k, long m, const float *src, long ld, unsigned short *dst,
			      long mp, long kp, long dld) {
	const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
					    23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	for (long i0 = 0; i0 < mp; i0 += 16) {
		long left = m - i0;
		__mmask16 mk = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
		for (long p0 = 0; p0 < kp; p0 += 32) {
			__m512i r[16];
			for (int t = 0; t < 16; t++) {
				long p = p0 + 2 * t;
				__m512 x0 = p < k ? _mm512_maskz_loadu_ps(mk, src + p * ld + i0) : _mm512_setzero_ps();
				__m512 x1 = p + 1 < k ? _mm512_maskz_loadu_ps(mk, src + (p + 1) * ld + i0) : _mm512_setzero_ps();
				r[t] = _mm512_permutexvar_epi16(il, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
			}
			tr16(r);
			for (int c = 0; c < 16; c++)
				_mm512_storeu_si512(dst + (i0 + c) * dld + p0, r[c]);
		}
	}
}

// amx_epilogue writes rows [0, mr) and columns [0, nc) of the float32 block s (32 columns a
// row) into C with acc, bias and act, or times act'(Y): the float32 kernels' epilogue.
static AMX_TGT void amx_epilogue(long mr, long nc, const float *s, float *c, long ldc, int acc,
				     const float *bias, int act, const float *y, long ldy, int dact) {
	for (long r = 0; r < mr; r++)
		for (long j = 0; j < nc; j += 16) {
			long left = nc - j;
			__mmask16 mk = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
			v_avx512 x = (v_avx512)_mm512_maskz_loadu_ps(mk, s + r * 32 + j);
			float *cp = c + r * ldc + j;
			if (acc)
				x += (v_avx512)_mm512_maskz_loadu_ps(mk, cp);
			if (bias)
				x += (v_avx512)_mm512_maskz_loadu_ps(mk, bias + j);
			if (y)
				x = dact_avx512(x, (v_avx512)_mm512_maskz_loadu_ps(mk, y + r * ldy + j), dact);
			else
				x = act_avx512(x, act);
			_mm512_mask_storeu_ps(cp, mk, (__m512)x);
		}
}

// twk_gemm_bf16 is twk_gemm's contract with A and B rounded to bf16 (see the top of this
// file). It returns 0, or -1 when a scratch allocation failed (C is then untouched).
AMX_TGT int twk_gemm_bf16(int ta, int tb, long m, long n, long k, const float *a, long lda,
			  const float *b, long ldb, float *c, long ldc, int acc, const float *bias,
			  int act, const float *y, long ldy) {
	int dact = y ? act : ACT_NONE;
	if (y)
		act = ACT_NONE;
	long mp = (m + 15) & ~15L, np = (n + 15) & ~15L, kp = (k + 31) & ~31L;
	// op(A)'s bf16 rows are kp + 32 words apart, so that 16 rows are not all a power of two
	// apart (the stores of a transposing pack, and the tile loads, then spread over the L1
	// sets). Without a transpose they are packed 32 rows at a time, just before their use.
	long as = kp + 32;
	long arows = ta ? mp : 32;
	long scratch = tb ? np * kp : 0;
	unsigned short *ab = malloc(2 * (arows * as + kp * np + scratch) + 4 * 32 * 32 + 64);
	if (!ab)
		return -1;
	unsigned short *bb = ab + arows * as, *sc = bb + kp * np;
	float *cs = (float *)(((unsigned long)(sc + scratch) + 63) & ~63UL);
	if (ta) // op(A) = Aᵀ, A [k][m]
		bf16_cols(k, m, a, lda, ab, mp, kp, as);
	if (tb) { // op(B) = Bᵀ, B [n][k]: B's rows, transposed as 32-bit pairs
		bf16_rows(n, k, b, ldb, sc, np, kp, kp);
		tr32(np, kp / 2, (const unsigned *)sc, kp / 2, (unsigned *)bb, np);
	} else {
		bf16_pairs(k, n, b, ldb, bb, kp, np);
	}
	amx_cfg cfg;
	__builtin_memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	for (int t = 0; t < 8; t++) {
		cfg.rows[t] = 16;
		cfg.colsb[t] = 64;
	}
	_tile_loadconfig(&cfg);
	long astride = as * 2, bstride = np * 4;
	for (long i = 0; i < mp; i += 32) {
		int two_i = i + 32 <= mp;
		const unsigned short *ai = ab + i * as;
		if (!ta) {
			bf16_rows(m - i < 32 ? m - i : 32, k, a + i * lda, lda, ab, two_i ? 32 : 16, kp, as);
			ai = ab;
		}
		for (long j = 0; j < np; j += 32) {
			int two_j = j + 32 <= np;
			_tile_zero(0);
			_tile_zero(1);
			_tile_zero(2);
			_tile_zero(3);
			const unsigned short *bj = bb + j * 2;
			for (long p = 0; p < kp; p += 32) {
				_tile_loadd(4, ai + p, astride);
				_tile_loadd(6, bj + p / 2 * np * 2, bstride);
				_tile_dpbf16ps(0, 4, 6);
				if (two_j) {
					_tile_loadd(7, bj + p / 2 * np * 2 + 32, bstride);
					_tile_dpbf16ps(1, 4, 7);
				}
				if (two_i) {
					_tile_loadd(5, ai + 16 * as + p, astride);
					_tile_dpbf16ps(2, 5, 6);
					if (two_j)
						_tile_dpbf16ps(3, 5, 7);
				}
			}
			_tile_stored(0, cs, 128);
			if (two_j)
				_tile_stored(1, cs + 16, 128);
			if (two_i) {
				_tile_stored(2, cs + 16 * 32, 128);
				if (two_j)
					_tile_stored(3, cs + 16 * 32 + 16, 128);
			}
			long mr = m - i < (two_i ? 32 : 16) ? m - i : (two_i ? 32 : 16);
			long nc = n - j < (two_j ? 32 : 16) ? n - j : (two_j ? 32 : 16);
			amx_epilogue(mr, nc, cs, c + i * ldc + j, ldc, acc, bias ? bias + j : NULL, act,
				     y ? y + i * ldy + j : NULL, ldy, dact);
		}
	}
	_tile_release();
	free(ab);
	return 0;
}

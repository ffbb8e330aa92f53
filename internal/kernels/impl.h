// One instruction set's kernels. kernels.c includes this file once per instruction set with
// SFX (the name suffix), TGT (the function attribute selecting the instruction set), VL (float
// lanes per vector), NV (vectors per micro-tile row) and MR (micro-tile rows) defined. The
// vectors are GCC vector extensions, so the same source becomes SSE2, AVX2+FMA or AVX-512 code.

#define V CAT(v_, SFX)
#define VI CAT(vi_, SFX)
typedef float V __attribute__((vector_size(VL * 4)));
typedef int VI __attribute__((vector_size(VL * 4)));

#define INLINE static inline __attribute__((always_inline)) TGT

INLINE V CAT(ld_, SFX)(const float *p) {
	V v;
	__builtin_memcpy(&v, p, sizeof v);
	return v;
}

INLINE void CAT(st_, SFX)(float *p, V v) { __builtin_memcpy(p, &v, sizeof v); }

INLINE V CAT(splat_, SFX)(float f) { return (V){0} + f; }

// select: m ? a : b lane by lane (m all ones or all zeros).
INLINE V CAT(sel_, SFX)(VI m, V a, V b) { return (V)(((VI)a & m) | ((VI)b & ~m)); }

// tanh_v is tanh to about one ulp (the rational approximation of Eigen's ptanh_float, which
// PyTorch's CPU kernels also use). NaN stays NaN.
INLINE V CAT(tanh_, SFX)(V x) {
	const V hi = CAT(splat_, SFX)(TANH_HI);
	x = CAT(sel_, SFX)(x > hi, hi, x);
	x = CAT(sel_, SFX)(x < -hi, -hi, x);
	V y;
	TANH_RATIONAL(V, x, y);
	return y;
}

INLINE V CAT(act_, SFX)(V x, int act) {
	switch (act) {
	case ACT_TANH:
		return CAT(tanh_, SFX)(x);
	case ACT_RELU:
		return CAT(sel_, SFX)(x > 0, x, (V){0});
	default:
		return x;
	}
}

// tile computes one mr×(nv·VL) block of C = A·B over k, where A[r][p] = a[r·rsa + p·csa],
// B[p][j] = b[p·rsb + j] and C[r][j] = c[r·rsc + j·csc]: C is overwritten (acc 0) or added to
// (acc 1), then bias (per column, may be NULL) is added and act applied. mr and nv are
// compile-time constants at every call site, so the accumulators live in registers.
INLINE void CAT(tile_, SFX)(const int mr, const int nv, long k, const float *a, long rsa,
			    long csa, const float *b, long rsb, float *c, long rsc, long csc,
			    int acc, const float *bias, int act) {
	V s[MR][NV];
#pragma GCC unroll 8
	for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++)
			s[r][v] = (V){0};
	for (long p = 0; p < k; p++) {
		V bv[NV];
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++)
			bv[v] = CAT(ld_, SFX)(b + p * rsb + v * VL);
#pragma GCC unroll 8
		for (int r = 0; r < mr; r++) {
			V av = CAT(splat_, SFX)(a[r * rsa + p * csa]);
#pragma GCC unroll 8
			for (int v = 0; v < nv; v++)
				s[r][v] += av * bv[v];
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < mr; r++) {
#pragma GCC unroll 8
		for (int v = 0; v < nv; v++) {
			float *cp = c + r * rsc + (long)v * VL * csc;
			V x = s[r][v];
			if (csc == 1) {
				if (acc)
					x += CAT(ld_, SFX)(cp);
				if (bias)
					x += CAT(ld_, SFX)(bias + v * VL);
				CAT(st_, SFX)(cp, CAT(act_, SFX)(x, act));
			} else {
				for (int l = 0; l < VL; l++) {
					float y = x[l];
					if (acc)
						y += cp[l * csc];
					if (bias)
						y += bias[v * VL + l];
					cp[l * csc] = act_s(y, act);
				}
			}
		}
	}
}

// tiles runs tile over rows [0, m) of one column block of nv vectors, dispatching the row
// remainder to constant-size instances.
INLINE void CAT(tiles_, SFX)(const int nv, long m, long k, const float *a, long rsa, long csa,
			     const float *b, long rsb, float *c, long rsc, long csc, int acc,
			     const float *bias, int act) {
	long i = 0;
	for (; i + MR <= m; i += MR)
		CAT(tile_, SFX)(MR, nv, k, a + i * rsa, rsa, csa, b, rsb, c + i * rsc, rsc, csc, acc, bias, act);
	const float *ai = a + i * rsa;
	float *ci = c + i * rsc;
	switch (m - i) {
#if MR > 7
#error "MR > 7 needs more cases"
#endif
#if MR > 6
	case 6:
		CAT(tile_, SFX)(6, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act);
		break;
#endif
#if MR > 5
	case 5:
		CAT(tile_, SFX)(5, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act);
		break;
#endif
#if MR > 4
	case 4:
		CAT(tile_, SFX)(4, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act);
		break;
#endif
	case 3:
		CAT(tile_, SFX)(3, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act);
		break;
	case 2:
		CAT(tile_, SFX)(2, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act);
		break;
	case 1:
		CAT(tile_, SFX)(1, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act);
		break;
	}
}

// bcast is C = A·B (+C) with the strided A, row-contiguous B and general C of tile, for
// all n columns: whole vectors in tiles, the last n % VL columns by scalar code. Blocks of KC
// along k keep the panel of B in cache.
static TGT void CAT(bcast_, SFX)(long m, long n, long k, const float *a, long rsa, long csa,
				 const float *b, long rsb, float *c, long rsc, long csc, int acc,
				 const float *bias, int act) {
	long nfull = n - n % VL;
	for (long j = 0; j < nfull; j += NV * VL) {
		long nv = (nfull - j) / VL;
		if (nv > NV)
			nv = NV;
		for (long p = 0; p < k; p += KC) {
			long kc = k - p < KC ? k - p : KC;
			int last = p + kc == k;
			int ac = acc || p > 0;
			const float *bi = last && bias ? bias + j : NULL;
			int ai = last ? act : 0;
			const float *ap = a + p * csa;
			const float *bp = b + p * rsb + j;
			float *cp = c + j * csc;
			switch (nv) {
#if NV > 4
#error "NV > 4 needs more cases"
#endif
#if NV > 3
			case 4:
				CAT(tiles_, SFX)(4, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai);
				break;
#endif
#if NV > 2
			case 3:
				CAT(tiles_, SFX)(3, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai);
				break;
#endif
			case 2:
				CAT(tiles_, SFX)(2, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai);
				break;
			default:
				CAT(tiles_, SFX)(1, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai);
				break;
			}
		}
	}
	if (nfull < n)
		ref_gemm(m, n - nfull, k, a, rsa, csa, b + nfull, rsb, 1, c + nfull * csc, rsc, csc, acc,
			 bias ? bias + nfull : NULL, act);
}

// hsum is the sum of v's lanes, by halving.
INLINE float CAT(hsum_, SFX)(V v) {
#if VL == 16
	v += __builtin_shuffle(v, (VI){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
	v += __builtin_shuffle(v, (VI){4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11});
	v += __builtin_shuffle(v, (VI){2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13});
	v += __builtin_shuffle(v, (VI){1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14});
#elif VL == 8
	v += __builtin_shuffle(v, (VI){4, 5, 6, 7, 0, 1, 2, 3});
	v += __builtin_shuffle(v, (VI){2, 3, 0, 1, 6, 7, 4, 5});
	v += __builtin_shuffle(v, (VI){1, 0, 3, 2, 5, 4, 7, 6});
#elif VL == 4
	v += __builtin_shuffle(v, (VI){2, 3, 0, 1});
	v += __builtin_shuffle(v, (VI){1, 0, 3, 2});
#else
#error "unsupported VL"
#endif
	return v[0];
}

// dot is C = A·Bᵀ (+C) for row-contiguous A [m, k] and B [n, k] (C[i][j] = A[i]·B[j]):
// the shape of a layer with few outputs, or of few rows against a transposed B, where vectors
// run along k. Each row of B is reused across all rows of A while it is in cache.
static TGT void CAT(dot_, SFX)(long m, long n, long k, const float *a, long lda, const float *b,
			       long ldb, float *c, long ldc, int acc, const float *bias, int act) {
	long kfull = k - k % VL;
	for (long j = 0; j < n; j++) {
		const float *bj = b + j * ldb;
		for (long i = 0; i < m; i++) {
			const float *ai = a + i * lda;
			V s0 = (V){0}, s1 = (V){0};
			long p = 0;
			for (; p + 2 * VL <= kfull; p += 2 * VL) {
				s0 += CAT(ld_, SFX)(ai + p) * CAT(ld_, SFX)(bj + p);
				s1 += CAT(ld_, SFX)(ai + p + VL) * CAT(ld_, SFX)(bj + p + VL);
			}
			if (p < kfull)
				s0 += CAT(ld_, SFX)(ai + p) * CAT(ld_, SFX)(bj + p);
			float y = CAT(hsum_, SFX)(s0 + s1);
			for (p = kfull; p < k; p++)
				y += ai[p] * bj[p];
			float *cp = c + i * ldc + j;
			if (acc)
				y += *cp;
			if (bias)
				y += bias[j];
			*cp = act_s(y, act);
		}
	}
}

// gemm is C = op(A)·op(B) (+C when acc), then + bias (per column, may be NULL) and act, for
// row-major A, B, C with leading dimensions lda, ldb, ldc. It returns 0, or -1 when a
// scratch allocation failed (C is then untouched).
static TGT int CAT(gemm_, SFX)(int ta, int tb, long m, long n, long k, const float *a, long lda,
			       const float *b, long ldb, float *c, long ldc, int acc,
			       const float *bias, int act) {
	if (m == 0 || n == 0)
		return 0;
	if (k == 0) {
		ref_gemm(m, n, 0, a, 0, 0, b, 0, 1, c, ldc, 1, acc, bias, act);
		return 0;
	}
	long rsa = ta ? 1 : lda, csa = ta ? lda : 1;
	if (n < VL && m >= VL) {
		if (!ta && (tb || (n == 1 && ldb == 1))) {
			// Rows of op(B)ᵀ are rows of B (or B itself when it is one column).
			CAT(dot_, SFX)(m, n, k, a, lda, b, tb ? ldb : k, c, ldc, acc, bias, act);
			return 0;
		}
		if (!ta) {
			float *bt = malloc(sizeof(float) * n * k);
			if (!bt)
				return -1;
			for (long p = 0; p < k; p++)
				for (long j = 0; j < n; j++)
					bt[j * k + p] = b[p * ldb + j];
			CAT(dot_, SFX)(m, n, k, a, lda, bt, k, c, ldc, acc, bias, act);
			free(bt);
			return 0;
		}
		if (!bias && !act) {
			// Cᵀ = op(B)ᵀ·op(A)ᵀ, whose right operand op(A)ᵀ = A has contiguous rows.
			CAT(bcast_, SFX)(n, m, k, b, tb ? ldb : 1, tb ? 1 : ldb, a, lda, c, 1, ldc, acc,
					 NULL, 0);
			return 0;
		}
	}
	if (!tb) {
		CAT(bcast_, SFX)(m, n, k, a, rsa, csa, b, ldb, c, ldc, 1, acc, bias, act);
		return 0;
	}
	if (!ta && m < 4 * MR) {
		// Few rows: packing op(B) would cost more than the product.
		CAT(dot_, SFX)(m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act);
		return 0;
	}
	float *bp = malloc(sizeof(float) * n * k);
	if (!bp)
		return -1;
	for (long j = 0; j < n; j++)
		for (long p = 0; p < k; p++)
			bp[p * n + j] = b[j * ldb + p];
	CAT(bcast_, SFX)(m, n, k, a, rsa, csa, bp, n, c, ldc, 1, acc, bias, act);
	free(bp);
	return 0;
}

// act_grad is dz = dy·act'(y) from the activation's output y.
static TGT void CAT(act_grad_, SFX)(long n, const float *y, const float *dy, float *dz, int act) {
	long i = 0;
	if (act == ACT_TANH) {
		for (; i + VL <= n; i += VL) {
			V yv = CAT(ld_, SFX)(y + i);
			CAT(st_, SFX)(dz + i, CAT(ld_, SFX)(dy + i) * (1.0f - yv * yv));
		}
		for (; i < n; i++)
			dz[i] = dy[i] * (1.0f - y[i] * y[i]);
	} else if (act == ACT_RELU) {
		for (; i + VL <= n; i += VL) {
			V yv = CAT(ld_, SFX)(y + i);
			CAT(st_, SFX)(dz + i, CAT(sel_, SFX)(yv > 0, CAT(ld_, SFX)(dy + i), (V){0}));
		}
		for (; i < n; i++)
			dz[i] = y[i] > 0 ? dy[i] : 0;
	} else {
		for (; i < n; i++)
			dz[i] = dy[i];
	}
}

// col_sum is dst[j] = Σ_i a[i·n + j] (+dst[j] when acc).
static TGT void CAT(col_sum_, SFX)(long m, long n, const float *a, float *dst, int acc) {
	long j = 0;
	for (; j + VL <= n; j += VL) {
		V s0 = acc ? CAT(ld_, SFX)(dst + j) : (V){0}, s1 = (V){0};
		long i = 0;
		for (; i + 2 <= m; i += 2) {
			s0 += CAT(ld_, SFX)(a + i * n + j);
			s1 += CAT(ld_, SFX)(a + (i + 1) * n + j);
		}
		if (i < m)
			s0 += CAT(ld_, SFX)(a + i * n + j);
		CAT(st_, SFX)(dst + j, s0 + s1);
	}
	for (; j < n; j++) {
		float s = acc ? dst[j] : 0;
		for (long i = 0; i < m; i++)
			s += a[i * n + j];
		dst[j] = s;
	}
}

// adam is Adam's update, in exactly the order of learner.Adam's Go loop and without fused
// multiply-adds, so that it gives the Go loop's results bit for bit (float32 sqrt and division
// are correctly rounded in every instruction set).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
static TGT void CAT(adam_, SFX)(long n, float *p, const float *g, float *m, float *v, float b1,
				float b2, float c1, float c2, float step, float sbc2, float eps) {
	long i = 0;
	for (; i + VL <= n; i += VL) {
		V gi = CAT(ld_, SFX)(g + i);
		V mi = b1 * CAT(ld_, SFX)(m + i) + c1 * gi;
		V vi = b2 * CAT(ld_, SFX)(v + i) + c2 * gi * gi;
		CAT(st_, SFX)(m + i, mi);
		CAT(st_, SFX)(v + i, vi);
		CAT(st_, SFX)(p + i, CAT(ld_, SFX)(p + i) - step * mi / (VSQRT(vi) / sbc2 + eps));
	}
	for (; i < n; i++) {
		float mi = b1 * m[i] + c1 * g[i];
		float vi = b2 * v[i] + c2 * g[i] * g[i];
		m[i] = mi;
		v[i] = vi;
		p[i] -= step * mi / (_mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(vi))) / sbc2 + eps);
	}
}
#pragma GCC pop_options

#undef V
#undef VI
#undef INLINE

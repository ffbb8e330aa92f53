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

INLINE V CAT(splat_, SFX)(float f) { return f - (V){0}; }

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

// dact_v is x·act'(y) from the activation's output y: act_grad's body, the same expression,
// so that a product's values times the derivative have act_grad's bits.
INLINE V CAT(dact_, SFX)(V x, V y, int act) {
	switch (act) {
	case ACT_TANH:
		return x * (1.0f - y * y);
	case ACT_RELU:
		return CAT(sel_, SFX)(y > 0, x, (V){0});
	default:
		return x;
	}
}

static TGT void CAT(act_grad_, SFX)(long n, const float *y, const float *dy, float *dz, int act);

// act_grad_rows multiplies the m×n block of C (rows ldc apart) by act'(Y) (rows ldy apart),
// row by row with act_grad: the derivative where a product's path did not apply it.
static TGT void CAT(act_grad_rows_, SFX)(long m, long n, float *c, long ldc, const float *y, long ldy,
					  int act) {
	for (long i = 0; i < m; i++)
		CAT(act_grad_, SFX)(n, y + i * ldy, c + i * ldc, c + i * ldc, act);
}

// tile computes one mr×(nv·VL) block of C = A·B over k, where A[r][p] = a[r·rsa + p·csa],
// B[p][j] = b[p·rsb + j] and C[r][j] = c[r·rsc + j·csc]: C is overwritten (acc 0) or added to
// (acc 1), then bias (per column, may be NULL) is added and act applied; or, when y is not
// NULL (then csc is 1), the result is multiplied by dact'(Y) for Y[r][j] = y[r·rsy + j]. mr
// and nv are compile-time constants at every call site, so the accumulators live in registers.
INLINE void CAT(tile_, SFX)(const int mr, const int nv, long k, const float *a, long rsa,
			    long csa, const float *b, long rsb, float *c, long rsc, long csc,
			    int acc, const float *bias, int act, const float *y, long rsy, int dact) {
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
				if (y)
					x = CAT(dact_, SFX)(x, CAT(ld_, SFX)(y + r * rsy + v * VL), dact);
				else
					x = CAT(act_, SFX)(x, act);
				CAT(st_, SFX)(cp, x);
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
			     const float *bias, int act, const float *y, long rsy, int dact) {
	long i = 0;
	for (; i + MR <= m; i += MR)
		CAT(tile_, SFX)(MR, nv, k, a + i * rsa, rsa, csa, b, rsb, c + i * rsc, rsc, csc, acc, bias, act,
				y ? y + i * rsy : NULL, rsy, dact);
	const float *ai = a + i * rsa;
	float *ci = c + i * rsc;
	const float *yi = y ? y + i * rsy : NULL;
	switch (m - i) {
#if MR > 7
#error "MR > 7 needs more cases"
#endif
#if MR > 6
	case 6:
		CAT(tile_, SFX)(6, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act, yi, rsy, dact);
		break;
#endif
#if MR > 5
	case 5:
		CAT(tile_, SFX)(5, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act, yi, rsy, dact);
		break;
#endif
#if MR > 4
	case 4:
		CAT(tile_, SFX)(4, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act, yi, rsy, dact);
		break;
#endif
	case 3:
		CAT(tile_, SFX)(3, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act, yi, rsy, dact);
		break;
	case 2:
		CAT(tile_, SFX)(2, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act, yi, rsy, dact);
		break;
	case 1:
		CAT(tile_, SFX)(1, nv, k, ai, rsa, csa, b, rsb, ci, rsc, csc, acc, bias, act, yi, rsy, dact);
		break;
	}
}

static TGT void CAT(bcast_, SFX)(long m, long n, long k, const float *a, long rsa, long csa,
				 const float *b, long rsb, float *c, long rsc, long csc, int acc,
				 const float *bias, int act, const float *y, long ldy, int dact);

// tail is bcast's last rem < VL columns of a product wider than one vector, through the
// vector tiles: B's rem columns are copied into a k×VL panel padded with zeros, C's into an
// m×VL block (when acc), bcast runs on those with VL columns, and the rem columns go back.
// Computing them with ref_gemm, a column of B at a time, took 95% of a 256×256 by 256×23
// product (issue 30). It returns 0 when the scratch could not be allocated (the caller then
// takes ref_gemm); products narrower than one vector never come here, so their bits are
// unchanged.
static TGT int CAT(tail_, SFX)(long m, long rem, long k, const float *a, long rsa, long csa,
			       const float *b, long rsb, float *c, long rsc, long csc, int acc,
			       const float *bias, int act) {
	float *bp = calloc((size_t)(k * VL + m * VL + VL), sizeof(float));
	if (!bp)
		return 0;
	float *cp = bp + k * VL, *biasp = cp + m * VL;
	for (long p = 0; p < k; p++)
		for (long j = 0; j < rem; j++)
			bp[p * VL + j] = b[p * rsb + j];
	if (acc)
		for (long i = 0; i < m; i++)
			for (long j = 0; j < rem; j++)
				cp[i * VL + j] = c[i * rsc + j * csc];
	if (bias)
		for (long j = 0; j < rem; j++)
			biasp[j] = bias[j];
	CAT(bcast_, SFX)(m, VL, k, a, rsa, csa, bp, VL, cp, VL, 1, acc, bias ? biasp : NULL, act, NULL, 0,
			 ACT_NONE);
	for (long i = 0; i < m; i++)
		for (long j = 0; j < rem; j++)
			c[i * rsc + j * csc] = cp[i * VL + j];
	free(bp);
	return 1;
}

// bcast is C = A·B (+C) with the strided A, row-contiguous B and general C of tile, for
// all n columns: whole vectors in tiles, the last n % VL columns by scalar code. Blocks of KC
// along k keep the panel of B in cache. With y (rows ldy apart; csc must be 1), C is then
// multiplied by dact'(Y) instead of taking act (which must be ACT_NONE).
static TGT void CAT(bcast_, SFX)(long m, long n, long k, const float *a, long rsa, long csa,
				 const float *b, long rsb, float *c, long rsc, long csc, int acc,
				 const float *bias, int act, const float *y, long ldy, int dact) {
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
			const float *yj = last && y ? y + j : NULL;
			const float *ap = a + p * csa;
			const float *bp = b + p * rsb + j;
			float *cp = c + j * csc;
			switch (nv) {
#if NV > 4
#error "NV > 4 needs more cases"
#endif
#if NV > 3
			case 4:
				CAT(tiles_, SFX)(4, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai, yj, ldy, dact);
				break;
#endif
#if NV > 2
			case 3:
				CAT(tiles_, SFX)(3, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai, yj, ldy, dact);
				break;
#endif
			case 2:
				CAT(tiles_, SFX)(2, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai, yj, ldy, dact);
				break;
			default:
				CAT(tiles_, SFX)(1, m, kc, ap, rsa, csa, bp, rsb, cp, rsc, csc, ac, bi, ai, yj, ldy, dact);
				break;
			}
		}
	}
	if (nfull < n) {
		if (nfull == 0 || !CAT(tail_, SFX)(m, n - nfull, k, a, rsa, csa, b + nfull, rsb, c + nfull * csc,
						    rsc, csc, acc, bias ? bias + nfull : NULL, act))
			ref_gemm(m, n - nfull, k, a, rsa, csa, b + nfull, rsb, 1, c + nfull * csc, rsc, csc, acc,
				 bias ? bias + nfull : NULL, act);
		if (y)
			CAT(act_grad_rows_, SFX)(m, n - nfull, c + nfull, rsc, y + nfull, ldy, dact);
	}
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

// dot_sums is a row's s0 + s1 of dot: the products of ai and bj over kfull (a multiple of VL)
// in two chains of vectors, before their horizontal sum.
INLINE V CAT(dot_sums_, SFX)(long kfull, const float *ai, const float *bj) {
	V s0 = (V){0}, s1 = (V){0};
	long p = 0;
	for (; p + 2 * VL <= kfull; p += 2 * VL) {
		s0 += CAT(ld_, SFX)(ai + p) * CAT(ld_, SFX)(bj + p);
		s1 += CAT(ld_, SFX)(ai + p + VL) * CAT(ld_, SFX)(bj + p + VL);
	}
	if (p < kfull)
		s0 += CAT(ld_, SFX)(ai + p) * CAT(ld_, SFX)(bj + p);
	return s0 + s1;
}

// dot_out writes a dot product y into C at cp with acc, the column's bias and act.
INLINE void CAT(dot_out_, SFX)(float *cp, float y, int acc, const float *bias, int act) {
	if (acc)
		y += *cp;
	if (bias)
		y += *bias;
	*cp = act_s(y, act);
}

#if VL == 16
// dot16 writes into y the dot products of 16 rows of A (rows lda apart) with bj over k (a
// multiple of VL), each the sum dot's loop makes for one row: the same s0 and s1, then s0 + s1
// reduced by hsum's tree of additions, done for the 16 rows side by side (pairs of vectors'
// halves, quarters, then pairs and single lanes within the 128-bit lanes), so the same bits
// with a quarter of the shuffles.
INLINE void CAT(dot16_, SFX)(long k, const float *a, long lda, const float *bj, float y[16]) {
	__m512 r[16], x[8], w[4], z[2];
#pragma GCC unroll 16
	for (int q = 0; q < 16; q++)
		r[q] = (__m512)CAT(dot_sums_, SFX)(k, a + q * lda, bj);
	// lane l + lane l+8 of rows 2t (first half) and 2t+1 (second half)
	for (int t = 0; t < 8; t++)
		x[t] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * t], r[2 * t + 1], 0x44),
				     _mm512_shuffle_f32x4(r[2 * t], r[2 * t + 1], 0xEE));
	// l + l+4: 128-bit lane L of w[u] is row 4u + L's four
	for (int u = 0; u < 4; u++)
		w[u] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * u], x[2 * u + 1], 0x88),
				     _mm512_shuffle_f32x4(x[2 * u], x[2 * u + 1], 0xDD));
	// l + l+2: lane L of z[v] holds rows 8v + L and 8v + 4 + L, two values each
	for (int v = 0; v < 2; v++)
		z[v] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * v], w[2 * v + 1], _MM_SHUFFLE(1, 0, 1, 0)),
				     _mm512_shuffle_ps(w[2 * v], w[2 * v + 1], _MM_SHUFFLE(3, 2, 3, 2)));
	// l + l+1: value e of lane L is row L + 4e
	__m512 o = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
				 _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
	float t[16];
	_mm512_storeu_ps(t, o);
	for (int q = 0; q < 16; q++)
		y[q] = t[4 * (q % 4) + q / 4];
}
#endif

// dot is C = A·Bᵀ (+C) for row-contiguous A [m, k] and B [n, k] (C[i][j] = A[i]·B[j]):
// the shape of a layer with few outputs, or of few rows against a transposed B, where vectors
// run along k. Each row of B is reused across all rows of A while it is in cache.
static TGT void CAT(dot_, SFX)(long m, long n, long k, const float *a, long lda, const float *b,
			       long ldb, float *c, long ldc, int acc, const float *bias, int act) {
	long kfull = k - k % VL;
	long i0 = 0; // the rows dot16 took
#if VL == 16
	if (kfull == k) // sixteen rows' sums at once, every column while they are in cache: the same bits
		for (; i0 + 16 <= m; i0 += 16)
			for (long j = 0; j < n; j++) {
				float y[16];
				CAT(dot16_, SFX)(k, a + i0 * lda, lda, b + j * ldb, y);
				for (int r = 0; r < 16; r++)
					CAT(dot_out_, SFX)(c + (i0 + r) * ldc + j, y[r], acc, bias ? bias + j : NULL, act);
			}
#endif
	for (long j = 0; j < n; j++) {
		const float *bj = b + j * ldb;
		for (long i = i0; i < m; i++) {
			const float *ai = a + i * lda;
			float y = CAT(hsum_, SFX)(CAT(dot_sums_, SFX)(kfull, ai, bj));
			for (long p = kfull; p < k; p++)
				y += ai[p] * bj[p];
			CAT(dot_out_, SFX)(c + i * ldc + j, y, acc, bias ? bias + j : NULL, act);
		}
	}
}

#if VL >= 8
typedef float CAT(v8_, SFX) __attribute__((vector_size(32)));
typedef int CAT(vi8_, SFX) __attribute__((vector_size(32)));
#define V8 CAT(v8_, SFX)
#define VI8 CAT(vi8_, SFX)

// tr8 writes the transpose of the 8×8 block at s (rows ls apart) to d (rows ld apart): three
// rounds of two-vector shuffles (unpack, then pairs, then halves).
INLINE void CAT(tr8_, SFX)(const float *s, long ls, float *d, long ld) {
	V8 r[8], t[8], u[8];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++)
		__builtin_memcpy(&r[i], s + i * ls, sizeof r[i]);
#pragma GCC unroll 4
	for (int i = 0; i < 8; i += 2) {
		t[i] = __builtin_shuffle(r[i], r[i + 1], (VI8){0, 8, 1, 9, 4, 12, 5, 13});
		t[i + 1] = __builtin_shuffle(r[i], r[i + 1], (VI8){2, 10, 3, 11, 6, 14, 7, 15});
	}
#pragma GCC unroll 2
	for (int i = 0; i < 8; i += 4) {
		u[i] = __builtin_shuffle(t[i], t[i + 2], (VI8){0, 1, 8, 9, 4, 5, 12, 13});
		u[i + 1] = __builtin_shuffle(t[i], t[i + 2], (VI8){2, 3, 10, 11, 6, 7, 14, 15});
		u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], (VI8){0, 1, 8, 9, 4, 5, 12, 13});
		u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], (VI8){2, 3, 10, 11, 6, 7, 14, 15});
	}
#pragma GCC unroll 4
	for (int i = 0; i < 4; i++) {
		V8 lo = __builtin_shuffle(u[i], u[i + 4], (VI8){0, 1, 2, 3, 8, 9, 10, 11});
		V8 hi = __builtin_shuffle(u[i], u[i + 4], (VI8){4, 5, 6, 7, 12, 13, 14, 15});
		__builtin_memcpy(d + i * ld, &lo, sizeof lo);
		__builtin_memcpy(d + (i + 4) * ld, &hi, sizeof hi);
	}
}
#undef V8
#undef VI8
#endif

// pack_t writes B [n, k] (rows ldb apart) transposed into bp [k, n] (rows ldp apart):
// bp[p·ldp + j] = b[j·ldb + p].
static TGT void CAT(pack_t_, SFX)(long n, long k, const float *b, long ldb, float *bp, long ldp) {
	long j0 = 0;
#if VL >= 8
	for (; j0 + 8 <= n; j0 += 8) {
		long p = 0;
		for (; p + 8 <= k; p += 8)
			CAT(tr8_, SFX)(b + j0 * ldb + p, ldb, bp + p * ldp + j0, ldp);
		for (; p < k; p++)
			for (long j = j0; j < j0 + 8; j++)
				bp[p * ldp + j] = b[j * ldb + p];
	}
#endif
	for (long j = j0; j < n; j++)
		for (long p = 0; p < k; p++)
			bp[p * ldp + j] = b[j * ldb + p];
}

// gemm is C = op(A)·op(B) (+C when acc), then + bias (per column, may be NULL) and act, for
// row-major A, B, C with leading dimensions lda, ldb, ldc; or, when y is not NULL (then acc
// is 0 and bias NULL), C = op(A)·op(B) times act'(Y) element by element, Y [m, n] the
// activation's output with rows ldy apart: the product is the one act ACT_NONE would give and
// the derivative act_grad's, bit for bit. It returns 0, or -1 when a scratch allocation
// failed (C is then untouched).
static TGT int CAT(gemm_, SFX)(int ta, int tb, long m, long n, long k, const float *a, long lda,
			       const float *b, long ldb, float *c, long ldc, int acc,
			       const float *bias, int act, const float *y, long ldy) {
	if (m == 0 || n == 0)
		return 0;
	int dact = y ? act : ACT_NONE;
	if (y)
		act = ACT_NONE;
	int fused = 0; // the derivative was applied with the product
	long rsa = ta ? 1 : lda, csa = ta ? lda : 1;
	if (k == 0) {
		ref_gemm(m, n, 0, a, 0, 0, b, 0, 1, c, ldc, 1, acc, bias, act);
	} else if (n < VL && m >= VL && !ta && (tb || (n == 1 && ldb == 1))) {
		// Rows of op(B)ᵀ are rows of B (or B itself when it is one column).
		CAT(dot_, SFX)(m, n, k, a, lda, b, tb ? ldb : k, c, ldc, acc, bias, act);
	} else if (n < VL && m >= VL && !ta) {
		float *bt = malloc(sizeof(float) * n * k);
		if (!bt)
			return -1;
		for (long p = 0; p < k; p++)
			for (long j = 0; j < n; j++)
				bt[j * k + p] = b[p * ldb + j];
		CAT(dot_, SFX)(m, n, k, a, lda, bt, k, c, ldc, acc, bias, act);
		free(bt);
	} else if (n < VL && m >= VL && !bias && !act) {
		// Cᵀ = op(B)ᵀ·op(A)ᵀ, whose right operand op(A)ᵀ = A has contiguous rows.
		CAT(bcast_, SFX)(n, m, k, b, tb ? ldb : 1, tb ? 1 : ldb, a, lda, c, 1, ldc, acc, NULL, 0,
				 NULL, 0, 0);
	} else if (!tb) {
		CAT(bcast_, SFX)(m, n, k, a, rsa, csa, b, ldb, c, ldc, 1, acc, bias, act, y, ldy, dact);
		fused = 1;
	} else if (!ta && m < 4 * MR) {
		// Few rows: packing op(B) would cost more than the product.
		CAT(dot_, SFX)(m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act);
	} else if (!ta && 2 * m <= n && !bias && !act) {
		// Half as many rows as op(B) has columns or fewer (a layer's input gradient on a
		// tower's share of a small minibatch: 32 rows against a 256×256 layer): Cᵀ = B·Aᵀ, whose
		// left operand B has contiguous rows, needs A transposed (m·k values) where the path
		// below transposes B (n·k), and Cᵀ is made in a scratch block and transposed into C.
		// Each C[i][j] is the same sum in the same order (the products B[j][p]·A[i][p] are
		// exact), so the bits are the path's below; the derivative, if any, is applied after
		// (act_grad_rows: the same bits as the fused form). 1.3–1.5× the path below at 32–64
		// rows of a 256×256 layer, the same at 128.
		float *at = malloc(sizeof(float) * (m * k + n * m));
		if (!at)
			return -1;
		float *ct = at + m * k; // Cᵀ [n, m]
		CAT(pack_t_, SFX)(m, k, a, lda, at, m);
		if (acc)
			CAT(pack_t_, SFX)(m, n, c, ldc, ct, m);
		CAT(bcast_, SFX)(n, m, k, b, ldb, 1, at, m, ct, m, 1, acc, NULL, ACT_NONE, NULL, 0, ACT_NONE);
		CAT(pack_t_, SFX)(n, m, ct, m, c, ldc);
		free(at);
	} else {
		float *bp = malloc(sizeof(float) * n * k);
		if (!bp)
			return -1;
		CAT(pack_t_, SFX)(n, k, b, ldb, bp, n);
		CAT(bcast_, SFX)(m, n, k, a, rsa, csa, bp, n, c, ldc, 1, acc, bias, act, y, ldy, dact);
		free(bp);
		fused = 1;
	}
	if (y && !fused)
		CAT(act_grad_rows_, SFX)(m, n, c, ldc, y, ldy, dact);
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

// col_sum_blk is col_sum over nv vectors of columns (a and dst at the first one), row by row:
// each column's sum is the same chain of additions as one vector of columns at a time would
// make (s0 the even rows, s1 the odd ones, then s0 + s1), but each row is read once, whole.
INLINE void CAT(col_sum_blk_, SFX)(const int nv, long m, long n, const float *a, float *dst, int acc) {
	V s0[4], s1[4];
#pragma GCC unroll 4
	for (int v = 0; v < nv; v++) {
		s0[v] = acc ? CAT(ld_, SFX)(dst + v * VL) : (V){0};
		s1[v] = (V){0};
	}
	long i = 0;
	for (; i + 2 <= m; i += 2) {
#pragma GCC unroll 4
		for (int v = 0; v < nv; v++) {
			s0[v] += CAT(ld_, SFX)(a + i * n + v * VL);
			s1[v] += CAT(ld_, SFX)(a + (i + 1) * n + v * VL);
		}
	}
	if (i < m) {
#pragma GCC unroll 4
		for (int v = 0; v < nv; v++)
			s0[v] += CAT(ld_, SFX)(a + i * n + v * VL);
	}
#pragma GCC unroll 4
	for (int v = 0; v < nv; v++)
		CAT(st_, SFX)(dst + v * VL, s0[v] + s1[v]);
}

// col_sum is dst[j] = Σ_i a[i·n + j] (+dst[j] when acc): whole vectors of columns up to four
// at a time (col_sum_blk), the last n % VL columns one at a time.
static TGT void CAT(col_sum_, SFX)(long m, long n, const float *a, float *dst, int acc) {
	long j = 0;
	while (j + VL <= n) {
		long nv = (n - j) / VL;
		switch (nv > 4 ? 4 : nv) {
		case 4:
			CAT(col_sum_blk_, SFX)(4, m, n, a + j, dst + j, acc);
			j += 4 * VL;
			break;
		case 3:
			CAT(col_sum_blk_, SFX)(3, m, n, a + j, dst + j, acc);
			j += 3 * VL;
			break;
		case 2:
			CAT(col_sum_blk_, SFX)(2, m, n, a + j, dst + j, acc);
			j += 2 * VL;
			break;
		default:
			CAT(col_sum_blk_, SFX)(1, m, n, a + j, dst + j, acc);
			j += VL;
			break;
		}
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

// axpy is y[i] += w·x[i], the product rounded before the sum (no fused multiply-add): Go's
// loop's bits.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
static TGT void CAT(axpy_, SFX)(long n, float w, const float *x, float *y) {
	long i = 0;
	for (; i + VL <= n; i += VL)
		CAT(st_, SFX)(y + i, CAT(ld_, SFX)(y + i) + w * CAT(ld_, SFX)(x + i));
	for (; i < n; i++)
		y[i] += w * x[i];
}
#pragma GCC pop_options

// square_sums is SquareSums: per block, four partial sums in the lanes of a vector of four
// doubles (value j of the block in lane j mod 4), four blocks side by side so that their
// additions overlap. The squares of floats are exact in double, and nothing is fused.
typedef double CAT(d4_, SFX) __attribute__((vector_size(32)));
typedef float CAT(f4_, SFX) __attribute__((vector_size(16)));
#define D4 CAT(d4_, SFX)
#define F4 CAT(f4_, SFX)

// SQ4 adds the squares of the four floats at p to the lanes of s (macros, not functions: a
// 32-byte vector passed by value would change the SSE2 copy's ABI).
#define SQ4(s, p)                                               \
	do {                                                    \
		F4 f_;                                          \
		__builtin_memcpy(&f_, (p), sizeof f_);          \
		D4 x_ = __builtin_convertvector(f_, D4);        \
		(s) += x_ * x_;                                 \
	} while (0)
#define FOLD4(s) (((s)[0] + (s)[1]) + ((s)[2] + (s)[3]))

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
static TGT void CAT(square_sums_, SFX)(long n, const float *g, long block, double *sums) {
	long blocks = (n + block - 1) / block, b = 0;
	for (; b + 4 <= blocks && (b + 4) * block <= n; b += 4) {
		const float *g0 = g + b * block;
		D4 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
		for (long j = 0; j < block; j += 4) {
			SQ4(s0, g0 + j);
			SQ4(s1, g0 + block + j);
			SQ4(s2, g0 + 2 * block + j);
			SQ4(s3, g0 + 3 * block + j);
		}
		sums[b] = FOLD4(s0);
		sums[b + 1] = FOLD4(s1);
		sums[b + 2] = FOLD4(s2);
		sums[b + 3] = FOLD4(s3);
	}
	for (; b < blocks; b++) {
		long lo = b * block, hi = lo + block < n ? lo + block : n, j = lo;
		D4 s = {0};
		for (; j + 4 <= hi; j += 4)
			SQ4(s, g + j);
		for (int k = 0; j < hi; j++, k++) {
			double x = g[j];
			s[k] += x * x;
		}
		sums[b] = FOLD4(s);
	}
}
#pragma GCC pop_options

#undef SQ4
#undef FOLD4
#undef D4
#undef F4
#undef V
#undef VI
#undef INLINE

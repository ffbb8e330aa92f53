//go:build amd64 && cgo && !purego

// Go's float64 math.Exp and math.Log1p, and the two-logit categorical head built on them
// (models/head's categoricalForward2 and CategoricalBackward), eight rows at a time with
// AVX-512, bit for bit as Go computes them on amd64: math.Exp is archExp's FMA path
// (exp_amd64.s, taken when the CPU has AVX and FMA, which an AVX-512 CPU has), math.Log1p the
// pure Go function (FreeBSD's), which Go compiles without fused multiply-adds (GOAMD64=v1).
// Every operation below is the same IEEE operation in the same order, so nothing here may be
// contracted into an FMA except where archExp itself uses one.

#include <immintrin.h>
#include <string.h>

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

#define GM_TGT __attribute__((target("avx512f,avx512dq,avx2,fma")))

typedef double vd8 __attribute__((vector_size(64)));
typedef long long vl8 __attribute__((vector_size(64)));
typedef unsigned long long vu8 __attribute__((vector_size(64)));

static inline GM_TGT vd8 splat8(double d) { return d - (vd8){0}; }
static inline GM_TGT vd8 sel8(vl8 m, vd8 a, vd8 b) { return (vd8)(((vl8)a & m) | ((vl8)b & ~m)); }
static inline GM_TGT vl8 seli8(vl8 m, vl8 a, vl8 b) { return (a & m) | (b & ~m); }
static inline GM_TGT vd8 fmadd8(vd8 a, vd8 b, vd8 c) { return (vd8)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c); }
static inline GM_TGT vd8 fnmadd8(vd8 a, vd8 b, vd8 c) { return (vd8)_mm512_fnmadd_pd((__m512d)a, (__m512d)b, (__m512d)c); }

#define POS_INF 0x7FF0000000000000LL

// exp8 is archExp (FMA path) on eight lanes.
static inline GM_TGT vd8 exp8(vd8 x) {
	const double overflow = 7.09782712893384e+02;
	vl8 bits = (vl8)x;
	vl8 absb = bits & 0x7FFFFFFFFFFFFFFFLL;
	vl8 notFinite = absb >= POS_INF;
	vl8 over = (x > overflow) & ~notFinite;
	vd8 t = 1.4426950408889634073599246810018920 * x; // LOG2E
	__m256i bx = _mm512_cvtpd_epi32((__m512d)t);    // CVTSD2SL: round to nearest
	vd8 kx = (vd8)_mm512_cvtepi32_pd(bx);
	vd8 r = fnmadd8(kx, splat8(0.69314718055966295651160180568695068359375), x); // LN2U
	r = fnmadd8(kx, splat8(0.28235290563031577122588448175013436025525412068e-12), r); // LN2L
	r = r * 0.0625;
	vd8 p = splat8(2.4801587301587301587e-5);
	p = fmadd8(p, r, splat8(1.9841269841269841270e-4));
	p = fmadd8(p, r, splat8(1.3888888888888888889e-3));
	p = fmadd8(p, r, splat8(8.3333333333333333333e-3));
	p = fmadd8(p, r, splat8(4.1666666666666666667e-2));
	p = fmadd8(p, r, splat8(1.6666666666666666667e-1));
	p = fmadd8(p, r, splat8(0.5));
	p = fmadd8(p, r, splat8(1.0));
	r = r * p;
	vd8 u = r + 2.0;
	r = r * u;
	u = r + 2.0;
	r = r * u;
	u = r + 2.0;
	r = r * u;
	u = r + 2.0;
	r = fmadd8(r, u, splat8(1.0));
	// ldexp: fr · 2^exponent, through the subnormals as archExp goes.
	vl8 e = (vl8)_mm512_cvtepi32_epi64(bx) + 0x3FF;
	vl8 normal = e > 0, big = e >= 0x7FF;
	vd8 yn = r * (vd8)(e << 52);
	vl8 ed = e + 0x3FE;
	vd8 yd = (r * (vd8)(ed << 52)) * (vd8)((vl8){0} + (1LL << 52));
	vd8 y = sel8(normal, yn, sel8(e < -52, (vd8){0}, yd));
	y = sel8(big | over, (vd8)((vl8){0} + POS_INF), y);
	// not finite: −Inf gives 0, +Inf and NaN themselves
	vd8 special = sel8(bits == (vl8){0} + (long long)0xFFF0000000000000ULL, (vd8){0}, x);
	return sel8(notFinite, special, y);
}

// log1p_s is Go's math.Log1p, transcribed.
static double log1p_s(double x) {
	const double Sqrt2M1 = 4.142135623730950488017e-01, Sqrt2HalfM1 = -2.928932188134524755992e-01,
		     Small = 1.0 / (1 << 29), Tiny = 1.0 / (double)(1LL << 54), Two53 = (double)(1LL << 53),
		     Ln2Hi = 6.93147180369123816490e-01, Ln2Lo = 1.90821492927058770002e-10,
		     Lp1 = 6.666666666666735130e-01, Lp2 = 3.999999999940941908e-01,
		     Lp3 = 2.857142874366239149e-01, Lp4 = 2.222219843214978396e-01,
		     Lp5 = 1.818357216161805012e-01, Lp6 = 1.531383769920937332e-01,
		     Lp7 = 1.479819860511658591e-01;
	if (x < -1 || x != x)
		return __builtin_nan("");
	if (x == -1)
		return -__builtin_inf();
	if (x == __builtin_inf())
		return x;
	double absx = x < 0 ? -x : x;
	double f = 0;
	unsigned long long iu = 0;
	long long k = 1;
	if (absx < Sqrt2M1) {
		if (absx < Small) {
			if (absx < Tiny)
				return x;
			return x - x * x * 0.5;
		}
		if (x > Sqrt2HalfM1) {
			k = 0;
			f = x;
			iu = 1;
		}
	}
	double c = 0;
	if (k != 0) {
		double u;
		if (absx < Two53) {
			u = 1.0 + x;
			memcpy(&iu, &u, 8);
			k = (long long)((iu >> 52) - 1023);
			if (k > 0)
				c = 1.0 - (u - x);
			else
				c = x - (u - 1.0);
			c /= u;
		} else {
			u = x;
			memcpy(&iu, &u, 8);
			k = (long long)((iu >> 52) - 1023);
			c = 0;
		}
		iu &= 0x000fffffffffffffULL;
		unsigned long long b;
		if (iu < 0x0006a09e667f3bcdULL) {
			b = iu | 0x3ff0000000000000ULL;
		} else {
			k++;
			b = iu | 0x3fe0000000000000ULL;
			iu = (0x0010000000000000ULL - iu) >> 2;
		}
		memcpy(&u, &b, 8);
		f = u - 1.0;
	}
	double hfsq = 0.5 * f * f;
	double dk = (double)k;
	if (iu == 0) {
		if (f == 0) {
			if (k == 0)
				return 0;
			c += dk * Ln2Lo;
			return dk * Ln2Hi + c;
		}
		double R = hfsq * (1.0 - 0.66666666666666666 * f);
		if (k == 0)
			return f - R;
		return dk * Ln2Hi - ((R - (dk * Ln2Lo + c)) - f);
	}
	double s = f / (2.0 + f), z = s * s;
	double R = z * (Lp1 + z * (Lp2 + z * (Lp3 + z * (Lp4 + z * (Lp5 + z * (Lp6 + z * Lp7))))));
	if (k == 0)
		return f - (hfsq - s * (hfsq + R));
	return dk * Ln2Hi - ((hfsq - (s * (hfsq + R) + (dk * Ln2Lo + c))) - f);
}

// log1p8 is log1p_s on eight lanes: the branches of 0 ≤ x < 2⁵³ as selections, any other lane
// by log1p_s.
static inline GM_TGT vd8 log1p8(vd8 x) {
	const double Sqrt2M1 = 4.142135623730950488017e-01, Small = 1.0 / (1 << 29),
		     Tiny = 1.0 / (double)(1LL << 54), Two53 = (double)(1LL << 53),
		     Ln2Hi = 6.93147180369123816490e-01, Ln2Lo = 1.90821492927058770002e-10;
	vl8 inDomain = (x >= 0) & (x < Two53);
	vl8 tiny = x < Tiny, small = x < Small, kzero = x < Sqrt2M1;
	// |x| ≥ √2−1: u = 1 + x and its exponent k, the correction c
	vd8 u = 1.0 + x;
	vl8 iu = (vl8)u;
	vl8 k = (vl8)((vu8)iu >> 52) - 1023;
	vd8 c = sel8(k > 0, 1.0 - (u - x), x - (u - 1.0));
	c = c / u;
	iu &= 0x000fffffffffffffLL;
	vl8 low = iu < 0x0006a09e667f3bcdLL;
	vl8 b = seli8(low, iu | 0x3ff0000000000000LL, iu | 0x3fe0000000000000LL);
	k = seli8(low, k, k + 1);
	iu = seli8(low, iu, (0x0010000000000000LL - iu) >> 2);
	vd8 f = (vd8)b - 1.0;
	// √2/2−1 < x < √2−1 (x ≥ 0 here): k = 0, f = x, no correction
	f = sel8(kzero, x, f);
	k = seli8(kzero, (vl8){0}, k);
	c = sel8(kzero, (vd8){0}, c);
	iu = seli8(kzero, (vl8){0} + 1, iu);
	vd8 hfsq = 0.5 * f * f;
	vd8 dk = (vd8)_mm512_cvtepi64_pd((__m512i)k);
	vl8 k0 = k == 0;
	vd8 s = f / (2.0 + f), z = s * s;
	vd8 R = z * (6.666666666666735130e-01 +
		     z * (3.999999999940941908e-01 +
			  z * (2.857142874366239149e-01 +
			       z * (2.222219843214978396e-01 +
				    z * (1.818357216161805012e-01 + z * (1.531383769920937332e-01 + z * 1.479819860511658591e-01))))));
	vd8 general = sel8(k0, f - (hfsq - s * (hfsq + R)),
			   dk * Ln2Hi - ((hfsq - (s * (hfsq + R) + (dk * Ln2Lo + c))) - f));
	vd8 R2 = hfsq * (1.0 - 0.66666666666666666 * f);
	vd8 exact = sel8(k0, (vd8){0}, dk * Ln2Hi + (c + dk * Ln2Lo));
	vd8 near = sel8(k0, f - R2, dk * Ln2Hi - ((R2 - (dk * Ln2Lo + c)) - f));
	vd8 y = sel8(iu == 0, sel8(f == 0, exact, near), general);
	y = sel8(small, x - x * x * 0.5, y);
	y = sel8(tiny, x, y);
	if (_mm512_movepi64_mask((__m512i)inDomain) != 0xff)
		for (int l = 0; l < 8; l++)
			if (!inDomain[l])
				y[l] = log1p_s(x[l]);
	return y;
}

// GO_MAP defines name(n, x, y), writing f(x[i]) into y[i] (y may be x), eight at a time.
#define GO_MAP(name, f)                                              \
	GM_TGT void name(long n, const double *x, double *y) {       \
		long i = 0;                                          \
		for (; i + 8 <= n; i += 8) {                         \
			vd8 v;                                       \
			memcpy(&v, x + i, sizeof v);                 \
			v = f(v);                                    \
			memcpy(y + i, &v, sizeof v);                 \
		}                                                    \
		if (i < n) {                                         \
			vd8 v = {0};                                 \
			memcpy(&v, x + i, 8 * (n - i));              \
			v = f(v);                                    \
			memcpy(y + i, &v, 8 * (n - i));              \
		}                                                    \
	}

// twk_go_exp writes math.Exp(x[i]) into y[i]; twk_go_log1p math.Log1p(x[i]).
GO_MAP(twk_go_exp, exp8)
GO_MAP(twk_go_log1p, log1p8)

// cat2_8 is categoricalForward2 on eight rows whose logits are finite: x0, x1 the logits, a
// the actions (0 or 1, as all ones or zeros), into the rows' log-softmax, probabilities, log
// probability of the action and entropy.
static inline GM_TGT void cat2_8(vd8 x0, vd8 x1, vl8 a, vd8 *ls0, vd8 *ls1, vd8 *p0, vd8 *p1, vd8 *lp,
				 vd8 *h) {
	vd8 d = x1 - x0;
	vd8 e = exp8(-(vd8)((vl8)d & 0x7FFFFFFFFFFFFFFFLL));
	vd8 mx = sel8(x0 > x1, x0, x1);
	vd8 lse = mx + log1p8(e);
	vd8 inv = 1.0 / (1.0 + e);
	vd8 pOther = e * inv;
	vl8 swap = (vl8)(x0 - x1) < 0; // the sign bit: l₁ > l₀ (equal logits give +0)
	*p0 = sel8(swap, pOther, inv);
	*p1 = sel8(swap, inv, pOther);
	*ls0 = x0 - lse;
	*ls1 = x1 - lse;
	*lp = sel8(a, *ls1, *ls0);
	*h = -(*p0 * *ls0 + *p1 * *ls1);
}

// twk_cat2 is models/head's CategoricalForwardRows for two logits a row: rows rows of logits
// (float32 pairs) and actions (0 or 1) into logSoftmax and probs (pairs), logp and entropy.
// Rows with a logit ±Inf or NaN are left unwritten; it returns how many there were.
GM_TGT long twk_cat2(long rows, const float *logits, const int *acts, double *ls, double *p, double *lp,
		     double *h) {
	long bad = 0;
	for (long i = 0; i < rows; i += 8) {
		long nr = rows - i < 8 ? rows - i : 8;
		float lg[16] = {0};
		int ac[8] = {0};
		memcpy(lg, logits + 2 * i, 8 * nr);
		memcpy(ac, acts + i, 4 * nr);
		vd8 x0, x1;
		vl8 a;
		for (int l = 0; l < 8; l++) {
			x0[l] = lg[2 * l];
			x1[l] = lg[2 * l + 1];
			a[l] = ac[l] ? -1 : 0;
		}
		vd8 ls0, ls1, p0, p1, lpv, hv;
		cat2_8(x0, x1, a, &ls0, &ls1, &p0, &p1, &lpv, &hv);
		for (long l = 0; l < nr; l++) {
			double d0 = x0[l] - x0[l], d1 = x1[l] - x1[l];
			if (d0 != 0 || d1 != 0) { // ±Inf or NaN (NaN != 0 too)
				bad++;
				continue;
			}
			long r = i + l;
			ls[2 * r] = ls0[l];
			ls[2 * r + 1] = ls1[l];
			p[2 * r] = p0[l];
			p[2 * r + 1] = p1[l];
			lp[r] = lpv[l];
			h[r] = hv[l];
		}
	}
	return bad;
}

// twk_cat2_backward is models/head's CategoricalBackward for two logits a row, over rows rows:
// dLogits[j] = float32(−dLogp·p_j − dEnt·p_j·(ls_j + H) (+ dLogp when j is the action)).
GM_TGT void twk_cat2_backward(long rows, const double *ls, const double *p, const int *acts, const double *h,
			      const float *dlogp, double dent, float *dlogits) {
	for (long i = 0; i < rows; i++) {
		double dl = dlogp[i];
		for (int j = 0; j < 2; j++) {
			double pj = p[2 * i + j];
			double d = -dl * pj - dent * pj * (ls[2 * i + j] + h[i]);
			if (j == acts[i])
				d += dl;
			dlogits[2 * i + j] = (float)d;
		}
	}
}

#pragma GCC pop_options

//go:build amd64 && cgo && !purego

// envs' CartPole-v1 step (cartPole.Step: Euler kinematics in float64, sin and cos by the
// polynomials math.Sincos evaluates inside (−π/4, π/4)) eight envs at a time with AVX-512, bit
// for bit as Go computes it on amd64: the same float64 operations in Go's order, none
// contracted into a fused multiply-add (Go compiles none for GOAMD64=v1).

#include "vec8.h"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

#define CP_TGT __attribute__((target("avx512f,avx512dq,avx512vl,avx2")))


// cp_params is kernels.CartPole: the env's constants, as envs computes them, and 4/π.
struct cp_params {
	double gravity, mass_pole, total_mass, length, pole_mass_length, tau, x_threshold, theta_threshold,
	    force_mag, four_over_pi;
};

// twk_cartpole_step steps n envs (state: x, ẋ, θ, θ̇ each, env after env; act: the actions, 1
// pushing right and any other value left) into state, obs (the new state in float32, env after
// env), rew (1) and term (1 where x or θ is past its threshold, else 0), except each env whose
// θ is outside (−π/4, π/4), ±0 or NaN (Go's sincosInline false): it writes nothing of those,
// lists their indices in skip and returns how many there are.
CP_TGT long twk_cartpole_step(const struct cp_params *k, long n, double *state, const int64_t *act, float *obs,
			      float *rew, float *term, int *skip) {
	long ns = 0;
	const double sin0 = 1.58962301576546568060e-10, sin1 = -2.50507477628578072866e-8,
		     sin2 = 2.75573136213857245213e-6, sin3 = -1.98412698295895385996e-4,
		     sin4 = 8.33333333332211858878e-3, sin5 = -1.66666666666666307295e-1;
	const double cos0 = -1.13585365213876817300e-11, cos1 = 2.08757008419747316778e-9,
		     cos2 = -2.75573141792967388112e-7, cos3 = 2.48015872888517045348e-5,
		     cos4 = -1.38888888888730564116e-3, cos5 = 4.16666666666665929218e-2;
	const __m512i lo = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13), hi = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
	const __m512i first = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), second = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
	const __m512i back0 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), back1 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
	for (long i = 0; i < n; i += 8) {
		long nr = n - i < 8 ? n - i : 8;
		double st[32] = {0};
		int64_t ac[8] = {0};
		const double *sp = state + 4 * i;
		const int64_t *ap = act + i;
		if (nr < 8) { // the last envs, padded with zeros
			memcpy(st, sp, 32 * nr);
			memcpy(ac, ap, 8 * nr);
			sp = st;
			ap = ac;
		}
		// Envs (x, ẋ, θ, θ̇) two to a vector, into one vector of each.
		__m512d z0 = _mm512_loadu_pd(sp), z1 = _mm512_loadu_pd(sp + 8), z2 = _mm512_loadu_pd(sp + 16),
			z3 = _mm512_loadu_pd(sp + 24);
		__m512d a01 = _mm512_permutex2var_pd(z0, lo, z1), b01 = _mm512_permutex2var_pd(z0, hi, z1);
		__m512d a23 = _mm512_permutex2var_pd(z2, lo, z3), b23 = _mm512_permutex2var_pd(z2, hi, z3);
		vd8 x = (vd8)_mm512_permutex2var_pd(a01, first, a23), xDot = (vd8)_mm512_permutex2var_pd(a01, second, a23);
		vd8 theta = (vd8)_mm512_permutex2var_pd(b01, first, b23),
		    thetaDot = (vd8)_mm512_permutex2var_pd(b01, second, b23);
		vl8 a;
		memcpy(&a, ap, sizeof a);
		vd8 force = (vd8)((vl8)((vd8){0} + k->force_mag) ^ ((a != 1) & (vl8){0} + INT64_MIN));
		// sincosInline and sincosPoly.
		vd8 q = theta * k->four_over_pi;
		vl8 inl = (q > -1.0) & (q < 1.0) & (theta != 0.0);
		vd8 zz = theta * theta;
		vd8 cos = 1.0 - 0.5 * zz + zz * zz * ((((((cos0 * zz) + cos1) * zz + cos2) * zz + cos3) * zz + cos4) * zz + cos5);
		vd8 sin = theta + theta * zz * ((((((sin0 * zz) + sin1) * zz + sin2) * zz + sin3) * zz + sin4) * zz + sin5);
		// The step.
		vd8 temp = (force + k->pole_mass_length * (thetaDot * thetaDot) * sin) / k->total_mass;
		vd8 thetaacc = (k->gravity * sin - cos * temp) /
			       (k->length * (4.0 / 3.0 - k->mass_pole * (cos * cos) / k->total_mass));
		vd8 xacc = temp - k->pole_mass_length * thetaacc * cos / k->total_mass;
		vd8 nx = x + k->tau * xDot, nxDot = xDot + k->tau * xacc, ntheta = theta + k->tau * thetaDot,
		    nthetaDot = thetaDot + k->tau * thetaacc;
		vl8 done = (nx < -k->x_threshold) | (nx > k->x_threshold) | (ntheta < -k->theta_threshold) |
			   (ntheta > k->theta_threshold);
		// Back to env after env.
		__m512d c03 = _mm512_permutex2var_pd((__m512d)nx, back0, (__m512d)nxDot),
			c47 = _mm512_permutex2var_pd((__m512d)nx, back1, (__m512d)nxDot);
		__m512d d03 = _mm512_permutex2var_pd((__m512d)ntheta, back0, (__m512d)nthetaDot),
			d47 = _mm512_permutex2var_pd((__m512d)ntheta, back1, (__m512d)nthetaDot);
		// c03 = x0 ẋ0 x1 ẋ1 x2 ẋ2 x3 ẋ3 (c47 envs 4 to 7), d03 and d47 likewise θ, θ̇: pairs of pairs.
		const __m512i e0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), e1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
		double out[32];
		_mm512_storeu_pd(out, _mm512_permutex2var_pd(c03, e0, d03));
		_mm512_storeu_pd(out + 8, _mm512_permutex2var_pd(c03, e1, d03));
		_mm512_storeu_pd(out + 16, _mm512_permutex2var_pd(c47, e0, d47));
		_mm512_storeu_pd(out + 24, _mm512_permutex2var_pd(c47, e1, d47));
		float ob[32];
		for (int j = 0; j < 4; j++)
			_mm256_storeu_ps(ob + 8 * j, _mm512_cvtpd_ps(_mm512_loadu_pd(out + 8 * j)));
		vf8 tv = (vf8)(__builtin_convertvector(done, vi8) & (vi8)((vf8){0} + 1.0f));
		unsigned m = (unsigned)_mm512_movepi64_mask((__m512i)inl);
		if (nr == 8 && m == 0xff) {
			memcpy(state + 4 * i, out, sizeof out);
			memcpy(obs + 4 * i, ob, sizeof ob);
			memcpy(term + i, &tv, sizeof tv);
			vf8 one = (vf8){0} + 1.0f;
			memcpy(rew + i, &one, sizeof one);
			continue;
		}
		for (long l = 0; l < nr; l++) {
			if (!(m >> l & 1)) {
				skip[ns++] = (int)(i + l);
				continue;
			}
			memcpy(state + 4 * (i + l), out + 4 * l, 32);
			memcpy(obs + 4 * (i + l), ob + 4 * l, 16);
			term[i + l] = tv[l];
			rew[i + l] = 1;
		}
	}
	return ns;
}

#pragma GCC pop_options

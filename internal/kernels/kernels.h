#ifndef TOWERRL_KERNELS_H
#define TOWERRL_KERNELS_H

// Activations (kernels.Act).
#define ACT_NONE 0
#define ACT_TANH 1
#define ACT_RELU 2

// Instruction-set levels (kernels.cpuLevel); LEVEL_REF is the plain reference loops.
#define LEVEL_REF 0
#define LEVEL_SSE2 1
#define LEVEL_AVX2 2
#define LEVEL_AVX512 3

int twk_cpu_level(void);
int twk_gemm(int level, int ta, int tb, long m, long n, long k, const float *a, long lda,
	     const float *b, long ldb, float *c, long ldc, int acc, const float *bias, int act,
	     const float *y, long ldy);
void twk_act_grad(int level, long n, const float *y, const float *dy, float *dz, int act);
void twk_col_sum(int level, long m, long n, const float *a, float *dst, int acc);
void twk_adam(int level, long n, float *p, const float *g, float *m, float *v, float b1, float b2,
	      float c1, float c2, float step, float sbc2, float eps);
void twk_square_sums(int level, long n, const float *g, long block, double *sums);
void twk_axpy(int level, long n, float w, const float *x, float *y);
int twk_amx_init(void);
int twk_gemm_bf16(int ta, int tb, long m, long n, long k, const float *a, long lda, const float *b,
		  long ldb, float *c, long ldc, int acc, const float *bias, int act, const float *y,
		  long ldy);

void twk_go_exp(long n, const double *x, double *y);
void twk_go_log1p(long n, const double *x, double *y);
long twk_cat2(long rows, const float *logits, const int *acts, double *ls, double *p, double *lp,
	      double *h);
void twk_cat2_backward(long rows, const double *ls, const double *p, const int *acts, const double *h,
		       const float *dlogp, double dent, float *dlogits);

#endif

// The C side of the mpi build: MPI's handles and constants (macros in Open MPI, integers in
// MPICH) stay here, so the Go side sees only ints, doubles and opaque request slots.
#ifndef TOWERRL_MPI_SHIM_H
#define TOWERRL_MPI_SHIM_H

#include <mpi.h>
#include <stdint.h>

// Reduction operators, as the Go side names them.
enum { TMPI_SUM = 0, TMPI_MAX = 1, TMPI_MIN = 2 };

// Tags of the control messages: a rank that gives up on a collective sends TMPI_TAG_ASK to
// every other rank; a rank that has finished collecting its rollout sends TMPI_TAG_FIN.
enum { TMPI_TAG_ASK = 1, TMPI_TAG_FIN = 2 };

int tmpi_init(int *rank, int *size, int *provided);
int tmpi_finalize(void);
void tmpi_abort(int code);
void tmpi_error_string(int code, char *out, int len);

int tmpi_iallreduce_f64(double *buf, int n, int op, MPI_Request *req);
int tmpi_allreduce_f64(double *buf, int n, int op);
int tmpi_ibcast(void *buf, int n, int root, MPI_Request *req);
int tmpi_iallgather(const void *send, int n, void *recv, MPI_Request *req);
int tmpi_igatherv(const void *send, int n, void *recv, const int *counts, const int *displs,
                  int root, MPI_Request *req);
int tmpi_ibarrier(MPI_Request *req);
int tmpi_test_for(MPI_Request *req, double seconds, int *done);

int tmpi_ask(const int64_t msg[3]);
int tmpi_poll_ask(int64_t msg[3], int *got);

int tmpi_fin_count(int *n);
int tmpi_fin_send(int64_t seq, int64_t steps);
int tmpi_fin_test_for(double seconds, int *done);
void tmpi_fin_take(int64_t *out);

int tmpi_allreduce_f32_blocking(float *buf, int n);

#endif

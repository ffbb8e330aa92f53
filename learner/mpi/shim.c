//go:build mpi && cgo

#include "shim.h"

#include <sched.h>
#include <stdlib.h>

// ctrl is a duplicate of MPI_COMM_WORLD for the control messages of a rank that gave up on a
// collective, so they never match the application's traffic.
static MPI_Comm ctrl = MPI_COMM_NULL;
static int world_rank = 0, world_size = 1;

// The rollout-finished messages of DD-PPO's straggler preemption (tmpi_fin_*): every rank sends
// one (call sequence number, steps) pair to every other rank per World.FinishRollout, on ctrl.
// A receive from each other rank is posted when a round starts (the first count or send), the
// pairs are taken when all have arrived, and the next round posts afresh. MPI's non-overtaking
// rule keeps one rank's rounds in order.
static MPI_Request *fin_req = NULL; // [2·size]: the receive from rank r at r, the send to it at size+r
static int64_t *fin_in = NULL;      // [2·size]: the pair rank r sent, at 2r
static int *fin_state = NULL;       // per rank: 0 nothing posted, 1 receiving, 2 received
static int *fin_idx = NULL;         // [size]: MPI_Testsome's completed indices
static int64_t fin_out[2];          // the pair being sent

int tmpi_init(int *rank, int *size, int *provided) {
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
	if (rc != MPI_SUCCESS) return rc;
	if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS) return rc;
	if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &world_rank)) != MPI_SUCCESS) return rc;
	if ((rc = MPI_Comm_size(MPI_COMM_WORLD, &world_size)) != MPI_SUCCESS) return rc;
	if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &ctrl)) != MPI_SUCCESS) return rc;
	if ((rc = MPI_Comm_set_errhandler(ctrl, MPI_ERRORS_RETURN)) != MPI_SUCCESS) return rc;
	fin_req = malloc(2 * world_size * sizeof *fin_req);
	fin_in = calloc(2 * world_size, sizeof *fin_in);
	fin_state = calloc(world_size, sizeof *fin_state);
	fin_idx = calloc(world_size, sizeof *fin_idx);
	if (!fin_req || !fin_in || !fin_state || !fin_idx) return MPI_ERR_NO_MEM;
	for (int i = 0; i < 2 * world_size; i++) fin_req[i] = MPI_REQUEST_NULL;
	*rank = world_rank;
	*size = world_size;
	return MPI_SUCCESS;
}

int tmpi_finalize(void) {
	if (fin_state) {
		for (int r = 0; r < world_size; r++) {
			if (fin_state[r] == 1 && fin_req[r] != MPI_REQUEST_NULL) { // a round begun, never finished
				MPI_Cancel(&fin_req[r]);
				MPI_Request_free(&fin_req[r]);
			}
		}
	}
	free(fin_req);
	free(fin_in);
	free(fin_state);
	free(fin_idx);
	fin_req = NULL, fin_in = NULL, fin_state = NULL, fin_idx = NULL;
	if (ctrl != MPI_COMM_NULL) MPI_Comm_free(&ctrl);
	return MPI_Finalize();
}

void tmpi_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

void tmpi_error_string(int code, char *out, int len) {
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) n = 0;
	if (n >= len) n = len - 1;
	for (int i = 0; i < n; i++) out[i] = s[i];
	out[n] = 0;
}

static MPI_Op op_of(int op) {
	switch (op) {
	case TMPI_MAX: return MPI_MAX;
	case TMPI_MIN: return MPI_MIN;
	default: return MPI_SUM;
	}
}

int tmpi_iallreduce_f64(double *buf, int n, int op, MPI_Request *req) {
	return MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, op_of(op), MPI_COMM_WORLD, req);
}

// tmpi_allreduce_f64 is the blocking MPI_Allreduce (in place) of tmpi_iallreduce_f64, called
// only once every rank is known to have reached the same call (after a polled barrier).
int tmpi_allreduce_f64(double *buf, int n, int op) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, op_of(op), MPI_COMM_WORLD);
}

int tmpi_ibcast(void *buf, int n, int root, MPI_Request *req) {
	return MPI_Ibcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD, req);
}

int tmpi_iallgather(const void *send, int n, void *recv, MPI_Request *req) {
	return MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD, req);
}

int tmpi_igatherv(const void *send, int n, void *recv, const int *counts, const int *displs,
                  int root, MPI_Request *req) {
	return MPI_Igatherv(send, n, MPI_BYTE, recv, counts, displs, MPI_BYTE, root, MPI_COMM_WORLD, req);
}

int tmpi_ibarrier(MPI_Request *req) { return MPI_Ibarrier(MPI_COMM_WORLD, req); }

// tmpi_test_for polls MPI_Test (which also drives MPI's progress) until the request completes or
// seconds have passed; *done says which. Between polls it yields the CPU to any other runnable
// thread, as Open MPI's own blocking calls do on an oversubscribed node.
int tmpi_test_for(MPI_Request *req, double seconds, int *done) {
	double end = MPI_Wtime() + seconds;
	*done = 0;
	for (;;) {
		int rc = MPI_Test(req, done, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS || *done) return rc;
		if (MPI_Wtime() >= end) return MPI_SUCCESS;
		sched_yield();
	}
}

// ask_msg is the send buffer of tmpi_ask, which a World calls at most once (it is broken after).
static int64_t ask_msg[3];

// tmpi_ask sends msg (rank, sequence number, operation) to every other rank on ctrl. The
// requests are freed at once: the messages are tiny and the job is ending.
int tmpi_ask(const int64_t msg[3]) {
	for (int i = 0; i < 3; i++) ask_msg[i] = msg[i];
	for (int r = 0; r < world_size; r++) {
		if (r == world_rank) continue;
		MPI_Request req;
		int rc = MPI_Isend(ask_msg, 3, MPI_INT64_T, r, TMPI_TAG_ASK, ctrl, &req);
		if (rc != MPI_SUCCESS) return rc;
		if ((rc = MPI_Request_free(&req)) != MPI_SUCCESS) return rc;
	}
	return MPI_SUCCESS;
}

// tmpi_poll_ask receives one pending control message into msg, if there is one.
int tmpi_poll_ask(int64_t msg[3], int *got) {
	MPI_Status st;
	int rc = MPI_Iprobe(MPI_ANY_SOURCE, TMPI_TAG_ASK, ctrl, got, &st);
	if (rc != MPI_SUCCESS || !*got) return rc;
	return MPI_Recv(msg, 3, MPI_INT64_T, st.MPI_SOURCE, TMPI_TAG_ASK, ctrl, MPI_STATUS_IGNORE);
}

// fin_post posts the round's receive from every other rank that has none.
static int fin_post(void) {
	for (int r = 0; r < world_size; r++) {
		if (r == world_rank || fin_state[r] != 0) continue;
		int rc = MPI_Irecv(&fin_in[2 * r], 2, MPI_INT64_T, r, TMPI_TAG_FIN, ctrl, &fin_req[r]);
		if (rc != MPI_SUCCESS) return rc;
		fin_state[r] = 1;
	}
	return MPI_SUCCESS;
}

// tmpi_fin_count tests the round's receives (driving MPI's progress); *n is the number of
// ranks whose pair has arrived.
int tmpi_fin_count(int *n) {
	*n = 0;
	int rc = fin_post();
	if (rc != MPI_SUCCESS) return rc;
	int done = 0;
	if ((rc = MPI_Testsome(world_size, fin_req, &done, fin_idx, MPI_STATUSES_IGNORE)) != MPI_SUCCESS) return rc;
	for (int i = 0; done != MPI_UNDEFINED && i < done; i++) fin_state[fin_idx[i]] = 2;
	for (int r = 0; r < world_size; r++) *n += fin_state[r] == 2;
	return MPI_SUCCESS;
}

// tmpi_fin_send sends (seq, steps) to every other rank. The previous round's sends have
// completed (tmpi_fin_test_for waits for them), so fin_out may be rewritten.
int tmpi_fin_send(int64_t seq, int64_t steps) {
	int rc = fin_post();
	if (rc != MPI_SUCCESS) return rc;
	fin_out[0] = seq;
	fin_out[1] = steps;
	for (int r = 0; r < world_size; r++) {
		if (r == world_rank) continue;
		rc = MPI_Isend(fin_out, 2, MPI_INT64_T, r, TMPI_TAG_FIN, ctrl, &fin_req[world_size + r]);
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_SUCCESS;
}

// tmpi_fin_test_for polls the round until every other rank's pair has arrived and this rank's
// sends have completed, or seconds have passed; *done says which.
int tmpi_fin_test_for(double seconds, int *done) {
	double end = MPI_Wtime() + seconds;
	*done = 0;
	for (;;) {
		int n = 0, sent = 0;
		int rc = tmpi_fin_count(&n);
		if (rc != MPI_SUCCESS) return rc;
		if ((rc = MPI_Testall(world_size, fin_req + world_size, &sent, MPI_STATUSES_IGNORE)) != MPI_SUCCESS) return rc;
		if (sent && n == world_size - 1) {
			*done = 1;
			return MPI_SUCCESS;
		}
		if (MPI_Wtime() >= end) return MPI_SUCCESS;
		sched_yield();
	}
}

// tmpi_fin_take copies the round's pairs into out (2·size; this rank's left as they are) and
// ends the round.
void tmpi_fin_take(int64_t *out) {
	for (int r = 0; r < world_size; r++) {
		if (r == world_rank) continue;
		out[2 * r] = fin_in[2 * r];
		out[2 * r + 1] = fin_in[2 * r + 1];
		fin_state[r] = 0;
	}
}

// tmpi_allreduce_f32_blocking is plain MPI_Allreduce (sum, float32, in place): the baseline the
// benchmarks compare the polled, float64 path against.
int tmpi_allreduce_f32_blocking(float *buf, int n) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

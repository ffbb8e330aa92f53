//go:build amd64 && cgo && !purego

package kernels

/*
#include <stdint.h>
struct cp_params;
long twk_cartpole_step(const struct cp_params *k, long n, double *state, const int64_t *act, float *obs, float *rew, float *term, int *skip);
*/
import "C"

import "unsafe"

// CartPole is ten float64s in a row, as cartpole.c's struct cp_params.
var _ [0]struct{} = [unsafe.Sizeof(CartPole{}) - 10*8]struct{}{}

func cartPoleStep(k *CartPole, state []float64, act []int, obs, rewards, terminated []float32, skip []int32) (int, bool) {
	if !goMath() {
		return 0, false
	}
	if len(act) == 0 {
		return 0, true
	}
	return int(C.twk_cartpole_step((*C.struct_cp_params)(unsafe.Pointer(k)), C.long(len(act)), f64(state),
		(*C.int64_t)(unsafe.Pointer(&act[0])), ptr(obs), ptr(rewards), ptr(terminated), i32(skip))), true
}

package vtrace_test

import (
	"fmt"

	"github.com/towerrl/towerrl/engine/vtrace"
)

// Two envs, two steps: env 0's episode terminates at step 0, env 1's goes on past the rollout.
// The target policy makes env 1's first action twice as likely as the behaviour policy did,
// so ρ = 2 is clipped to ρ̄ = 1 in δ and in the advantage.
func ExampleCompute() {
	in := vtrace.Input{
		T: 2, N: 2,
		BehaviourLogProbs: []float32{-0.7, -0.7, -0.7, -0.7},
		TargetLogProbs:    []float32{-0.7, 0, -0.7, -0.7},
		Rewards:           []float32{1, 1, 1, 1},
		Values:            []float32{0.5, 0.5, 0.5, 0.5},
		Terminated:        []float32{1, 0, 0, 0},
		Truncated:         []float32{0, 0, 0, 0},
		FinalValues:       []float32{0, 0, 0, 0},
		LastValues:        []float32{2, 2},
		Gamma:             0.5, Lambda: 1, RhoBar: 1, CBar: 1,
	}
	vs, adv := make([]float32, 4), make([]float32, 4)
	if err := vtrace.Compute(in, vs, adv); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("v_s:", vs)
	fmt.Println("advantages:", adv)
	// Output:
	// v_s: [1 2 2 2]
	// advantages: [0.5 1.5 1.5 1.5]
}

package ppo

import (
	"fmt"
	"unsafe"
)

// GAEInput is a time-major rollout of T steps × N envs, with autoreset data as package envs
// produces it: Rewards, Values, Terminated, Truncated and FinalValues are [T×N] (row t·N+i is
// step t of env i; FinalValues is read only where Truncated), LastValues [N] is the value of
// the observation after the last step.
type GAEInput struct {
	T, N                                                int
	Rewards, Values, Terminated, Truncated, FinalValues []float32
	LastValues                                          []float32
	Gamma, Lambda                                       float64
}

// GAE computes generalised advantage estimates (Schulman et al. 2016) and value targets into
// adv and ret ([T×N]):
//
//   - where an episode terminated at step t, nothing is bootstrapped: δ = r − V(s_t), and the
//     trace stops;
//   - where it was truncated (and not terminated), the final observation's value is:
//     δ = r + γ·V(final_t) − V(s_t), and the trace stops (the next row is a new episode);
//   - otherwise δ = r + γ·V(s_{t+1}) − V(s_t) with V(s_T) = LastValues[i], and
//     A_t = δ + γλ·A_{t+1}.
//
// ret = adv + values (CleanRL's returns). adv and ret must share no memory with each other or
// with an input (an error names the two).
func GAE(in GAEInput, adv, ret []float32) error {
	t, n := in.T, in.N
	if t < 1 || n < 1 {
		return fmt.Errorf("ppo: GAE of %d steps × %d envs", t, n)
	}
	rows := t * n
	type column struct {
		name string
		s    []float32
	}
	ins := []column{{"Rewards", in.Rewards}, {"Values", in.Values}, {"Terminated", in.Terminated}, {"Truncated", in.Truncated},
		{"FinalValues", in.FinalValues}}
	outs := []column{{"adv", adv}, {"ret", ret}}
	for _, c := range append(ins, outs...) {
		if len(c.s) < rows {
			return fmt.Errorf("ppo: GAE: %s holds %d values for %d×%d steps", c.name, len(c.s), t, n)
		}
	}
	if len(in.LastValues) < n {
		return fmt.Errorf("ppo: GAE: LastValues holds %d values for %d envs", len(in.LastValues), n)
	}
	// The recursion reads back the advantages it wrote (A_{t+1}), and reads the inputs after
	// writing earlier rows: outputs that share memory with each other or with an input would
	// give wrong values, silently.
	ins = append(ins, column{"LastValues", in.LastValues})
	outs[0].s, outs[1].s = adv[:rows], ret[:rows] // what GAE writes
	for i, o := range outs {
		for _, c := range append(ins, outs[i+1:]...) {
			if overlap(o.s, c.s) {
				return fmt.Errorf("ppo: GAE: %s shares memory with %s; give it its own slice", o.name, c.name)
			}
		}
	}
	rewards, values, terminated, truncated, final := in.Rewards, in.Values, in.Terminated, in.Truncated, in.FinalValues
	g, gl := float32(in.Gamma), float32(in.Gamma*in.Lambda)
	// Time-major, a step's N envs at a time: the rows are read in memory order, and the
	// envs' recursions are independent of each other, so they overlap in the CPU (one env at a
	// time, each step waits for the step after it, and reads a cache line N rows away). A_{t+1}
	// is the row just written. Each value is the same float32 operations in the same order as
	// one env's recursion (gaeEnvMajor in the tests), so the same bits.
	for s := t - 1; s >= 0; s-- {
		k := s * n
		r, v, term, trunc, fv := rewards[k:k+n], values[k:k+n], terminated[k:k+n], truncated[k:k+n], final[k:k+n]
		a, rt := adv[k:k+n], ret[k:k+n]
		vNext, aNext := in.LastValues[:n], []float32(nil)
		if s+1 < t {
			vNext, aNext = values[k+n:k+2*n], adv[k+n:k+2*n]
		}
		for i := range a {
			var next float32 // A_t
			switch {
			case term[i] != 0:
				next = r[i] - v[i]
			case trunc[i] != 0:
				next = r[i] + g*fv[i] - v[i]
			default:
				var an float32 // A_{t+1}, 0 after the last step
				if len(aNext) > 0 {
					an = aNext[i]
				}
				delta := r[i] + g*vNext[i] - v[i]
				next = delta + gl*an
			}
			a[i] = next
			rt[i] = next + v[i]
		}
	}
	return nil
}

// overlap reports whether a and b share an element.
func overlap(a, b []float32) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+4*uintptr(len(b)) && b0 < a0+4*uintptr(len(a))
}

package ppo

import "fmt"

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
// ret = adv + values (CleanRL's returns).
func GAE(in GAEInput, adv, ret []float32) error {
	t, n := in.T, in.N
	if t < 1 || n < 1 {
		return fmt.Errorf("ppo: GAE of %d steps × %d envs", t, n)
	}
	rows := t * n
	for _, c := range []struct {
		name string
		s    []float32
	}{{"Rewards", in.Rewards}, {"Values", in.Values}, {"Terminated", in.Terminated}, {"Truncated", in.Truncated},
		{"FinalValues", in.FinalValues}, {"adv", adv}, {"ret", ret}} {
		if len(c.s) < rows {
			return fmt.Errorf("ppo: GAE: %s holds %d values for %d×%d steps", c.name, len(c.s), t, n)
		}
	}
	if len(in.LastValues) < n {
		return fmt.Errorf("ppo: GAE: LastValues holds %d values for %d envs", len(in.LastValues), n)
	}
	rewards, values, terminated, truncated := in.Rewards, in.Values, in.Terminated, in.Truncated
	g, gl := float32(in.Gamma), float32(in.Gamma*in.Lambda)
	for i := range n {
		var next float32 // A_{t+1}
		for s := t - 1; s >= 0; s-- {
			k := s*n + i
			var delta float32
			switch {
			case terminated[k] != 0:
				delta = rewards[k] - values[k]
				next = delta
			case truncated[k] != 0:
				delta = rewards[k] + g*in.FinalValues[k] - values[k]
				next = delta
			default:
				v := in.LastValues[i]
				if s+1 < t {
					v = values[k+n]
				}
				delta = rewards[k] + g*v - values[k]
				next = delta + gl*next
			}
			adv[k] = next
			ret[k] = next + values[k]
		}
	}
	return nil
}

package engine

import "fmt"

// GAE computes generalised advantage estimates (Schulman et al. 2016) and value targets over a
// time-major rollout of T steps × N envs, with autoreset data as package envs produces it:
//
//   - where an episode terminated at step t, nothing is bootstrapped: δ = r − V(s_t), and the
//     trace stops;
//   - where it was truncated (and not terminated), the final observation's value is:
//     δ = r + γ·V(final_t) − V(s_t), and the trace stops (the next row is a new episode);
//   - otherwise δ = r + γ·V(s_{t+1}) − V(s_t) with V(s_T) = last[i], and
//     A_t = δ + γλ·A_{t+1}.
//
// values, rewards, terminated, truncated, finalValues, adv and ret are [T×N]; finalValues is
// read only where truncated; last is [N]. ret = adv + values (CleanRL's returns).
func GAE(rewards, values, terminated, truncated, finalValues, last []float32, t, n int, gamma, lambda float64, adv, ret []float32) error {
	rows := t * n
	for name, s := range map[string][]float32{"rewards": rewards, "values": values, "terminated": terminated,
		"truncated": truncated, "finalValues": finalValues, "adv": adv, "ret": ret} {
		if len(s) < rows {
			return fmt.Errorf("engine: GAE: %s holds %d values for %d×%d steps", name, len(s), t, n)
		}
	}
	if len(last) < n {
		return fmt.Errorf("engine: GAE: last holds %d values for %d envs", len(last), n)
	}
	g, gl := float32(gamma), float32(gamma*lambda)
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
				delta = rewards[k] + g*finalValues[k] - values[k]
				next = delta
			default:
				v := last[i]
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

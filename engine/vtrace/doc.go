// Package vtrace computes V-trace targets and policy-gradient advantages (Espeholt et al. 2018,
// "IMPALA", eq. 1 and section 4.2) for time-major rollouts of T steps × N envs, the off-policy
// correction IMPALA and APPO apply to rollouts collected by an older (behaviour) policy μ and
// learned by the current (target) policy π.
//
// # Definition
//
// With ρ_t = π(a_t|x_t)/μ(a_t|x_t) = exp(log π − log μ), computed per row from the two
// log-probabilities (so the package is indifferent to the head: categorical and Gaussian heads
// both just give log-probabilities),
//
//	δ_t    = min(ρ̄, ρ_t) · (r_t + γ·V(x_{t+1}) − V(x_t))
//	c_t    = λ · min(c̄, ρ_t)
//	v_s    = V(x_s) + Σ_{t=s}^{e} γ^{t−s} (Π_{i=s}^{t−1} c_i) δ_t
//	A_s    = min(ρ̄_pg, ρ_s) · (r_s + γ·v_{s+1} − V(x_s))
//
// where e is the last step of x_s's episode inside the rollout. Episode ends follow the
// convention of ppo.GAE (package engine/ppo) for autoreset data:
//
//   - at a terminated step nothing is bootstrapped: V(x_{t+1}) = v_{t+1} = 0, and the sum stops;
//   - at a truncated (and not terminated) step the final observation's value is:
//     V(x_{t+1}) = v_{t+1} = FinalValues[t], and the sum stops (the next row is a new episode);
//   - after the last step V(x_T) = v_T = LastValues.
//
// [Compute] evaluates v_s by the equivalent backward recursion
// v_s − V(x_s) = δ_s + γ c_s (v_{s+1} − V(x_{s+1})), per env, accumulating in float64.
//
// With on-policy data (ρ_t = 1) and ρ̄, c̄ ≥ 1, v_s is the GAE(λ) return (advantage + value);
// with λ = 1 it is the discounted return, bootstrapped as above.
//
// The IMPALA and APPO losses (package engine/internal/vtraceloss) run Compute inside each
// tower's loss op, over the minibatch's sequences, with the current policy's log-probabilities
// and values.
//
// # Threading and ownership
//
// Compute keeps no state: it is safe for concurrent use on distinct outputs, allocates nothing,
// and neither retains nor modifies the input slices.
package vtrace

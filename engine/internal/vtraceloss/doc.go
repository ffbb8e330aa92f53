// Package vtraceloss is the V-trace actor-critic losses of IMPALA (Espeholt et al. 2018) and
// APPO (RLlib's and Sample Factory's asynchronous PPO) as fused gorgonia ops with analytic
// gradients, and the algo.Algorithm both register (packages engine/impala and engine/appo).
//
// # The losses
//
// Each tower's op reads the policy head's outputs (logits, or mean and log std) and the value
// of its rows, works out log π and the entropy H per row (package models/head's distribution
// maths, in float64), then V-trace (package engine/vtrace) under the CURRENT policy and critic:
// ρ_s = π(a_s|x_s)/μ(a_s|x_s) from the behaviour log-probabilities the batchers recorded,
// targets v_s and policy-gradient advantages A_s = min(ρ̄, ρ_s)·(r_s + γ·v_{s+1} − V(x_s)).
// v_s and A_s are constants for the gradient (stop-gradient), as in IMPALA and RLlib:
//
//	IMPALA: −mean(A_s·log π) + VfCoef·½·mean((V − v_s)²) − EntCoef·mean(H)
//	APPO:   mean(max(−A_s·r, −A_s·clip(r, 1−ε, 1+ε))) + VfCoef·½·mean((V − v_s)²) − EntCoef·mean(H)
//	        + KLCoef·mean((r − 1) − log r),   r = π/μ
//
// Means are over the tower's rows (so coefficients mean what PPO's do). APPO's KL(μ‖π) term
// is the sample estimate (r − 1) − log r (non-negative, unbiased over actions drawn from μ),
// since a batch carries only μ's log-probability of the taken action, not its distribution;
// its gradient is KLCoef·(r − 1) per row. "approx_kl" reports the same estimate for both.
//
// # Sequences and bootstrapping
//
// V-trace needs whole time-ordered sequences (algo.Heads.SeqLen > 0): the op runs it per
// sequence with, as each step's successor value, the current critic's V(x_{t+1}) inside the
// sequence; the behaviour policy's value of the successor (SampleBatch.NextValues) at the
// sequence's last step and where the episode was truncated (as Sample Factory bootstraps
// from the collected values there); and 0 where it terminated. The sum of v_s stops at every
// episode end. With rows in no order (SeqLen 0) the op falls back to the targets
// Algorithm.Targets wrote from the behaviour values (Returns as v_s, Advantages scaled by
// min(ρ̄, ρ_s) as A_s).
//
// Threading: an Algorithm may be shared (Targets serialises on a mutex); each Loss belongs to
// one tower's goroutine, and its op allocates nothing per run beyond gorgonia's scalar result.
package vtraceloss

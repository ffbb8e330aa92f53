// Package normalize holds the running statistics a trainer normalises with: observation
// normalisation (running mean and variance per component, clipped, CleanRL's "37
// implementation details" 6–7, Stable-Baselines3's VecNormalize(norm_obs)) and reward scaling
// (rewards divided by the running standard deviation of each env's discounted return, clipped:
// details 8–9, VecNormalize(norm_reward), Gymnasium's NormalizeReward).
//
// # Observations
//
// [Obs] keeps [Moments] of the raw observations, merged a batch at a time with Chan et al.'s
// parallel algorithm, as SB3's RunningMeanStd does (a pseudo-count of [InitCount] at mean 0,
// variance 1 to start). A trainer freezes them ([Obs.Freeze]) into the affine map a policy
// applies, [Frozen]: y = clip((x − mean) · scale, −clip, clip) with scale = 1/√(var + ε), in
// float32 with one rounding per operation, which is exactly what ONNX's Sub, Mul and Clip
// compute (models.PrependObsNorm writes them in front of a policy graph). The statistics a
// rollout was collected with stay fixed while it is collected and trained on; the trainer
// merges the rollout's raw observations afterwards and publishes the new map with the new
// weights.
//
// # Rewards
//
// [Reward] keeps each env's discounted return G ← γ·G + r (set to 0 after the step that ends
// an episode, terminated or truncated, as SB3 does) and the [Moments] of those returns. Each
// time step of a rollout merges the envs' returns of that step as one batch, then divides the
// step's rewards by √(var + ε) and clips them: SB3's VecNormalize step by step. Evaluation and
// reported returns use raw rewards; only the learner sees scaled ones.
//
// # Threading and ownership
//
// None of the types is safe for concurrent use; a trainer owns them and calls them from its
// goroutine. Methods that write into caller-provided buffers allocate nothing.
package normalize

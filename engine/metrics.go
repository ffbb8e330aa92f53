package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/towerrl/towerrl/engine/algo"
)

// Metrics describe one training iteration; they are the lines of metrics.jsonl.
type Metrics struct {
	Iteration    int   `json:"iteration"`
	EnvSteps     int64 `json:"env_steps"`
	Episodes     int   `json:"episodes"` // finished during this iteration
	EpisodesAll  int64 `json:"episodes_total"`
	ReturnMean   Float `json:"return_mean"` // of the episodes finished this iteration (NaN: none)
	ReturnMin    Float `json:"return_min"`
	ReturnMax    Float `json:"return_max"`
	LengthMean   Float `json:"length_mean"`
	PolicyLoss   Float `json:"policy_loss"`
	ValueLoss    Float `json:"value_loss"`
	Entropy      Float `json:"entropy"`
	ApproxKL     Float `json:"approx_kl"`
	OldApproxKL  Float `json:"old_approx_kl"` // ppo: CleanRL's older estimate, mean(−log r)
	ClipFrac     Float `json:"clip_frac"`
	ExplainedVar Float `json:"explained_variance"`
	LR           Float `json:"lr"`
	CollectSPS   Float `json:"collect_steps_per_sec"` // asynchronous: steps trained per second of wall time
	LearnSPS     Float `json:"learn_samples_per_sec"`
	Version      int64 `json:"policy_version"`
	WallSeconds  Float `json:"wall_seconds"`
	// Where the iteration's time went: collecting the rollout, the learner's updates,
	// publishing the new policy (export, hot swap into the batchers, policy.onnx), and the
	// checkpoint's share of the critical path (its snapshot; it is written on a goroutine).
	CollectSeconds Float `json:"collect_seconds"`
	LearnSeconds   Float `json:"learn_seconds"`
	// AllReduceSeconds (DD-PPO only) is the part of LearnSeconds this rank spent in the
	// cross-rank all-reduces of its updates, waiting for the other ranks included.
	AllReduceSeconds Float `json:"allreduce_seconds,omitempty"`
	// AllReducePerUpdate (DD-PPO only) is AllReduceSeconds over the iteration's minibatch
	// updates, in µs: the cost each update pays for training across the ranks.
	AllReducePerUpdate Float `json:"allreduce_us_per_update,omitempty"`
	PublishSeconds     Float `json:"publish_seconds"`
	CheckpointSeconds  Float `json:"checkpoint_seconds"`

	// Eval is the evaluation run after this iteration (Config.EvalEvery; nil when none was
	// due). TensorBoard: eval/episodic_return, eval/episodic_return_std, eval/episodic_length.
	Eval *EvalMetrics `json:"eval,omitempty"`
	// GIF is the episode drawn after this iteration (Config.GifEvery): its file in the run
	// directory, gifs/step-<env steps>.gif ("" when none was due).
	GIF string `json:"gif,omitempty"`

	// Async holds what an asynchronous algorithm's iteration adds (nil for ppo).
	Async *AsyncMetrics `json:"async,omitempty"`
	// Transport describes the rollouts taken from Options.Source (remote batchers) this
	// iteration (nil without a source).
	Transport *TransportMetrics `json:"transport,omitempty"`
	// Preemption describes a DD-PPO iteration's straggler preemption (nil when it is off).
	Preemption *PreemptMetrics `json:"preemption,omitempty"`
	// Replay describes an off-policy iteration (dqn, sac): the replay buffer's fill, the
	// updates and their rate, the exploration rate (nil for the other algorithms).
	Replay *ReplayMetrics `json:"replay,omitempty"`
	// Stats holds every statistic the algorithm reports, by name (algo.Algorithm.StatNames,
	// means over the iteration's updates): those of the fields above and the algorithm's own,
	// such as the total loss and V-trace's rho_mean and rho_clip_frac. TensorBoard shows each
	// as losses/<name>.
	Stats map[string]Float `json:"stats,omitempty"`
}

// statMap is stats by name.
func statMap(stats algo.Stats) map[string]Float {
	m := make(map[string]Float, len(stats.Names))
	for i, name := range stats.Names {
		if i < len(stats.Values) {
			m[name] = Float(stats.Values[i])
		}
	}
	return m
}

// AsyncMetrics describe an asynchronous iteration (impala, appo): the policy lag of the rows
// trained, and who waited for whom.
type AsyncMetrics struct {
	// PolicyLag is, over the rows trained this iteration, how many versions the policy that
	// chose each action was behind the learner's: mean, max, and a histogram
	// (LagHistogram[k] rows lagged k versions; the last bucket holds every lag from its
	// index on).
	PolicyLagMean Float   `json:"policy_lag_mean"`
	PolicyLagMax  int64   `json:"policy_lag_max"`
	LagHistogram  []int64 `json:"policy_lag_histogram"`
	// Queue is the rollouts waiting in the ring when the learner took this one; Dropped the
	// rollouts dropped past max_policy_lag since the run (or its resume) started.
	Queue   int   `json:"queue"`
	Dropped int64 `json:"dropped"`
	// BatcherIdle is the fraction of this iteration's wall time the batchers sat blocked on
	// a full ring (the learner is the bottleneck), LearnerIdle the fraction the learner waited
	// for a rollout (the batchers are).
	BatcherIdle Float `json:"batcher_idle"`
	LearnerIdle Float `json:"learner_idle"`

	rate float64 // rows trained per second of wall time since the previous iteration
}

// Float is a float64 whose JSON form is null for NaN and ±Inf (an iteration in which no
// episode ended has no return statistics).
type Float float64

// MarshalJSON writes null for NaN and ±Inf.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads null as NaN.
func (f *Float) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Float(math.NaN())
		return nil
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = Float(v)
	return err
}

// Result summarises a finished run.
type Result struct {
	EvalReturnMean float64 `json:"eval_return_mean"`
	EvalReturnStd  float64 `json:"eval_return_std"`
	EvalEpisodes   int     `json:"eval_episodes"`
	EnvSteps       int64   `json:"env_steps"`
	Iterations     int     `json:"iterations"`
	WallSeconds    float64 `json:"wall_seconds"`
	TrainSeconds   float64 `json:"train_seconds"` // collection and learning, without evaluation
	Policy         string  `json:"policy"`        // path of the exported ONNX policy ("" without Out)
	Curve          string  `json:"curve,omitempty"`
	Dir            string  `json:"dir,omitempty"`
	// ParamsSHA256 is the SHA-256 of the final parameters (float32, little-endian): the ranks
	// of a DD-PPO job print the same.
	ParamsSHA256 string `json:"params_sha256"`
	// RolloutsTrained and RolloutsDropped count, with Options.Source, the rollouts this
	// process trained on and those it dropped (of an older policy version than ppo trains on,
	// or past max_policy_lag).
	RolloutsTrained int64 `json:"rollouts_trained,omitempty"`
	RolloutsDropped int64 `json:"rollouts_dropped,omitempty"`
	// Async sums an asynchronous run's iterations (impala, appo): the lag histogram, mean and
	// max over every row trained, rollouts dropped, and the fractions of the wall time the
	// batchers sat blocked and the learner waited.
	Async *AsyncMetrics `json:"async,omitempty"`
	// Rank and Ranks place a DD-PPO process in its job (absent for one process).
	Rank  int `json:"rank,omitempty"`
	Ranks int `json:"ranks,omitempty"`
	// Complete is set by a Resume of a run that had already trained all its iterations (or
	// had stopped at StopAtReturn): nothing was trained, and the evaluation is of its trained
	// policy.
	Complete bool `json:"already_complete,omitempty"`
	// Best is the best policy the evaluations during training found (Config.EvalEvery; nil
	// without them, on the ranks of a DD-PPO job other than 0, and before the first).
	Best *BestPolicy `json:"best,omitempty"`
	// StoppedEarly says why the run ended before TotalSteps (an evaluation reached
	// StopAtReturn); empty when it did not.
	StoppedEarly string `json:"stopped_early,omitempty"`
}

// explainedVariance is 1 − Var(returns − values)/Var(returns), NaN when the returns are constant
// (or there are none). Two passes in float64: the means, then the squared deviations. Constant
// returns give exactly 0 (float32 values summed in float64 are exact up to 2²⁹ of them, so the
// mean is the value itself).
func explainedVariance(values, returns []float32) float64 {
	n := len(values)
	if n == 0 {
		return math.NaN()
	}
	returns = returns[:n]
	var sy, sd float64
	for i, v := range values {
		sy += float64(returns[i])
		sd += float64(returns[i] - v)
	}
	my, md := sy/float64(n), sd/float64(n)
	var vy, vd float64
	for i, v := range values {
		y, d := float64(returns[i])-my, float64(returns[i]-v)-md
		vy += y * y
		vd += d * d
	}
	if vy == 0 {
		return math.NaN()
	}
	return 1 - vd/vy
}

// ErrNonFinite is wrapped by the error of a run stopped by a NaN or infinite loss or weight.
var ErrNonFinite = errors.New("engine: training diverged")

// finite checks the learner's statistics and the parameters.
func finite(stats algo.Stats, params []float32) error {
	for i, v := range stats.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			name := "statistic " + strconv.Itoa(i)
			if i < len(stats.Names) {
				name = stats.Names[i]
			}
			return fmt.Errorf("%w: the %s is %v", ErrNonFinite, name, v)
		}
	}
	for i, v := range params {
		if v != v || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: parameter %d of %d became %v (the gradient was not finite)", ErrNonFinite, i, len(params), v)
		}
	}
	return nil
}

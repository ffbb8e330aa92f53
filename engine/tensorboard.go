package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/engine/rundir"
)

// The TensorBoard tags of an iteration's metrics: CleanRL's names for what CleanRL logs, then
// towerrl's own. The x axis is the env steps trained so far (Metrics.EnvSteps).
const (
	tagReturn       = "charts/episodic_return"    // mean return of the episodes ended in the iteration
	tagLength       = "charts/episodic_length"    // their mean length
	tagSPS          = "charts/SPS"                // env steps per second of wall time, over the iteration
	tagLR           = "charts/learning_rate"      // the iteration's learning rate
	tagValueLoss    = "losses/value_loss"         //
	tagPolicyLoss   = "losses/policy_loss"        //
	tagEntropy      = "losses/entropy"            //
	tagApproxKL     = "losses/approx_kl"          //
	tagOldApproxKL  = "losses/old_approx_kl"      // ppo
	tagClipFrac     = "losses/clipfrac"           // not for impala, which does not clip
	tagExplainedVar = "losses/explained_variance" //
	tagEvalReturn   = "eval/episodic_return"      // mean return of an evaluation during training (Config.EvalEvery)
	tagEpisode      = "episode"                   // an episode drawn as a GIF (Config.GifEvery), an image
	tagHyperparams  = "hyperparameters"           // the run's config.json as a table (text), once
)

// tensorBoard makes the figures of a run's metrics lines for its TensorBoard event files
// (rundir.Dir.TensorBoard), one event per iteration.
type tensorBoard struct {
	// The env steps and wall seconds of the previous iteration of this process (of the
	// checkpoint resumed from, and 0 s, at first), for charts/SPS.
	steps int64
	wall  float64
	vs    []rundir.Scalar // reused
}

// openTensorBoard attaches a TensorBoard log to run (with a folder, unless off), from the
// step of the checkpoint it continues; a fresh run's file starts with the configuration as
// the text summary "hyperparameters" (see rundir.Dir.TensorBoard).
func openTensorBoard(run *runDir, cfg Config, off bool) error {
	var step int64
	if h := run.History(); len(h) > 0 {
		step = h[len(h)-1].EnvSteps
	}
	b := &tensorBoard{steps: step}
	return run.TensorBoard(off, step, tagHyperparams, func() (string, error) { return hyperparameters(cfg) }, b.figures)
}

// figures are m's figures at step m.EnvSteps (those that are NaN, such as the return of an
// iteration in which no episode ended, are left out of the file).
func (b *tensorBoard) figures(m Metrics) (int64, []rundir.Scalar) {
	f := func(tag string, v Float) { b.vs = append(b.vs, rundir.Scalar{Tag: tag, Value: float64(v)}) }
	b.vs = b.vs[:0]
	f(tagReturn, m.ReturnMean)
	f(tagLength, m.LengthMean)
	sps := Float(float64(m.EnvSteps-b.steps) / (float64(m.WallSeconds) - b.wall))
	b.steps, b.wall = m.EnvSteps, float64(m.WallSeconds)
	f(tagSPS, sps)
	f(tagLR, m.LR)
	f(tagValueLoss, m.ValueLoss)
	f(tagPolicyLoss, m.PolicyLoss)
	f(tagEntropy, m.Entropy)
	f(tagApproxKL, m.ApproxKL)
	f(tagOldApproxKL, m.OldApproxKL)
	f(tagClipFrac, m.ClipFrac)
	f(tagExplainedVar, m.ExplainedVar)
	f("charts/episodic_return_min", m.ReturnMin)
	f("charts/episodic_return_max", m.ReturnMax)
	f("charts/episodes", Float(m.Episodes))
	f("charts/policy_version", Float(m.Version))
	f("charts/collect_sps", m.CollectSPS)
	f("charts/learn_sps", m.LearnSPS)
	f("time/collect_seconds", m.CollectSeconds)
	f("time/learn_seconds", m.LearnSeconds)
	f("time/publish_seconds", m.PublishSeconds)
	f("time/checkpoint_seconds", m.CheckpointSeconds)
	for _, name := range slices.Sorted(maps.Keys(m.Stats)) {
		if !named[name] {
			f(statTag(name), m.Stats[name])
		}
	}
	if e := m.Eval; e != nil {
		f(tagEvalReturn, e.ReturnMean)
		f("eval/episodic_return_std", e.ReturnStd)
		f("eval/episodic_length", e.LengthMean)
	}
	if m.AllReduceSeconds != 0 {
		f("ddppo/allreduce_seconds", m.AllReduceSeconds)
		f("ddppo/allreduce_us_per_update", m.AllReducePerUpdate)
	}
	if p := m.Preemption; p != nil {
		f("ddppo/preempted_ranks", Float(p.Preempted))
		f("ddppo/preempt_wait_seconds", p.WaitSeconds)
	}
	if a := m.Async; a != nil {
		f("async/policy_lag_mean", a.PolicyLagMean)
		f("async/policy_lag_max", Float(a.PolicyLagMax))
		f("async/queue", Float(a.Queue))
		f("async/dropped", Float(a.Dropped))
		f("async/batcher_idle", a.BatcherIdle)
		f("async/learner_idle", a.LearnerIdle)
	}
	if r := m.Replay; r != nil {
		f("replay/buffer_fill", Float(r.BufferFill))
		f("replay/updates", Float(r.Updates))
		f("replay/updates_per_sec", r.UpdatesPerSec)
	}
	if t := m.Transport; t != nil {
		f("transport/rollouts", Float(t.Rollouts))
		f("transport/bytes", Float(t.Bytes))
		f("transport/bytes_per_sec", t.BytesPerSec)
		f("transport/latency_seconds", t.LatencySeconds)
	}
	return m.EnvSteps, b.vs
}

// named are the statistics (Metrics.Stats) written under the tags of their Metrics fields.
var named = map[string]bool{"policy_loss": true, "value_loss": true, "entropy": true, "approx_kl": true, "old_approx_kl": true, "clip_frac": true}

// statTag is the tag of an algorithm's statistic: losses/<name>, as CleanRL files its
// algorithms' figures (losses/qf1_loss, losses/alpha), but charts/epsilon for DQN's
// exploration rate, which CleanRL files under charts.
func statTag(name string) string {
	if name == "epsilon" {
		return "charts/epsilon"
	}
	return "losses/" + name
}

// hyperparameters is cfg as CleanRL logs its arguments: a Markdown table of every field of
// config.json, in its order, each value in its JSON form.
func hyperparameters(cfg Config) (string, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return "", err
	}
	var sb strings.Builder
	sb.WriteString("|param|value|\n|-|-|")
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "\n|%s|%s|", key, strings.ReplaceAll(string(v), "|", `\|`))
	}
	return sb.String(), nil
}

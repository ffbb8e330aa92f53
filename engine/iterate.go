package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/algo"
)

// iterate runs iteration it: collect a rollout, fill the learner's batch, train on it, publish
// the new weights to the batchers, and return the iteration's metrics.
func (t *trainer) iterate(ctx context.Context, it, iters int) (Metrics, error) {
	t.pm.BeginIteration(it, t.opt) // a new critic's warm-up
	c0 := time.Now()
	r, err := t.col.collect(ctx, t.version)
	if err != nil {
		return Metrics{}, err
	}
	collect := time.Since(c0)
	rows := r.T * r.N
	b := t.batch
	nr, err := t.normalized(ctx, r)
	if err != nil {
		return Metrics{}, err
	}
	if err := t.fill(nr); err != nil {
		return Metrics{}, err
	}
	// The rows are in the learner's batch: the batchers may refill the rollout's buffer.
	if err := t.col.release(ctx); err != nil {
		return Metrics{}, err
	}
	ev := explainedVariance(b.Values[:rows], b.Returns[:rows])
	t.pm.Targets(it, b.Returns[:rows]) // a new critic starts from the first returns
	l0 := time.Now()
	lr := t.opt.CurrentLR() // the rate of this iteration's updates (constant within one)
	res, err := t.red.learn(ctx, t.l, b, it, rows)
	if err != nil {
		return Metrics{}, err
	}
	if err := t.red.reduceStats(ctx, res.Stats); err != nil {
		return Metrics{}, err
	}
	// Training health: a non-finite loss or weight stops the run here, before this update is
	// exported, checkpointed or written, so the last good policy and checkpoint stay.
	stats := algo.Stats{Names: t.alg.StatNames(), Values: res.Stats}
	if err := finite(stats, t.pm.Flat()); err != nil {
		return Metrics{}, fmt.Errorf("%w (lower lr or max_grad_norm, or look for NaN in the env's observations and rewards)", err)
	}
	// The rollout's observations join the normaliser's statistics; the new map goes out with
	// the new weights.
	if err := t.obsNorm.commit(ctx, t.red); err != nil {
		return Metrics{}, err
	}
	learn := time.Since(l0)
	t.steps += t.red.rowsCollected(rows)
	trained := t.version // the learner's version before the update, which the lag counts from
	t.version++
	p0 := time.Now()
	if t.version%t.publishEvery == 0 {
		if err := t.publish(ctx); err != nil {
			return Metrics{}, err
		}
	}
	publish := time.Since(p0)
	nan := Float(math.NaN())
	m := Metrics{Iteration: it + 1, EnvSteps: t.steps, Episodes: len(r.Episodes), ReturnMean: nan, ReturnMin: nan,
		ReturnMax: nan, LengthMean: nan, PolicyLoss: Float(stats.Get("policy_loss")), ValueLoss: Float(stats.Get("value_loss")),
		Entropy: Float(stats.Get("entropy")), ApproxKL: Float(stats.Get("approx_kl")),
		OldApproxKL: Float(stats.Get("old_approx_kl")), ClipFrac: Float(stats.Get("clip_frac")), ExplainedVar: Float(ev), LR: Float(lr),
		CollectSPS: Float(float64(rows) / collect.Seconds()), LearnSPS: Float(float64(res.Trained) / learn.Seconds()), Version: t.version,
		CollectSeconds: Float(collect.Seconds()), LearnSeconds: Float(learn.Seconds()), PublishSeconds: Float(publish.Seconds())}
	t.col.metrics(&m, b, rows, trained, collect)
	t.red.metrics(&m, res)
	episodeStats(&m, r.Episodes)
	m.Stats = statMap(stats)
	if err := t.red.reduceEpisodes(ctx, &m, r.Episodes); err != nil {
		return Metrics{}, err
	}
	t.eps += int64(m.Episodes)
	m.EpisodesAll = t.eps
	return m, nil
}

// fillRows writes rollout r into the learner's batch as it comes, with the algorithm's
// targets (PPO's GAE advantages and returns).
func (t *trainer) fillRows(r *batcher.Rollout) error {
	rows, od := r.T*r.N, r.ObsDim
	b := t.batch
	if err := t.alg.Targets(targetsOf(r), b.Advantages, b.Returns); err != nil {
		return err
	}
	copy(b.Obs, r.Obs[:rows*od])
	copy(b.Actions, r.Actions[:rows*r.ActDim])
	copy(b.Rewards, r.Rewards[:rows])
	copy(b.Terminated, r.Terminated[:rows])
	copy(b.Truncated, r.Truncated[:rows])
	copy(b.LogP, r.LogP[:rows])
	copy(b.Values, r.Values[:rows])
	copy(b.Version, r.Version[:rows])
	return b.SetLen(rows)
}

// fillVTrace writes rollout r into the learner's batch for an asynchronous algorithm: its
// targets time-major, then whole sequences (fillAsync).
func (t *trainer) fillVTrace(r *batcher.Rollout) error {
	if err := t.alg.Targets(targetsOf(r), t.adv, t.ret); err != nil {
		return err
	}
	return t.fillAsync(r, t.seqLen)
}

// fillRecurrent writes rollout r into the learner's batch for a recurrent policy: its targets
// time-major, then whole sequences with their first states (fillSequences).
func (t *trainer) fillRecurrent(r *batcher.Rollout) error {
	if err := t.alg.Targets(targetsOf(r), t.adv, t.ret); err != nil {
		return err
	}
	return t.fillSequences(r)
}

// targetsOf is the rollout's columns the algorithm's targets read.
func targetsOf(r *batcher.Rollout) algo.Rollout {
	return algo.Rollout{T: r.T, N: r.N, Rewards: r.Rewards, Values: r.Values, Terminated: r.Terminated, Truncated: r.Truncated,
		FinalValues: r.FinalValues, LastValues: r.LastValues}
}

// episodeStats sets m's return and length statistics over the episodes that ended.
func episodeStats(m *Metrics, eps []batcher.Episode) {
	if len(eps) == 0 {
		return
	}
	var ret, length batcher.Stats
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, e := range eps {
		ret.Add(e.Return)
		length.Add(float64(e.Length))
		lo, hi = math.Min(lo, e.Return), math.Max(hi, e.Return)
	}
	m.ReturnMean, m.ReturnMin, m.ReturnMax, m.LengthMean = Float(ret.Mean()), Float(lo), Float(hi), Float(length.Mean())
}

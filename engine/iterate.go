package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
)

// iterate runs iteration it: collect a rollout, fill the learner's batch, train on it, publish
// the new weights to the batchers, and return the iteration's metrics.
func (t *trainer) iterate(ctx context.Context, it, iters int) (Metrics, error) {
	cfg := t.cfg
	t.pm.BeginIteration(it, t.opt) // a new critic's warm-up
	c0 := time.Now()
	r, err := t.collectRank(ctx)
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
	if err := t.release(ctx); err != nil {
		return Metrics{}, err
	}
	ev := explainedVariance(b.Values[:rows], b.Returns[:rows])
	t.pm.Targets(it, b.Returns[:rows]) // a new critic starts from the first returns
	l0 := time.Now()
	lr := t.opt.CurrentLR() // the rate of this iteration's updates (constant within one)
	var res learner.Result
	if p := t.preempting(); p != nil { // the ranks' rows differ: the rank runs the schedule itself
		if res, err = p.learn(ctx, t.rs.coll, b, it); err != nil {
			return Metrics{}, err
		}
	} else {
		if t.rs != nil {
			if err := t.rs.coll.SetWeight(float64(rows)); err != nil {
				return Metrics{}, err
			}
		}
		if err := t.l.Submit(ctx, b); err != nil {
			return Metrics{}, err
		}
		select {
		case res = <-t.l.Results():
		case <-ctx.Done():
			return Metrics{}, ctx.Err()
		}
		if res.Err != nil {
			return Metrics{}, res.Err
		}
		<-t.l.Released()
	}
	if t.rs != nil {
		if err := t.rs.reduceStats(ctx, res.Stats); err != nil {
			return Metrics{}, err
		}
	}
	// Training health: a non-finite loss or weight stops the run here, before this update is
	// exported, checkpointed or written, so the last good policy and checkpoint stay.
	stats := algo.Stats{Names: t.alg.StatNames(), Values: res.Stats}
	if err := finite(stats, t.pm.Flat()); err != nil {
		return Metrics{}, fmt.Errorf("%w (lower lr or max_grad_norm, or look for NaN in the env's observations and rewards)", err)
	}
	// The rollout's observations join the normaliser's statistics; the new map goes out with
	// the new weights.
	if err := t.obsNorm.commit(ctx, t.rs); err != nil {
		return Metrics{}, err
	}
	learn := time.Since(l0)
	var allreduce time.Duration
	if t.rs != nil {
		_, cross := t.rs.coll.Timing()
		allreduce, t.rs.cross = cross-t.rs.cross, cross
	}
	var am *AsyncMetrics
	if t.async != nil {
		am = t.asyncMetrics(b, rows, collect)
	}
	if t.rs != nil {
		t.steps += t.rs.rowsCollected(rows)
	} else {
		t.steps += int64(rows)
	}
	t.version++
	p0 := time.Now()
	if t.async == nil || t.version%int64(cfg.BroadcastInterval) == 0 {
		if err := t.publish(ctx); err != nil {
			return Metrics{}, err
		}
	}
	publish := time.Since(p0)
	nan := Float(math.NaN())
	m := Metrics{Iteration: it + 1, EnvSteps: t.steps, Episodes: len(r.Episodes), ReturnMean: nan, ReturnMin: nan,
		ReturnMax: nan, LengthMean: nan, PolicyLoss: Float(stats.Get("policy_loss")), ValueLoss: Float(stats.Get("value_loss")),
		Entropy: Float(stats.Get("entropy")), ApproxKL: Float(stats.Get("approx_kl")), ClipFrac: Float(stats.Get("clip_frac")), ExplainedVar: Float(ev), LR: Float(lr),
		CollectSPS: Float(float64(rows) / collect.Seconds()), LearnSPS: Float(float64(res.Trained) / learn.Seconds()), Version: t.version,
		CollectSeconds: Float(collect.Seconds()), LearnSeconds: Float(learn.Seconds()), PublishSeconds: Float(publish.Seconds()), Async: am, AllReduceSeconds: Float(allreduce.Seconds())}
	if am != nil {
		m.CollectSPS = Float(am.rate) // the batchers never wait for this iteration: its wait is no rate
	} else if t.source != nil {
		// A rollout the remote batchers finished while the learner trained is taken at
		// once: the wait for it (nanoseconds) is no rate (21 billion steps/s were reported).
		// The rows over the iteration's whole span are.
		m.CollectSPS = Float(float64(rows) / time.Since(t.iterEnd).Seconds())
	}
	t.iterEnd = time.Now()
	if t.source != nil {
		m.Transport = t.source.transport()
	}
	if t.rs != nil {
		m.Preemption = t.rs.pre.metrics()
		if res.Updates > 0 {
			m.AllReducePerUpdate = Float(1e6 * allreduce.Seconds() / float64(res.Updates))
		}
	}
	episodeStats(&m, r.Episodes)
	m.Stats = statMap(stats)
	if t.rs != nil {
		if err := t.rs.reduceEpisodes(ctx, &m, r.Episodes); err != nil {
			return Metrics{}, err
		}
	}
	t.eps += int64(m.Episodes)
	m.EpisodesAll = t.eps
	return m, nil
}

// fill turns a rollout into the learner's batch: GAE's (or the algorithm's) targets, and the
// rows in the layout the towers train on (whole sequences for V-trace and recurrent policies).
func (t *trainer) fill(r *batcher.Rollout) error {
	n, od := r.N, r.ObsDim
	rows := r.T * n
	b := t.batch
	ro := algo.Rollout{T: r.T, N: n, Rewards: r.Rewards, Values: r.Values, Terminated: r.Terminated, Truncated: r.Truncated,
		FinalValues: r.FinalValues, LastValues: r.LastValues}
	if t.async != nil {
		if err := t.alg.Targets(ro, t.adv, t.ret); err != nil {
			return err
		}
		if err := t.fillAsync(r, t.seqLen); err != nil {
			return err
		}
	} else if t.seqs {
		if err := t.alg.Targets(ro, t.adv, t.ret); err != nil {
			return err
		}
		if err := t.fillSequences(r); err != nil {
			return err
		}
	} else {
		if err := t.alg.Targets(ro, b.Advantages, b.Returns); err != nil {
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
		if err := b.SetLen(rows); err != nil {
			return err
		}
	}
	return nil
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

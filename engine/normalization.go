package engine

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/normalize"
	"github.com/towerrl/towerrl/models"
)

// Observation normalisation and reward scaling (Config.NormObs, Config.NormReward), as the
// trainer runs them.
//
// The observation map is part of the policy: its mean and scale are initializers of the
// exported graph (models.PrependObsNorm), published in place with the weights, so the
// batchers (and policy.onnx, and every remote batcher) feed raw observations. The map a rollout
// was collected with is the one published with the version its rows carry; the trainer keeps
// the maps of the versions that may still come back (an asynchronous run's rollouts lag) and
// normalises each row with its own, so the learner trains on exactly the inputs the batchers'
// policy saw. After the update the rollout's raw observations are merged into the statistics
// (over every rank of a DD-PPO job), and the new map goes out with the new weights.
//
// Rewards are scaled by the trainer alone, before the targets: the rollout's raw rewards give
// the episodes' returns in the metrics and evaluation. Each env's running return follows the
// rollouts in the order they are trained on: exact for the run's own batchers (each rollout
// continues the last), an approximation with remote batchers (Options.Source), whose collect
// tasks' rollouts arrive interleaved and share the envs' indices, and where a rollout is
// dropped.

// obsNorm is the run's observation normalisation; a nil *obsNorm is none, and its methods
// then leave everything as it is.
type obsNorm struct {
	stats *normalize.Obs
	input string                      // the graph input it is written in front of
	cur   normalize.Frozen            // the map of the statistics now
	hist  map[int64]*normalize.Frozen // the map published with each version still in use
	obs   []float32                   // the rollout's normalised observations
	flat  []float32                   // the published vector: parameters, then mean and scale
}

func newObsNorm(cfg Config, dim int, input string) *obsNorm {
	if !cfg.NormObs {
		return nil
	}
	n := &obsNorm{stats: normalize.NewObs(dim, cfg.ClipObs), input: input, hist: map[int64]*normalize.Frozen{}}
	n.stats.Freeze(&n.cur)
	return n
}

// model is the normaliser written into exported policies: the current map.
func (n *obsNorm) model() models.ObsNorm {
	return models.ObsNorm{Mean: n.cur.Mean, Scale: n.cur.Scale, Clip: n.cur.Clip}
}

// wrap puts the current map in front of an exported policy.
func (n *obsNorm) wrap(model []byte) ([]byte, error) {
	if n == nil || model == nil {
		return model, nil
	}
	b, err := models.PrependObsNormBytes(model, n.input, n.model())
	if err != nil {
		return nil, fmt.Errorf("engine: norm_obs: %w", err)
	}
	return b, nil
}

// layout adds the map's mean and scale to a policy's publish layout, after the parameters'
// values (params of them).
func (n *obsNorm) layout(ps []bind.Param, params int) []bind.Param {
	if n == nil {
		return ps
	}
	d := len(n.cur.Mean)
	return append(slices.Clone(ps), bind.Param{Name: models.ObsNormMean, Offset: params, Len: d},
		bind.Param{Name: models.ObsNormScale, Offset: params + d, Len: d})
}

// published is the vector Batcher.Publish takes: params, then the current map.
func (n *obsNorm) published(params []float32) []float32 {
	if n == nil {
		return params
	}
	d := len(n.cur.Mean)
	if len(n.flat) != len(params)+2*d {
		n.flat = make([]float32, len(params)+2*d)
	}
	copy(n.flat, params)
	copy(n.flat[len(params):], n.cur.Mean)
	copy(n.flat[len(params)+d:], n.cur.Scale)
	return n.flat
}

// record keeps the current map as the one version is collected with.
func (n *obsNorm) record(version int64) {
	if n == nil {
		return
	}
	f := &normalize.Frozen{Mean: slices.Clone(n.cur.Mean), Scale: slices.Clone(n.cur.Scale), Clip: n.cur.Clip}
	n.hist[version] = f
}

// apply returns r's observations normalised, each row with the map of its version, adds the
// raw ones to the statistics' pending batch, and forgets the maps of the versions before
// keep(oldest) (oldest: the oldest version among the rows; keep: collector.keep's window).
// Without normalisation they are r's own.
func (n *obsNorm) apply(r *batcher.Rollout, keep func(oldest int64) int64) ([]float32, error) {
	if n == nil {
		return r.Obs, nil
	}
	obs, oldest, err := n.normalize(r)
	if err != nil {
		return nil, err
	}
	n.prune(keep(oldest))
	return obs, nil
}

// normalize is apply's work: r's observations normalised, and the oldest version of its rows.
func (n *obsNorm) normalize(r *batcher.Rollout) ([]float32, int64, error) {
	rows, od := r.T*r.N, r.ObsDim
	if n.obs == nil || len(n.obs) < rows*od {
		n.obs = make([]float32, rows*od)
	}
	src, dst := r.Obs[:rows*od], n.obs[:rows*od]
	if err := n.stats.Add(src); err != nil {
		return nil, 0, err
	}
	oldest := int64(math.MaxInt64)
	for i := 0; i < rows; {
		v := r.Version[i]
		oldest = min(oldest, v)
		j := i + 1
		for j < rows && r.Version[j] == v {
			j++
		}
		f, ok := n.hist[v]
		if !ok {
			return nil, 0, fmt.Errorf("engine: rollout rows of policy version %d, whose observation normalisation is no longer known (versions kept: %v)", v, keys(n.hist))
		}
		if err := f.Apply(dst[i*od:j*od], src[i*od:j*od]); err != nil {
			return nil, 0, err
		}
		i = j
	}
	return dst, oldest, nil
}

// prune forgets the maps of the versions before v.
func (n *obsNorm) prune(v int64) {
	for k := range n.hist {
		if k < v {
			delete(n.hist, k)
		}
	}
}

// sourceLagWindow is how many versions back an asynchronous run fed by remote batchers with no
// MaxPolicyLag keeps the observation maps of.
const sourceLagWindow = 1024

func keys(m map[int64]*normalize.Frozen) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// commit merges the pending observations into the statistics (summed over every rank in a
// DD-PPO job) and makes the current map theirs.
func (n *obsNorm) commit(ctx context.Context, red reducer) error {
	if n == nil {
		return nil
	}
	if err := red.sum(ctx, n.stats.Pending(), "observation statistics"); err != nil {
		return err
	}
	n.stats.Commit()
	n.stats.Freeze(&n.cur)
	return nil
}

// restore sets the statistics from a checkpoint's bytes, the current map theirs, and forgets
// the maps of earlier versions.
func (n *obsNorm) restore(b []byte) error {
	if n == nil {
		return nil
	}
	if b == nil {
		return fmt.Errorf("engine: the checkpoint holds no observation statistics, and the run normalises observations")
	}
	if err := n.stats.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("engine: the checkpoint's observation statistics: %w", err)
	}
	n.stats.Freeze(&n.cur)
	clear(n.hist)
	return nil
}

// rewardNorm is the run's reward scaling; a nil *rewardNorm is none, and its methods then
// leave everything as it is.
type rewardNorm struct {
	scale *normalize.Reward
	buf   []float32
	steps int // RolloutSteps: the steps the statistics take per rollout in a DD-PPO job
}

func newRewardNorm(cfg Config, envs int) *rewardNorm {
	if !cfg.NormReward {
		return nil
	}
	return &rewardNorm{scale: normalize.NewReward(envs, cfg.Gamma, cfg.ClipReward), steps: cfg.RolloutSteps}
}

// apply returns r's rewards scaled (the per-step statistics summed over every rank of a
// DD-PPO job); without scaling, r's own.
func (n *rewardNorm) apply(ctx context.Context, r *batcher.Rollout, red reducer) ([]float32, error) {
	if n == nil {
		return r.Rewards, nil
	}
	rows := r.T * r.N
	if len(n.buf) < rows {
		n.buf = make([]float32, rows)
	}
	steps, reduce := r.T, func([]float64) error { return nil }
	if red.size() > 1 {
		steps = max(n.steps, r.T)
		reduce = func(sums []float64) error { return red.sum(ctx, sums, "reward statistics") }
	}
	if len(n.scale.Returns) != r.N {
		return nil, fmt.Errorf("engine: a rollout of %d envs; rewards are scaled for %d", r.N, len(n.scale.Returns))
	}
	if err := n.scale.Scale(n.buf[:rows], r.Rewards, r.Terminated, r.Truncated, r.T, steps, reduce); err != nil {
		return nil, err
	}
	return n.buf[:rows], nil
}

// normalized returns r as the learner sees it: a copy of the rollout's header whose
// observations and rewards are the normalised ones (the rollout's own buffers, the batchers'
// raw values, are left as they are).
func (t *trainer) normalized(ctx context.Context, r *batcher.Rollout) (*batcher.Rollout, error) {
	c := *r
	var err error
	// The maps later rollouts may need: collector.keep's.
	if c.Obs, err = t.obsNorm.apply(r, func(oldest int64) int64 { return t.col.keep(oldest, t.version) }); err != nil {
		return nil, err
	}
	if c.Rewards, err = t.rewNorm.apply(ctx, r, t.red); err != nil {
		return nil, err
	}
	return &c, nil
}

// Checkpoint keys of the normalisation state.
const (
	ckptObsNorm    = "obs_norm"
	ckptRewardNorm = "reward_norm"
)

// snapshotNorm puts the normalisation state into checkpoint c (rank 0's; nil on the other
// ranks of a DD-PPO job, which send rank 0 their envs' returns).
func (t *trainer) snapshotNorm(ctx context.Context, c *models.Checkpoint) error {
	t.obsNorm.snapshot(c)
	return t.rewNorm.snapshot(ctx, c, t.red)
}

// snapshot puts the observation statistics into c (nil: none to keep).
func (n *obsNorm) snapshot(c *models.Checkpoint) {
	if n != nil && c != nil {
		b, _ := n.stats.MarshalBinary()
		c.Bytes[ckptObsNorm] = b
	}
}

// snapshot puts every rank's envs' running returns into c (rank 0's; nil on the other ranks,
// which take part in gathering them).
func (n *rewardNorm) snapshot(ctx context.Context, c *models.Checkpoint, red reducer) error {
	if n == nil {
		return nil
	}
	b, _ := n.scale.MarshalBinary()
	all, err := red.gather(ctx, b) // every rank's envs' returns
	if err != nil {
		return err
	}
	for k := 1; c != nil && k < len(all); k++ {
		c.Bytes[fmt.Sprintf("%s.rank%d", ckptRewardNorm, k)] = all[k]
	}
	if c != nil {
		c.Bytes[ckptRewardNorm] = b
	}
	return nil
}

// restoreNorm sets the normalisation state from checkpoint c.
func (t *trainer) restoreNorm(c *models.Checkpoint) error {
	if err := t.obsNorm.restore(c.Bytes[ckptObsNorm]); err != nil {
		return err
	}
	return t.rewNorm.restore(c, t.red.rank())
}

// restore sets this rank's envs' running returns from checkpoint c.
func (n *rewardNorm) restore(c *models.Checkpoint, rank int) error {
	if n == nil {
		return nil
	}
	key := ckptRewardNorm
	if rank > 0 {
		key = fmt.Sprintf("%s.rank%d", ckptRewardNorm, rank)
	}
	b, ok := c.Bytes[key]
	if !ok {
		return fmt.Errorf("engine: the checkpoint holds no reward statistics (%s), and the run scales rewards", key)
	}
	if err := n.scale.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("engine: the checkpoint's reward statistics: %w", err)
	}
	return nil
}

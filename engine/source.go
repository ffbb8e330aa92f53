package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/towerrl/towerrl/batcher"
)

// RolloutSource feeds a run with rollouts collected elsewhere — remote batchers, through the
// learner's NATS server (cmd/train --serve, package remote) — instead of its own batchers,
// and takes its policies. See Options.Source.
type RolloutSource interface {
	// Next returns the next rollout (it belongs to the trainer) with its acknowledgement,
	// which the trainer calls once the rollout's rows are in the learner's batch or the
	// rollout is dropped: an acknowledged rollout is never delivered again.
	Next(ctx context.Context) (Received, error)
	// Publish makes policy version (an ONNX model) the one the collectors use.
	Publish(ctx context.Context, version int64, model []byte) error
}

// Received is a rollout a RolloutSource delivered: the rollout, its acknowledgement, and what
// its transport cost (for the metrics; zero when unknown).
type Received struct {
	Rollout *batcher.Rollout
	Ack     func(context.Context) error
	Bytes   int           // bytes on the wire
	Latency time.Duration // from its publication (stored) to its delivery to the trainer
}

// TransportMetrics describe the rollouts an iteration took from a RolloutSource (dropped ones
// included): bytes on the wire, their rate over the iteration's wall time, and the mean time
// from a rollout's publication to its delivery.
type TransportMetrics struct {
	Rollouts       int   `json:"rollouts"`
	Bytes          int64 `json:"bytes"`
	BytesPerSec    Float `json:"bytes_per_sec"`
	LatencySeconds Float `json:"latency_seconds"`
}

// sourceRun is the trainer's state with a RolloutSource.
type sourceRun struct {
	src     RolloutSource
	ack     func(context.Context) error // the held rollout's, until release
	dropped int64                       // rollouts refused: too old for ppo, or another shape
	trained int64                       // rollouts taken into the learner's batch

	// this iteration's transport, and when the previous one's ended
	rollouts int
	bytes    int64
	latency  time.Duration
	since    time.Time
}

// transport reports the iteration's transport and starts counting the next one's.
func (s *sourceRun) transport() *TransportMetrics {
	now := time.Now()
	m := &TransportMetrics{Rollouts: s.rollouts, Bytes: s.bytes}
	if wall := now.Sub(s.since).Seconds(); wall > 0 && !s.since.IsZero() {
		m.BytesPerSec = Float(float64(s.bytes) / wall)
	}
	if s.rollouts > 0 {
		m.LatencySeconds = Float(s.latency.Seconds() / float64(s.rollouts))
	}
	s.rollouts, s.bytes, s.latency, s.since = 0, 0, 0, now
	return m
}

// collectSource takes the source's next rollout of the run's shape (Workers×Envs envs,
// RolloutSteps steps); for a synchronous algorithm also of the current policy version (ppo
// is on-policy), for an asynchronous one at most MaxPolicyLag versions behind (when set).
// Rollouts too old are acknowledged and counted as dropped.
func (t *trainer) collectSource(ctx context.Context) (*batcher.Rollout, error) {
	s := t.source
	n := t.cfg.Workers * t.cfg.Envs
	for {
		got, err := s.src.Next(ctx)
		if err != nil {
			return nil, err
		}
		r, ack := got.Rollout, got.Ack
		s.rollouts++
		s.bytes += int64(got.Bytes)
		s.latency += got.Latency
		// ppo trains on the current version only; impala and appo on rollouts at most
		// MaxPolicyLag versions behind (when it is set).
		stale := false
		if len(r.Version) > 0 && r.T*r.N > 0 {
			lag := t.version - minVersion(r.Version[:r.T*r.N])
			stale = t.async == nil && lag > 0 || t.async != nil && t.cfg.MaxPolicyLag > 0 && lag > t.cfg.MaxPolicyLag
		}
		if r.T == t.cfg.RolloutSteps && r.N == n && !stale {
			s.ack = ack
			s.trained++
			return r, nil
		}
		if err := ack(ctx); err != nil {
			return nil, err
		}
		s.dropped++
		if !stale {
			return nil, fmt.Errorf("engine: a remote rollout of %d envs × %d steps; the run trains on %d × %d (workers × envs, rollout_steps): start the batchers with the run's tasks",
				r.N, r.T, n, t.cfg.RolloutSteps)
		}
	}
}

func minVersion(vs []int64) int64 {
	m := vs[0]
	for _, v := range vs[1:] {
		m = min(m, v)
	}
	return m
}

// publishSource exports the current weights and publishes them to the collectors.
func (t *trainer) publishSource(ctx context.Context) error {
	if err := t.export(); err != nil {
		return err
	}
	return t.source.src.Publish(ctx, t.version, t.model)
}

package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
)

// batcherSource is a RolloutSource played by a batcher of its own, standing in for remote
// batchers: each Publish is a new policy built from the published ONNX bytes (as a remote
// batcher hot-swaps), each Next a Collect. With stale set, every other rollout is first
// handed out with versions one behind.
type batcherSource struct {
	t        *testing.T
	b        *batcher.Batcher
	pol      *batcher.Policy
	steps    int
	mu       sync.Mutex
	versions []int64
	acks     int
	stale    bool
	behind   int64 // versions a stale rollout claims to be behind (0: 1)
	n        int
}

func (s *batcherSource) Publish(ctx context.Context, version int64, model []byte) error {
	s.mu.Lock()
	s.versions = append(s.versions, version)
	s.mu.Unlock()
	if s.b == nil {
		spec, _ := envs.Lookup("CartPole-v1")
		var err error
		if s.pol, err = batcher.NewPolicy(ctx, model, version, spec, batcher.PolicyConfig{}); err != nil {
			return err
		}
		s.b, err = batcher.New(ctx, batcher.Config{Env: "CartPole-v1", EnvsPerWorker: 4, Steps: s.steps, Seed: 7}, s.pol)
		return err
	}
	return s.b.UpdatePolicy(ctx, s.pol.WithModel(model, version))
}

func (s *batcherSource) Next(ctx context.Context) (Received, error) {
	r, err := s.b.Collect(ctx, s.steps)
	if err != nil {
		return Received{}, err
	}
	s.n++
	if s.stale && s.n%2 == 0 {
		for i := range r.Version {
			r.Version[i] = max(r.Version[i]-max(s.behind, 1), 0)
		}
	}
	ack := func(context.Context) error { s.mu.Lock(); s.acks++; s.mu.Unlock(); return nil }
	return Received{Rollout: r, Ack: ack, Bytes: 1000, Latency: time.Millisecond}, nil
}

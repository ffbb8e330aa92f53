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
			r.Version[i]--
		}
	}
	ack := func(context.Context) error { s.mu.Lock(); s.acks++; s.mu.Unlock(); return nil }
	return Received{Rollout: r, Ack: ack, Bytes: 1000, Latency: time.Millisecond}, nil
}

// TestSourceFeedsTheRun trains ppo and appo on rollouts from a RolloutSource: every rollout
// handed out is acknowledged, every version is published to it (ppo: each iteration), ppo
// drops the rollouts of an older version and still learns.
func TestSourceFeedsTheRun(t *testing.T) {
	for _, name := range []string{"ppo", "appo"} {
		t.Run(name, func(t *testing.T) {
			src := &batcherSource{t: t, steps: 128, stale: name == "ppo"}
			defer func() {
				if src.b != nil {
					src.b.Close()
				}
			}()
			var last Metrics
			res, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: name, TotalSteps: 150_000, Seed: 4, EvalEpisodes: 20},
				Options{Source: src, Progress: func(m Metrics) { last = m }})
			if err != nil {
				t.Fatal(err)
			}
			iters := 150_000 / 512
			if src.acks != src.n {
				t.Errorf("%d rollouts handed out, %d acknowledged", src.n, src.acks)
			}
			want := iters
			if name == "ppo" {
				want = 2*iters - 1 // every second one was a version behind and dropped
			}
			if src.n != want || len(src.versions) != iters+1 || src.versions[iters] != int64(iters) {
				t.Errorf("%d rollouts taken (want %d), versions published %v", src.n, want, src.versions)
			}
			if tr := last.Transport; tr == nil || tr.Rollouts < 1 || tr.Bytes != 1000*int64(tr.Rollouts) || tr.LatencySeconds != 0.001 || tr.BytesPerSec <= 0 {
				t.Errorf("the last iteration's transport metrics %+v", tr)
			}
			t.Logf("%s from a source: eval %.1f", name, res.EvalReturnMean)
			if res.EvalReturnMean < 150 {
				t.Errorf("eval return %.1f after %d steps from a source", res.EvalReturnMean, res.EnvSteps)
			}
		})
	}
}

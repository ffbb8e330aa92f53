package engine

import (
	"context"
	"testing"
)

// readySource is a batcherSource whose next rollout is collected while the learner trains
// (at each Publish), as remote batchers do: Next hands it over at once.
type readySource struct {
	batcherSource
	next *Received
}

func (s *readySource) Publish(ctx context.Context, version int64, model []byte) error {
	if err := s.batcherSource.Publish(ctx, version, model); err != nil {
		return err
	}
	r, err := s.batcherSource.Next(ctx)
	s.next = &r
	return err
}

func (s *readySource) Next(ctx context.Context) (Received, error) {
	if s.next == nil {
		return s.batcherSource.Next(ctx)
	}
	r := *s.next
	s.next = nil
	return r, nil
}

// TestSourceCollectRate: with remote batchers, a rollout finished while the learner trained
// is taken in nanoseconds, and the progress line said 21,404,752,184 steps/s. The rate is the
// rows over the iteration's whole span: CartPole's 512 rows an iteration at well under 10^8
// steps/s on any machine.
func TestSourceCollectRate(t *testing.T) {
	src := &readySource{batcherSource: batcherSource{t: t, steps: 128}}
	var rates []float64
	_, err := Train(context.Background(), Config{Env: "CartPole-v1", TotalSteps: 512 * 4, Seed: 1, EvalEpisodes: -1},
		Options{Source: src, Progress: func(m Metrics) { rates = append(rates, float64(m.CollectSPS)) }})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rates {
		if !(r > 0 && r < 1e8) {
			t.Errorf("iteration %d: collect_steps_per_sec %.3g", i+1, r)
		}
	}
	t.Logf("collect_steps_per_sec %.0f", rates)
}

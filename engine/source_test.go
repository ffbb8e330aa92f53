package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
)

// batcherSource is a RolloutSource played by a batcher of its own, standing in for remote
// batchers: each Publish is a new policy built from the published ONNX bytes (as a remote
// batcher hot-swaps), each Next a Collect. With stale set, every other rollout is first
// handed out with versions one behind.
type batcherSource struct {
	t        *testing.T
	b        *batcher.Batcher
	pol      *bind.Policy
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
		if s.pol, err = bind.New(ctx, model, version, spec, bind.Config{}); err != nil {
			return err
		}
		s.b, err = batcher.New(ctx, batcher.Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 4, Steps: s.steps, Seed: 7}, s.pol)
		return err
	}
	return s.b.UpdatePolicy(ctx, s.pol.WithModel(model, version))
}

func (s *batcherSource) Expect(RolloutSpec) error { return nil }

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

// hostileSource hands out, before each good rollout of batcherSource, one that does not fit
// the run (issue 28, items 6, 8 and 10): each of bad in turn, applied to a copy of the good
// one. It records the version of every rollout acknowledged... and which were bad.
type hostileSource struct {
	batcherSource
	bad   []func(r *batcher.Rollout)
	k     int
	spec  RolloutSpec
	extra int // bad rollouts handed out
}

func (s *hostileSource) Expect(sp RolloutSpec) error { s.spec = sp; return nil }

func (s *hostileSource) Next(ctx context.Context) (Received, error) {
	got, err := s.batcherSource.Next(ctx)
	if err != nil || s.k >= len(s.bad) {
		return got, err
	}
	r := cloneRollout(got.Rollout)
	s.bad[s.k](r)
	s.k++
	s.extra++
	got.Rollout = r
	return got, nil
}

func cloneRollout(r *batcher.Rollout) *batcher.Rollout {
	c := *r
	c.Obs, c.Actions, c.Rewards = slices.Clone(r.Obs), slices.Clone(r.Actions), slices.Clone(r.Rewards)
	c.Version, c.LogP, c.Values = slices.Clone(r.Version), slices.Clone(r.LogP), slices.Clone(r.Values)
	return &c
}

// TestSourceDropsMisfits: rollouts with 8 observation values per row (2 is the run's obs
// size × 2: the panic in fillEnvMajor), 3 action values, another T, another N, a discrete
// flag of the wrong kind, versions of MinInt64 (the lag overflowed), of the future and
// short columns are dropped and counted; the run trains every good rollout and ends.
func TestSourceDropsMisfits(t *testing.T) {
	bad := []func(r *batcher.Rollout){
		func(r *batcher.Rollout) { r.ObsDim = 8; r.Obs = append(r.Obs, r.Obs...) },
		func(r *batcher.Rollout) { r.ActDim = 3; r.Actions = slices.Repeat(r.Actions, 3) },
		func(r *batcher.Rollout) { r.T /= 2 },
		func(r *batcher.Rollout) { r.N = 2 },
		func(r *batcher.Rollout) { r.Discrete = false },
		func(r *batcher.Rollout) { r.Version[3] = math.MinInt64 },
		func(r *batcher.Rollout) { r.Version[0] += 5 },
		func(r *batcher.Rollout) { r.Rewards = r.Rewards[:5] },
	}
	for _, name := range []string{"ppo", "appo"} {
		t.Run(name, func(t *testing.T) {
			src := &hostileSource{batcherSource: batcherSource{t: t, steps: 64}, bad: bad}
			res, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: name, Envs: 4, RolloutSteps: 64, TotalSteps: 256 * 10,
				Seed: 4, EvalEpisodes: -1}, Options{Source: src})
			if src.b != nil {
				src.b.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if src.spec.T != 64 || src.spec.N != 4 || src.spec.Env.ID != "CartPole-v1" {
				t.Errorf("Expect got %+v", src.spec)
			}
			if res.RolloutsDropped != int64(len(bad)) || res.RolloutsTrained != 10 {
				t.Errorf("trained %d dropped %d, want 10 and %d", res.RolloutsTrained, res.RolloutsDropped, len(bad))
			}
			if src.acks != 10+len(bad) {
				t.Errorf("%d acknowledgements, want %d (every rollout, dropped ones too)", src.acks, 10+len(bad))
			}
		})
	}
}

// blockedSource is a RolloutSource whose batchers never come: Next waits for ctx. waiting
// is closed at the first Next.
type blockedSource struct {
	published []int64
	waiting   chan struct{}
	once      sync.Once
}

func (s *blockedSource) Expect(RolloutSpec) error { return nil }
func (s *blockedSource) Publish(_ context.Context, version int64, _ []byte) error {
	s.published = append(s.published, version)
	return nil
}
func (s *blockedSource) Next(ctx context.Context) (Received, error) {
	s.once.Do(func() { close(s.waiting) })
	<-ctx.Done()
	return Received{}, ctx.Err()
}

// TestSourceStopWhileWaiting: a learner waiting for remote batchers that never come stops
// within a second of Options.Stop (issue 28, item 1: it waited on), with policy.onnx, a
// checkpoint and the resume command; the run then resumes (from iteration 0) with a source
// that delivers, and finishes.
func TestSourceStopWhileWaiting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	stop := make(chan struct{})
	cfg := Config{Env: "CartPole-v1", Algo: "appo", Envs: 4, RolloutSteps: 64, TotalSteps: 256 * 3, Seed: 4, EvalEpisodes: -1}
	blocked := &blockedSource{waiting: make(chan struct{})}
	var t0 time.Time
	go func() {
		<-blocked.waiting
		time.Sleep(200 * time.Millisecond)
		t0 = time.Now()
		close(stop)
	}()
	_, err := Train(context.Background(), cfg, Options{Out: dir, Source: blocked, Stop: stop})
	waited := time.Since(t0) // t0 written before close(stop), which Train saw
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "train --resume "+dir) {
		t.Fatalf("stopped while waiting: %v, want ErrStopped naming the resume command", err)
	}
	if waited > time.Second {
		t.Errorf("Train returned %v after the stop, want within 1 s", waited)
	}
	for _, f := range []string{"policy.onnx", checkpointFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("after the stop: %v", err)
		}
	}
	src := &batcherSource{t: t, steps: 64}
	res, err := Resume(context.Background(), dir, Options{Source: src})
	if src.b != nil {
		src.b.Close()
	}
	if err != nil || res.RolloutsTrained != 3 {
		t.Fatalf("resume: %v, %d rollouts trained (want 3)", err, res.RolloutsTrained)
	}
}

// TestResumePublishesRestoredFirst: a resumed run's first policy to its rollout source is
// the checkpoint's version, not the untrained initial weights as version 0 (the remote
// batchers briefly collected with an untrained policy, whose rollouts the version check then
// refused).
func TestResumePublishesRestoredFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{Env: "CartPole-v1", Envs: 4, RolloutSteps: 64, TotalSteps: 256 * 4, Seed: 4, EvalEpisodes: -1}
	first := &batcherSource{t: t, steps: 64}
	err := trainStopped(cfg, Options{Out: dir, Source: first}, 2)
	if first.b != nil {
		first.b.Close()
	}
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	src := &batcherSource{t: t, steps: 64}
	res, err := Resume(context.Background(), dir, Options{Source: src})
	if src.b != nil {
		src.b.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(src.versions) == 0 || src.versions[0] < 2 || res.Iterations != 4 {
		t.Errorf("the resumed run published versions %v (%d iterations); want the checkpoint's (2 or later) first", src.versions, res.Iterations)
	}
}

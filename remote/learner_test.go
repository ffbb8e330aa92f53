package remote_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/engine"
	_ "github.com/towerrl/towerrl/engine/algos" // the engine links no algorithm
	"github.com/towerrl/towerrl/envs/envtest"
	"github.com/towerrl/towerrl/remote"
)

// serving is the smallest engine.RolloutSource over a remote Server (cmd/train's serving
// without its flags): Expect starts the server with the run's Spec and one collect task.
type serving struct {
	t     *testing.T
	store string
	srv   *remote.Server
	src   *remote.Source
	ready chan struct{} // closed once srv serves
}

func (s *serving) Expect(sp engine.RolloutSpec) error {
	ctx := context.Background()
	var err error
	s.srv, err = remote.Serve(ctx, remote.ServeConfig{StoreDir: s.store, Batchers: []string{"honest", "evil"}, Credits: 4, StreamMaxMsgs: 64,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: 2 * time.Second,
		Spec: &remote.Spec{Env: sp.Env, T: sp.T, N: sp.N}})
	if err != nil {
		return err
	}
	if err := s.srv.AddTask(remote.Task{ID: "collect", EnvID: sp.Env.ID, Seed: 1, Envs: sp.N, RolloutLen: sp.T}); err != nil {
		return err
	}
	if s.src, err = remote.NewSource(ctx, s.srv); err != nil {
		return err
	}
	close(s.ready)
	return nil
}

func (s *serving) Publish(ctx context.Context, version int64, model []byte) error {
	return s.src.Publish(ctx, version, model)
}

func (s *serving) Next(ctx context.Context) (engine.Received, error) {
	r, err := s.src.Next(ctx)
	if err != nil {
		return engine.Received{}, err
	}
	return engine.Received{Rollout: r.Rollout, Ack: r.Ack, Bytes: r.Bytes, Latency: r.Latency}, nil
}

func (s *serving) close() remote.SourceStats {
	if s.srv == nil {
		return remote.SourceStats{}
	}
	st := s.src.Stats()
	if err := errors.Join(s.src.Close(), s.srv.Close()); err != nil {
		s.t.Error(err)
	}
	return st
}

// hostileRollouts are rollouts any holder of batcher.creds can publish with a Client: a good
// CartPole rollout of the run's shape (T×N), edited.
func hostileRollouts(T, N int) []remote.RolloutMsg {
	rows := T * N
	good := func() *batcher.Rollout {
		r := &batcher.Rollout{T: T, N: N, ObsDim: 4, ActDim: 1, ObsShape: []int{4}, Discrete: true,
			Obs: make([]float32, rows*4), Actions: make([]float32, rows), Rewards: make([]float32, rows),
			Terminated: make([]float32, rows), Truncated: make([]float32, rows), LogP: make([]float32, rows),
			Values: make([]float32, rows), EpisodeStarts: make([]float32, rows), Version: make([]int64, rows),
			FinalObs: make([]float32, rows*4), FinalValues: make([]float32, rows), LastObs: make([]float32, N*4),
			LastValues: make([]float32, N)}
		r.EnvActions = r.Actions
		return r
	}
	var out []remote.RolloutMsg
	add := func(env string, edit func(r *batcher.Rollout)) {
		r := good()
		edit(r)
		m, err := remote.Pack(env, r)
		if err != nil {
			panic(err)
		}
		out = append(out, m)
	}
	add("CartPole-v1", func(r *batcher.Rollout) { r.Rewards[5] = float32(math.NaN()) })
	add("CartPole-v1", func(r *batcher.Rollout) { r.Obs[3] = float32(math.Inf(1)) })
	add("CartPole-v1", func(r *batcher.Rollout) { r.LogP[2] = float32(math.NaN()) })
	add("CartPole-v1", func(r *batcher.Rollout) { r.Actions[4] = 7 })
	add("CartPole-v1", func(r *batcher.Rollout) { r.Actions[4] = -1 })
	add("CartPole-v1", func(r *batcher.Rollout) { r.Actions[4] = 1e9 })
	add("CartPole-v1", func(r *batcher.Rollout) { r.ObsDim, r.ObsShape = 2, []int{2} })
	add("CartPole-v1", func(r *batcher.Rollout) {
		r.ObsDim, r.ObsShape = 8, []int{8}
		r.Obs, r.FinalObs, r.LastObs = make([]float32, rows*8), make([]float32, rows*8), make([]float32, N*8)
	})
	add("CartPole-v1", func(r *batcher.Rollout) { r.T = T / 2 })
	add("Acrobot-v1", func(r *batcher.Rollout) {})
	add("CartPole-v1", func(r *batcher.Rollout) { r.Version[0] = math.MinInt64 })
	add("CartPole-v1", func(r *batcher.Rollout) { r.Version[0] = 1 << 40 })
	return out
}

// TestLearnerUnderAttack trains APPO on CartPole from one honest remote batcher while a client
// with the batcher credential publishes rollouts with NaN and ±Inf values, out-of-range
// actions, other shapes, another env, another T, and versions of MinInt64 and of the future
// (issue 28, items 6–8, 10): the learner trains every iteration from honest rollouts only,
// drops and counts each hostile one under the client's ID, and a stop and a resume with the
// attack going on complete the run.
func TestLearnerUnderAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("trains APPO from a remote batcher")
	}
	dir := filepath.Join(t.TempDir(), "run")
	const T, N = 32, 4
	cfg := engine.Config{Env: "CartPole-v1", Algo: "appo", Envs: N, RolloutSteps: T, TotalSteps: T * N * 30, Seed: 3, EvalEpisodes: -1,
		CheckpointEvery: 5}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// run trains (or resumes) with the honest batcher and the attacker going; stopAfter > 0
	// stops it after that many iterations.
	run := func(resume bool, stopAfter int) (engine.Result, remote.SourceStats, int, error) {
		s := &serving{t: t, store: filepath.Join(dir, "nats"), ready: make(chan struct{})} // as train --serve
		stop := make(chan struct{})
		var once sync.Once
		opts := engine.Options{Out: dir, Source: s, Stop: stop, Progress: func(m engine.Metrics) {
			if stopAfter > 0 && m.Iteration >= stopAfter {
				once.Do(func() { close(stop) })
			}
		}}
		bctx, bcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		sent := 0
		wg.Go(func() {
			select {
			case <-s.ready:
			case <-bctx.Done():
				return
			}
			_, err := remote.RunBatcher(bctx, s.srv.URL(), remote.BatcherConfig{Env: envtest.Lookup(t, "CartPole-v1"),
				Client: remote.ClientConfig{Creds: filepath.Join(s.srv.CredsDir(), "honest.creds")}})
			if err != nil && bctx.Err() == nil {
				t.Errorf("honest batcher: %v", err)
			}
		})
		wg.Go(func() {
			select {
			case <-s.ready:
			case <-bctx.Done():
				return
			}
			c, err := remote.Dial(bctx, s.srv.URL(), remote.ClientConfig{Creds: filepath.Join(s.srv.CredsDir(), "evil.creds")})
			if err != nil {
				t.Errorf("attacker: %v", err)
				return
			}
			defer c.Close()
			bad := hostileRollouts(T, N)
			for k := 0; bctx.Err() == nil; k++ {
				if _, err := c.PublishRollout(bctx, bad[k%len(bad)]); err != nil {
					return
				}
				sent++
				time.Sleep(5 * time.Millisecond)
			}
		})
		var res engine.Result
		var err error
		if resume {
			res, err = engine.Resume(ctx, dir, opts)
		} else {
			res, err = engine.Train(ctx, cfg, opts)
		}
		bcancel()
		wg.Wait()
		return res, s.close(), sent, err
	}

	res, st, sent, err := run(false, 10)
	if !errors.Is(err, engine.ErrStopped) {
		t.Fatalf("the stopped run: %v", err)
	}
	_ = res
	if st.RefusedBatchers["evil"] == 0 || st.RefusedBatchers["honest"] != 0 {
		t.Errorf("refused %v of %d sent by evil, want some of evil's and none of honest's", st.RefusedBatchers, sent)
	}
	res, st, sent, err = run(true, 0)
	if err != nil {
		t.Fatalf("the resumed run: %v", err)
	}
	// Every rollout the trainer was handed fit (none dropped there): the Source refused
	// every hostile one before.
	if res.RolloutsTrained != 20 || res.RolloutsDropped != 0 {
		t.Errorf("the resumed run trained %d rollouts and dropped %d, want 20 and 0", res.RolloutsTrained, res.RolloutsDropped)
	}
	if st.RefusedBatchers["evil"] == 0 || st.RefusedBatchers["honest"] != 0 {
		t.Errorf("refused %v of %d sent by evil, want some of evil's and none of honest's", st.RefusedBatchers, sent)
	}
	t.Logf("refused %v (of %d sent in the resumed run)", st.RefusedReasons, sent)
}

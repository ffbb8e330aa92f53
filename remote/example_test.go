package remote_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/towerrl/towerrl/remote"
)

// A learner serves, a batcher connects with the credential the learner wrote for it
// (host1.creds: the batcher's ID comes from it), receives the policy and sends a rollout
// back.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "run")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The learner.
	srv, err := remote.Serve(ctx, remote.ServeConfig{StoreDir: dir + "/nats", CredsDir: dir + "/creds", Batchers: []string{"host1"}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	if err := srv.PublishPolicy(ctx, 1, []byte("onnx bytes")); err != nil {
		log.Fatal(err)
	}
	rollouts, err := srv.Rollouts(ctx)
	if err != nil {
		log.Fatal(err)
	}

	// A batcher, in another process: batcher --connect URL --creds FILE.
	c, err := remote.Dial(ctx, srv.URL(), remote.ClientConfig{Creds: dir + "/creds/host1.creds"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p := <-c.WatchPolicy(ctx)
	fmt.Printf("batcher: policy version %d, %d bytes\n", p.Version, len(p.ONNX))
	_, err = c.PublishRollout(ctx, remote.RolloutMsg{
		EnvID: "CartPole-v1", PolicyVersion: p.Version, T: 2, N: 1, ObsDim: 4, ActDim: 1,
		Columns: []remote.Column{
			{Name: "obs", F32: []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}},
			{Name: "rewards", F32: []float32{1, 1}},
			{Name: "version", I64: []int64{1, 1}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	// The learner again: the rollout, acknowledged once it is in a tower stack.
	d := <-rollouts
	rewards, _ := d.Rollout.Float32("rewards")
	fmt.Printf("learner: rollout %d from %s, rewards %v\n", d.Rollout.Seq, d.Rollout.BatcherID, rewards)
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// batcher: policy version 1, 10 bytes
	// learner: rollout 1 from host1, rewards [1 1]
}

// A learner serves a collect task and a policy; a remote batcher (batcher --connect URL
// --creds FILE, here on a goroutine) collects it; the learner's Source hands out its
// rollouts as batcher rollouts, and the batcher returns once the learner ends the run.
func ExampleRunBatcher() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "run")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The learner.
	srv, err := remote.Serve(ctx, remote.ServeConfig{StoreDir: dir + "/nats", CredsDir: dir + "/creds", Batchers: []string{"host1"}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	if err := srv.AddTask(remote.Task{ID: "cartpole", EnvID: "CartPole-v1", Seed: 1, Envs: 4, RolloutLen: 16}); err != nil {
		log.Fatal(err)
	}
	model, err := os.ReadFile("../testdata/mlp_tanh.onnx")
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.PublishPolicy(ctx, 1, model); err != nil {
		log.Fatal(err)
	}
	src, err := remote.NewSource(ctx, srv)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()

	// The batcher.
	type result struct {
		sum remote.BatcherSummary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := remote.RunBatcher(ctx, srv.URL(), remote.BatcherConfig{
			Client: remote.ClientConfig{Creds: dir + "/creds/host1.creds"},
		})
		done <- result{sum, err}
	}()

	// The learner takes two rollouts, acknowledges them once stacked, and ends the run.
	var stack []*remote.Received
	for range 2 {
		r, err := src.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("rollout %d from %s: %d steps × %d envs of %s, policy version %d\n",
			r.Seq, r.BatcherID, r.Rollout.T, r.Rollout.N, r.EnvID, r.PolicyVersion)
		stack = append(stack, r)
	}
	if err := src.AckAll(ctx, stack...); err != nil {
		log.Fatal(err)
	}
	if err := srv.End(ctx); err != nil {
		log.Fatal(err)
	}
	res := <-done
	fmt.Printf("batcher: %v, %s, task %v\n", res.err, res.sum.Ended, res.sum.Tasks)
	// Output:
	// rollout 1 from host1: 16 steps × 4 envs of CartPole-v1, policy version 1
	// rollout 2 from host1: 16 steps × 4 envs of CartPole-v1, policy version 1
	// batcher: <nil>, run ended, task [cartpole]
}

package remote_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/towerrl/towerrl/remote"
)

// A learner serves, a batcher connects with the credential it wrote, receives the policy
// and sends a rollout back.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "run")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The learner.
	srv, err := remote.Serve(ctx, remote.ServeConfig{StoreDir: dir + "/nats"})
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
	c, err := remote.Dial(ctx, srv.URL(), remote.ClientConfig{Creds: srv.CredsFile(), BatcherID: "host1"})
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

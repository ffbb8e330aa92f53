package batcher_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
)

// ExampleBatcher_Stream is an asynchronous learner's loop: the workers keep collecting into
// two rollout buffers while the learner trains on the one it holds, publishes new weights and
// hands the buffer back. As the weights are published before the buffer is released, and a
// buffer is refilled only once released, every rollout starts at most one version behind the
// newest: its policy lag is at most 1.
func ExampleBatcher_Stream() {
	ctx := context.Background()
	model, err := os.ReadFile("../testdata/mlp_tanh.onnx")
	if err != nil {
		log.Fatal(err)
	}
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		log.Fatal(err)
	}
	layout := bind.ContiguousParams([]string{"critic.4.weight", "critic.4.bias"}, []int{64, 1})
	p, err := bind.New(ctx, model, 0, spec, bind.Config{Publish: layout})
	if err != nil {
		log.Fatal(err)
	}
	b, err := batcher.New(ctx, batcher.Config{Env: spec, Workers: 2, EnvsPerWorker: 8, Steps: 16}, p)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	s, err := b.Stream(ctx, batcher.StreamConfig{Slots: 2})
	if err != nil {
		log.Fatal(err)
	}
	flat := make([]float32, 65) // the learner's parameter vector
	steps := 0
	for version := int64(1); version <= 5; version++ {
		slot, r, err := s.Next(ctx) // r is ours until Release(slot)
		if err != nil {
			log.Fatal(err)
		}
		steps += r.T * r.N // … the learner trains on r …
		flat[64] += 1      // an optimiser step
		if err := b.Publish(ctx, version, flat); err != nil {
			log.Fatal(err)
		}
		if err := s.Release(slot); err != nil {
			log.Fatal(err)
		}
	}
	st := s.Stats()
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d rollouts (%d env steps) handed out, %d dropped, policy lag at most 1: %v\n",
		st.HandedOut, steps, st.Dropped, st.MaxLag <= 1)
	// Output:
	// 5 rollouts (1280 env steps) handed out, 0 dropped, policy lag at most 1: true
}

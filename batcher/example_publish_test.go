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

// ExampleBatcher_Publish publishes new weights the way a trainer does within one process,
// without exporting a model or building a session. The policy (PyTorch's export of a CartPole
// actor-critic) is loaded with the layout of the trainer's flat vector; here the trainer owns
// only the value head, [1, 64] weights then one bias, and each version zeroes the weights and
// sets the bias to the version, so the values the rollout records show which weights ran.
// A trainer of the whole policy lays out every parameter the same way (onnx/graph's
// Params.TrainableNames, or models.Params.Names, with their sizes).
func ExampleBatcher_Publish() {
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
	flat := make([]float32, 65) // the trainer's parameter vector
	for version := int64(1); version <= 3; version++ {
		flat[64] = float32(version) // an optimiser step
		if err := b.Publish(ctx, version, flat); err != nil {
			log.Fatal(err)
		}
		r, err := b.Collect(ctx, 16)
		if err != nil {
			log.Fatal(err)
		}
		last := r.T*r.N - 1
		fmt.Printf("rows carry version %d to %d, values %v to %v\n", r.Version[0], r.Version[last], r.Values[0], r.Values[last])
	}
	// Output:
	// rows carry version 1 to 1, values 1 to 1
	// rows carry version 2 to 2, values 2 to 2
	// rows carry version 3 to 3, values 3 to 3
}

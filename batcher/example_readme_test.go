package batcher_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
)

// Evaluate an ONNX policy over whole episodes, as `bin/eval --policy FILE --env ID` does:
// testdata/mlp_tanh.onnx is a CartPole-v1 actor-critic exported from PyTorch (untrained, so
// its episodes are short). Deterministic takes each row's most probable action.
func ExampleEvaluate() {
	ctx := context.Background()
	model, err := os.ReadFile("../testdata/mlp_tanh.onnx")
	if err != nil {
		log.Fatal(err)
	}
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		log.Fatal(err)
	}
	// The policy is bound once (its head read from the towerrl.* metadata, or recognised for
	// another library's export) and shared by the batchers made from it.
	p, err := bind.New(ctx, model, 0, spec, bind.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: spec, Episodes: 10, Seed: 7, Deterministic: true}, p)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d episodes, mean return %.1f, on %s\n", len(res.Returns), res.ReturnMean, res.Device)
	// Output:
	// 10 episodes, mean return 9.6, on cpu
}

// Collect one rollout of 16 steps from 2 workers × 8 envs with an ONNX policy, as
// `bin/batcher --policy FILE --env ID` does: the rollout is columnar (each column [T×N]: step
// t of env i at row t·N+i), and every row carries the version of the policy that acted.
func ExampleBatcher_Collect() {
	ctx := context.Background()
	model, err := os.ReadFile("../testdata/mlp_tanh.onnx")
	if err != nil {
		log.Fatal(err)
	}
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		log.Fatal(err)
	}
	p, err := bind.New(ctx, model, 3, spec, bind.Config{})
	if err != nil {
		log.Fatal(err)
	}
	b, err := batcher.New(ctx, batcher.Config{Env: spec, Workers: 2, EnvsPerWorker: 8, Steps: 16, Seed: 1}, p)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	r, err := b.Collect(ctx, 16)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d envs × %d steps, %d observations, every row by version 3: %v\n",
		r.N, r.T, len(r.Obs)/4, !slices.ContainsFunc(r.Version, func(v int64) bool { return v != 3 }))
	// Output:
	// 16 envs × 16 steps, 256 observations, every row by version 3: true
}

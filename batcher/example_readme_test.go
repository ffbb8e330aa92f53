package batcher_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
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
	p, err := batcher.NewPolicy(ctx, model, 0, spec, batcher.PolicyConfig{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: "CartPole-v1", Episodes: 10, Seed: 7, Deterministic: true}, p)
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
	p, err := batcher.NewPolicy(ctx, model, 3, spec, batcher.PolicyConfig{})
	if err != nil {
		log.Fatal(err)
	}
	b, err := batcher.New(ctx, batcher.Config{Env: "CartPole-v1", Workers: 2, EnvsPerWorker: 8, Steps: 16, Seed: 1}, p)
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

// Run an ONNX policy by hand and sample its actions: the session's buffers are preallocated
// (Run allocates nothing in steady state), the head is read from the towerrl.* metadata, and
// the random source is one the caller seeds.
func ExampleHeadTensors() {
	ctx := context.Background()
	s, err := onnx.Open(ctx, "../testdata/mlp_tanh.onnx", onnx.Config{MaxBatch: 1024}) // CPU, 1 intra-op thread
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	observations := []float32{0.01, 0.02, 0.03, 0.04, -0.01, -0.02, -0.03, -0.04}
	batch, err := onnx.Feed(s, 0, []int64{2, 4}, observations) // checks the type and shape, copies the rows
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(batch); err != nil {
		log.Fatal(err)
	}

	spec, ok, err := head.FromMetadata(s.Metadata()) // a foreign policy without metadata: build the Spec yourself
	if err != nil || !ok {
		log.Fatal("no towerrl head metadata: ", err)
	}
	outs, err := head.Bind(spec, batcher.HeadTensors(s.Outputs()), head.Names{}) // which output is what
	if err != nil {
		log.Fatal(err)
	}
	logits, err := onnx.Output[float32](s, outs.Params)
	if err != nil {
		log.Fatal(err)
	}
	actions, logp := make([]int32, batch), make([]float32, batch)
	rng := rand.New(rand.NewPCG(1, 2))
	if err := (head.Categorical{N: spec.N}).Sample(rng, logits[:batch*spec.N], actions, logp); err != nil {
		log.Fatal(err)
	}
	fmt.Println("head:", spec.Head, "actions:", spec.N, "sampled:", len(actions), "log-probabilities ≤ 0:", logp[0] <= 0 && logp[1] <= 0)
	// Output:
	// head: categorical actions: 2 sampled: 2 log-probabilities ≤ 0: true
}

package bind_test

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

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
	outs, err := head.Bind(spec, bind.HeadTensors(s.Outputs()), head.Names{}) // which output is what
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

package models_test

import (
	"fmt"
	"log"
	"math/rand/v2"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// Build a CleanRL-style CartPole actor-critic, run its forward on a batch, and export it to ONNX.
func Example() {
	cfg := models.Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}, EnvID: "CartPole-v1"}}
	params, err := models.NewParams(cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		log.Fatal(err)
	}
	pol, err := models.Build(G.NewGraph(), params, 8) // one graph per tower and batch size
	if err != nil {
		log.Fatal(err)
	}
	defer pol.Close()
	if err := pol.Compile(); err != nil {
		log.Fatal(err)
	}
	if err := pol.Forward(make([]float32, 8*4)); err != nil {
		log.Fatal(err)
	}
	logits, _ := pol.Read(pol.Logits)
	fmt.Println("logits:", len(logits), "values for a batch of", pol.Batch())

	model, err := models.ExportModel(params, 7) // models.Export gives the serialised bytes
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range model.GetGraph().GetInput() {
		fmt.Println("input:", in.GetName())
	}
	for _, out := range model.GetGraph().GetOutput() {
		fmt.Println("output:", out.GetName())
	}
	for _, kv := range model.GetMetadataProps() {
		fmt.Printf("%s=%s\n", kv.GetKey(), kv.GetValue())
	}
	fmt.Println("parameters:", params.Len(), "tensors,", params.Size(), "values")
	// Output:
	// logits: 16 values for a batch of 8
	// input: obs
	// output: logits
	// output: value
	// towerrl.action_space=discrete:2
	// towerrl.env_id=CartPole-v1
	// towerrl.head=categorical
	// towerrl.obs_shape=4
	// towerrl.version=7
	// parameters: 12 tensors, 9155 values
}

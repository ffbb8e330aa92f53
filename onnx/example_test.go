package onnx_test

import (
	"context"
	"fmt"
	"log"

	"github.com/towerrl/towerrl/onnx"
)

// ExampleOpen runs a policy exported from PyTorch (testdata/mlp_tanh.onnx: a CartPole-v1
// actor-critic MLP, 4 observations in, 2 action logits and a value out) on two observations.
// The printed figures are PyTorch's own outputs for these rows (testdata/mlp_tanh.logits.npy
// and mlp_tanh.value.npy, rounded).
func ExampleOpen() {
	ctx := context.Background()
	// ONNX Runtime is found from Config.Library, else TOWERRL_ORT_LIB, else the cache that
	// `make setup` fills.
	s, err := onnx.Open(ctx, "../testdata/mlp_tanh.onnx", onnx.Config{MaxBatch: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	fmt.Println("inputs:", s.Inputs())
	fmt.Println("outputs:", s.Outputs())
	fmt.Println("head:", s.Metadata()["towerrl.head"])

	obs := []float32{
		-2.2608998, -0.5886086, -0.10086544, -0.80015194,
		-2.1201565, 1.2038684, -0.18824509, -0.19116461,
	}
	// Feed checks the element type, the row shape and the batch, and copies the rows into the
	// session's input buffer; it returns the batch to run.
	batch, err := onnx.Feed(s, 0, []int64{2, 4}, obs)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(batch); err != nil {
		log.Fatal(err)
	}
	// Output buffers hold MaxBatch rows; the first batch rows are this run's, valid until the
	// next Run.
	logits, err := onnx.Output[float32](s, 0)
	if err != nil {
		log.Fatal(err)
	}
	value, err := onnx.Output[float32](s, 1)
	if err != nil {
		log.Fatal(err)
	}
	for r := range batch {
		fmt.Printf("row %d: logits %+.5f, value %.5f\n", r, logits[2*r:2*r+2], value[r])
	}
	// Output:
	// inputs: [obs float32[?,4]]
	// outputs: [logits float32[?,2] value float32[?,1]]
	// head: categorical
	// row 0: logits [+0.00489 -0.00314], value 0.71921
	// row 1: logits [-0.00041 -0.00625], value 0.40343
}

package edit_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
)

// An SB3-style export outputs actions, values and log-probabilities; the logits are inside.
// Expose makes them an output, so a session returns them too.
func ExampleExpose() {
	model, err := os.ReadFile("testdata/sb3_discrete.onnx")
	if err != nil {
		log.Fatal(err)
	}
	exposed, err := edit.Expose(model, "/action_net/Gemm_output_0")
	if err != nil {
		log.Fatal(err)
	}
	s, err := onnx.New(context.Background(), exposed, onnx.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for _, o := range s.Outputs() {
		fmt.Println(o)
	}
	// Output:
	// actions int64[1]
	// values float32[1,1]
	// log_prob float32[1]
	// /action_net/Gemm_output_0 float32[1,2]
}

// A policy exported with x.view(1, -1) and no dynamic axes runs one row per call; DynamicBatch
// frees its batch, checks the result against the original row by row, and says what it changed.
func ExampleDynamicBatch() {
	model, err := os.ReadFile("testdata/view_cnn.onnx")
	if err != nil {
		log.Fatal(err)
	}
	out, rep, err := edit.DynamicBatch(context.Background(), model, edit.Options{})
	if err != nil {
		log.Fatal(err) // errors.Is(err, edit.ErrFixedBatch): run the original one row per call
	}
	for _, line := range rep.Rewrites {
		fmt.Println(line)
	}
	fmt.Printf("verified on %d rows within %g: %v\n", rep.Rows, edit.DefaultTolerance, rep.MaxDiff <= edit.DefaultTolerance)

	s, err := onnx.New(context.Background(), out, onnx.Config{MaxBatch: 64})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	fmt.Println("static batch:", s.StaticBatch(), "max batch:", s.MaxBatch())
	// Output:
	// input "obs": dimension 0 (1) → batch
	// output "logits": dimension 0 (1) → batch
	// output "value": dimension 0 (1) → batch
	// Reshape "/Reshape": target shape [1 -1] → [0 -1]
	// verified on 4 rows within 1e-05: true
	// static batch: false max batch: 64
}

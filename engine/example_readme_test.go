package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/engine/curve"
)

// Train PPO on CartPole-v1 into a run directory, as `bin/train --env CartPole-v1 --out DIR`
// does: the directory gets config.json, metrics.jsonl, policy.onnx and a checkpoint, and
// curve.png because Options.Plot is set (the engine links no plotting library of its own).
// The README and docs/library.md quote it; the full 500k steps take about 3 s on two cores.
func ExampleTrain_runDirectory() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "towerrl-example-") // Train takes a new or empty folder
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := engine.Config{Env: "CartPole-v1", TotalSteps: 500_000, Seed: 1}
	cfg.TotalSteps = 10_240 // here: 20 iterations, so that go test stays quick
	res, err := engine.Train(ctx, cfg, engine.Options{Out: dir, Plot: curve.Write})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("env steps:", res.EnvSteps)
	for _, name := range []string{"config.json", "metrics.jsonl", "policy.onnx", "curve.png"} {
		_, err := os.Stat(filepath.Join(dir, name))
		fmt.Printf("%s: %v\n", name, err == nil)
	}
	// Output:
	// env steps: 10240
	// config.json: true
	// metrics.jsonl: true
	// policy.onnx: true
	// curve.png: true
}

package engine_test

import (
	"context"
	"fmt"

	"github.com/towerrl/towerrl/engine"
)

// Train PPO on CartPole as a library call, with a progress callback.
func ExampleTrain() {
	cfg := engine.Config{Env: "CartPole-v1", TotalSteps: 5120, Seed: 1, EvalEpisodes: -1}
	iterations := 0
	res, err := engine.Train(context.Background(), cfg, engine.Options{
		Progress: func(m engine.Metrics) { iterations++ },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(iterations, "iterations,", res.EnvSteps, "env steps")
	// Output: 10 iterations, 5120 env steps
}

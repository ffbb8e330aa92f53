package batcher

import (
	"context"
	"errors"
	"testing"

	"github.com/towerrl/towerrl/bind"
)

func TestEvaluate(t *testing.T) {
	ctx := context.Background()
	// Random CartPole: every episode counts, lengths are what the returns say (reward 1 a step).
	res, err := Evaluate(ctx, EvalConfig{Env: envSpec("CartPole-v1"), Episodes: 25, Envs: 4, Seed: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Returns) != 25 || len(res.Lengths) != 25 {
		t.Fatalf("%d returns, %d lengths", len(res.Returns), len(res.Lengths))
	}
	sum := 0.0
	for i, r := range res.Returns {
		if r != float64(res.Lengths[i]) {
			t.Fatalf("episode %d: return %v, length %d", i, r, res.Lengths[i])
		}
		sum += r
	}
	if res.ReturnMean != sum/25 || res.LengthMean != res.ReturnMean {
		t.Fatalf("mean %v, want %v", res.ReturnMean, sum/25)
	}
	again, _ := Evaluate(ctx, EvalConfig{Env: envSpec("CartPole-v1"), Episodes: 25, Envs: 4, Seed: 9}, nil)
	if again.ReturnMean != res.ReturnMean {
		t.Fatal("same seed, different evaluation")
	}
	// Pendulum episodes are always 200 steps.
	p := loadPolicy(t, "../testdata/gaussian_relu.onnx", "Pendulum-v1", bind.Config{})
	res, err = Evaluate(ctx, EvalConfig{Env: envSpec("Pendulum-v1"), Episodes: 3, Deterministic: true}, p)
	if err != nil || res.LengthMean != 200 || len(res.Returns) != 3 {
		t.Fatalf("pendulum: %+v %v", res, err)
	}
	if _, err := Evaluate(ctx, EvalConfig{Env: envSpec("CartPole-v1")}, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("0 episodes: %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"go.uber.org/zap"
)

func TestEval(t *testing.T) {
	for _, policy := range []string{"random", "../../testdata/gaussian_relu.onnx"} {
		env := "Pendulum-v1"
		var stdout bytes.Buffer
		o := options{policy: policy, env: env, episodes: 3, seed: 2}
		o.flags.Device = "cpu"
		if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
			t.Fatal(err)
		}
		var sum struct {
			Episodes   int     `json:"episodes"`
			ReturnMean float64 `json:"return_mean"`
			ReturnStd  float64 `json:"return_std"`
			LengthMean float64 `json:"length_mean"`
			Device     string  `json:"device"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		// Pendulum episodes are 200 steps; rewards are in [-16.27, 0] per step.
		want := "cpu"
		if policy == "random" {
			want = "random"
		}
		if sum.Episodes != 3 || sum.LengthMean != 200 || sum.ReturnMean > 0 || sum.ReturnMean < -16.28*200 || sum.Device != want {
			t.Fatalf("%s: %s", policy, stdout.String())
		}
	}
	if err := run(context.Background(), &bytes.Buffer{}, zap.NewNop(), options{env: "CartPole-v1"}); err == nil {
		t.Fatal("no --policy accepted")
	}
}

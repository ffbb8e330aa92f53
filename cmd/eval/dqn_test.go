package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// TestSB3DQN evaluates the DQN exports (scripts/gen_fixture_sb3_dqn.py: SB3's two, CleanRL's)
// with no flags on
// the episodes PyTorch played (seeds 10000…10049): greedily, and with --sample (a Q-network's
// head is greedy either way), both score PyTorch's greedy return.
func TestSB3DQN(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "dqn")
	data, err := os.ReadFile(filepath.Join(dir, "sb3_dqn.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Greedy struct {
			Mean     float64 `json:"mean"`
			Episodes int     `json:"episodes"`
		} `json:"pytorch_greedy_return"`
	}
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sb3_dqn_cartpole", "sb3_dqn_cartpole_qnet", "cleanrl_dqn_cartpole"} {
		for _, sample := range []bool{false, true} {
			o := options{policy: filepath.Join(dir, name+".onnx"), env: "CartPole-v1", episodes: fx.Greedy.Episodes, seed: 10000, sample: sample}
			o.flags.Device = "cpu"
			var stdout bytes.Buffer
			if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
				t.Fatal(err)
			}
			var sum struct {
				ReturnMean float64 `json:"return_mean"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.ReturnMean != fx.Greedy.Mean {
				t.Errorf("%s (sample %v): return %v, PyTorch's greedy %v", name, sample, sum.ReturnMean, fx.Greedy.Mean)
			}
		}
	}
}

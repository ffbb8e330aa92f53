package batcher

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/bind"
)

// TestProbabilityOutputReturns: a hand-written export that outputs its action probabilities
// (testdata/softmax, scripts/gen_fixture_softmax.py) earns PyTorch's sampled return when
// sampled (bound as probabilities it scored about 108 where PyTorch scores 500), and the
// log-probabilities its rollouts carry are those of the recovered logits (package bind checks
// them against PyTorch's).
func TestProbabilityOutputReturns(t *testing.T) {
	dir := filepath.Join("..", "testdata", "softmax")
	for _, name := range []string{"softmax_cartpole", "logsoftmax_cartpole"} {
		t.Run(name, func(t *testing.T) {
			var meta struct {
				Return struct{ Mean float64 } `json:"pytorch_sampled_return"`
			}
			data, err := os.ReadFile(filepath.Join(dir, name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &meta); err != nil {
				t.Fatal(err)
			}
			p := loadPolicy(t, filepath.Join(dir, name+".onnx"), "CartPole-v1", bind.Config{})
			ctx := context.Background()
			res, err := Evaluate(ctx, EvalConfig{Env: envSpec("CartPole-v1"), Episodes: 10, Seed: 7}, p)
			if err != nil {
				t.Fatal(err)
			}
			if res.ReturnMean < 0.9*meta.Return.Mean {
				t.Errorf("sampled return %.1f, PyTorch's %.1f", res.ReturnMean, meta.Return.Mean)
			}
			b := newBatcher(t, Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 8, Steps: 16, Seed: 3}, p)
			r, err := b.Collect(ctx, 16)
			if err != nil {
				t.Fatal(err)
			}
			ref := newTestAgent(t, p, r.N, 0, true)
			defer ref.Close()
			for step := range r.T {
				rows := r.Obs[step*r.N*r.ObsDim : (step+1)*r.N*r.ObsDim]
				if err := ref.r.Run(r.N, rows, nil, nil); err != nil {
					t.Fatal(err)
				}
				for i := range r.N {
					row := step*r.N + i
					if want := ref.r.LogProb(i, r.Actions[row:row+1]); math.Abs(float64(r.LogP[row])-want) > 1e-5 {
						t.Fatalf("step %d env %d: logp %v, %v under the logits", step, i, r.LogP[row], want)
					}
				}
			}
		})
	}
}

package bind

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/bind/bindtest"
)

// TestProbabilityOutputs: a policy whose output is its action probabilities (Softmax) or their
// log (LogSoftmax) is sampled as the distribution it is: the log-probability of the actions
// PyTorch drew (scripts/gen_fixture_softmax.py) under the bound policy is PyTorch's
// Categorical.log_prob, and the log says what was recognised.
func TestProbabilityOutputs(t *testing.T) {
	for _, name := range []string{"softmax_cartpole", "logsoftmax_cartpole"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "softmax")
			cfg, logs := observed()
			p, err := load(t, filepath.Join(dir, name+".onnx"), "CartPole-v1", cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stochastic(); err != nil {
				t.Fatal(err)
			}
			obs := bindtest.ReadNpy(t, filepath.Join(dir, name+".input.npy")).F32
			actions := bindtest.ReadNpy(t, filepath.Join(dir, name+".actions.npy")).I64
			want := bindtest.ReadNpy(t, filepath.Join(dir, name+".logp.npy")).F32
			n := len(obs) / 4
			r := newTestAgent(t, p, n, 1, false)
			defer r.Close()
			if err := r.Run(n, obs, nil, nil); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if got := r.LogProb(i, []float32{float32(actions[i])}); math.Abs(got-float64(want[i])) > 1e-5 {
					t.Errorf("row %d: log-probability of action %d is %v, PyTorch's %v", i, actions[i], got, want[i])
				}
			}
			if !bindtest.Logged(logs, "probabilities") {
				t.Errorf("the log does not say the output holds probabilities: %v", logs.All())
			}
		})
	}
}

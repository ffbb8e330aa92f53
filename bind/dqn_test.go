package bind

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/bind/bindtest"
	"github.com/towerrl/towerrl/models/head"
)

// TestSB3DQNExports: DQN exports (scripts/gen_fixture_sb3_dqn.py: SB3's documented
// OnnxableSB3Policy export, whose output is the greedy action, SB3's Q-network alone, and
// CleanRL's QNetwork) bind
// with no flags as the qvalues head; on the fixture's rows the Q-values are PyTorch's, and a
// runner that samples (not deterministic) still takes PyTorch's argmax, with log-probability 0
// (greedy: ε = 0), where a softmax over the Q-values would draw the other action at times and
// give it a finite log-probability.
func TestSB3DQNExports(t *testing.T) {
	dir := filepath.Join("..", "testdata", "dqn")
	obs := bindtest.ReadNpy(t, filepath.Join(dir, "sb3_dqn.input.npy")).F32
	wantQ := bindtest.ReadNpy(t, filepath.Join(dir, "sb3_dqn.qvalues.npy")).F32
	wantA := bindtest.ReadNpy(t, filepath.Join(dir, "sb3_dqn.actions.npy")).I64
	n := len(obs) / 4
	for _, name := range []string{"sb3_dqn_cartpole", "sb3_dqn_cartpole_qnet", "cleanrl_dqn_cartpole"} {
		t.Run(name, func(t *testing.T) {
			cfg, logs := observed()
			p, err := load(t, filepath.Join(dir, name+".onnx"), "CartPole-v1", cfg)
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec().Head != head.QValuesKind {
				t.Fatalf("head %s, want %s", p.Spec().Head, head.QValuesKind)
			}
			r := newTestAgent(t, p, n, 7, false)
			defer r.Close()
			acts, envActs, logp, value := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for round := range 20 { // 20 draws a row: a softmax would have strayed from the argmax
				if err := r.Step(n, obs, nil, nil, acts, envActs, logp, value, nil); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if acts[i] != float32(wantA[i]) || logp[i] != 0 {
						t.Fatalf("round %d row %d: action %v (log-probability %v), PyTorch's argmax %d", round, i, acts[i], logp[i], wantA[i])
					}
				}
			}
			q := r.Params()
			for i := range n * 2 {
				if math.Abs(float64(q[i]-wantQ[i])) > 1e-5 {
					t.Fatalf("Q-value %d: %v, PyTorch's %v", i, q[i], wantQ[i])
				}
			}
			if got := r.LogProb(0, []float32{float32(1 - wantA[0])}); !math.IsInf(got, -1) {
				t.Errorf("log-probability of the other action %v, want −Inf (greedy)", got)
			}
			if !bindtest.Logged(logs, "DQN") {
				t.Errorf("the log does not say what was recognised: %v", logs.All())
			}
		})
	}
}

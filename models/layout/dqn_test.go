package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// TestSB3DQN recognises SB3 DQN exports (scripts/gen_fixture_sb3_dqn.py, SB3's module names) as
// the qvalues head over the last q_net layer: the documented OnnxableSB3Policy export, whose
// output is the greedy action (the Q-values are what its ArgMax reads), and the Q-network
// exported alone, whose output is the Q-values; neither has a value.
func TestSB3DQN(t *testing.T) {
	for _, tc := range []struct{ name, params, actions string }{
		{"sb3_dqn_cartpole", "/policy/q_net/q_net/q_net.4/Gemm_output_0", "21"},
		{"sb3_dqn_cartpole_qnet", "12", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "dqn", tc.name+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			m := &onnxpb.ModelProto{}
			if err := proto.Unmarshal(raw, m); err != nil {
				t.Fatal(err)
			}
			b, err := Recognise(m, nil, fixtureEnvs["CartPole-v1"], Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s:\n  %s", b.Family, strings.Join(b.Notes, "\n  "))
			if b.Family != FamilySB3DQN || b.Head != head.QValuesKind || b.Params != tc.params || b.Actions != tc.actions ||
				b.Value != "" || b.DeterministicOnly {
				t.Errorf("family %s, head %s, params %q, actions %q, value %q, deterministic only %v; want %s, %s, %q, %q, none, false",
					b.Family, b.Head, b.Params, b.Actions, b.Value, b.DeterministicOnly, FamilySB3DQN, head.QValuesKind, tc.params, tc.actions)
			}
		})
	}
}

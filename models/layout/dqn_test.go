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

// TestDQNExports recognises DQN exports (scripts/gen_fixture_sb3_dqn.py, SB3's and CleanRL's
// module names) as the qvalues head over the Q-network's last layer: SB3's documented
// OnnxableSB3Policy export, whose output is the greedy action (the Q-values are what its
// ArgMax reads), SB3's Q-network exported alone and CleanRL's QNetwork, whose output is the
// Q-values; none has a value. A policy of one output of logits whose module is not named
// network stays categorical.
func TestDQNExports(t *testing.T) {
	for _, tc := range []struct {
		name            string
		family          Family
		params, actions string
	}{
		{"sb3_dqn_cartpole", FamilySB3DQN, "/policy/q_net/q_net/q_net.4/Gemm_output_0", "21"},
		{"sb3_dqn_cartpole_qnet", FamilySB3DQN, "12", ""},
		{"cleanrl_dqn_cartpole", FamilyCleanRLDQN, "11", ""},
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
			if b.Family != tc.family || b.Head != head.QValuesKind || b.Params != tc.params || b.Actions != tc.actions ||
				b.Value != "" || b.DeterministicOnly {
				t.Errorf("family %s, head %s, params %q, actions %q, value %q, deterministic only %v; want %s, %s, %q, %q, none, false",
					b.Family, b.Head, b.Params, b.Actions, b.Value, b.DeterministicOnly, tc.family, head.QValuesKind, tc.params, tc.actions)
			}
		})
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "softmax", "logsoftmax_cartpole.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(raw, m); err != nil {
		t.Fatal(err)
	}
	if b, err := Recognise(m, nil, fixtureEnvs["CartPole-v1"], Overrides{}); err != nil || b.Head != head.CategoricalKind {
		t.Errorf("a plain nn.Sequential of logits: head %s, %v; want categorical", b.Head, err)
	}
}

package policy

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// TestQNetworkRefused: an SB3 DQN Q-network (testdata/dqn) is not fine-tuned by PPO — the
// batchers act greedily on it — and the error says so and names --head categorical, with
// which it imports as a policy over logits.
func TestQNetworkRefused(t *testing.T) {
	data, err := os.ReadFile("../../testdata/dqn/sb3_dqn_cartpole_qnet.onnx")
	if err != nil {
		t.Fatal(err)
	}
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	_, err = loadForeign(context.Background(), data, spec, layout.Overrides{}, onnx.Config{}, rand.New(rand.NewPCG(1, 2)))
	if !errors.Is(err, ErrFineTune) || !strings.Contains(err.Error(), "Q-network") || !strings.Contains(err.Error(), "--head categorical") {
		t.Fatalf("fine-tuning a Q-network: %v; want ErrFineTune saying why and naming --head categorical", err)
	}
	if _, err := loadForeign(context.Background(), data, spec, layout.Overrides{Head: head.CategoricalKind}, onnx.Config{},
		rand.New(rand.NewPCG(1, 2))); err != nil {
		t.Fatalf("with --head categorical: %v", err)
	}
}

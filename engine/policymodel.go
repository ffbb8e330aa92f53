package engine

import (
	"context"
	"fmt"

	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/onnx"
)

// ErrFineTune is wrapped by errors about a foreign policy that cannot be fine-tuned
// (package engine/policy).
var ErrFineTune = policy.ErrFineTune

// newPolicyModel is the run's trainable policy: the foreign InitPolicy (initData, bound with
// h), or a new native model from the config's architecture and seed.
func newPolicyModel(ctx context.Context, cfg Config, h policy.Head, initData []byte, session onnx.Config) (policy.Model, error) {
	o := policy.Options{Head: h, Hidden: cfg.Hidden, Activation: cfg.Activation, Shared: cfg.Shared, LogStdInit: cfg.LogStdInit,
		Seed: cfg.Seed, ValueWarmup: cfg.ValueWarmup, Session: session}
	if cfg.InitPolicy != "" {
		o.Foreign = initData
	}
	pm, err := policy.New(ctx, o)
	if err != nil && cfg.InitPolicy != "" {
		return nil, fmt.Errorf("engine: fine-tuning %s: %w", cfg.InitPolicy, err)
	}
	return pm, err
}

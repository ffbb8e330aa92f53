package engine

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// ErrFineTune is wrapped by errors about a foreign policy that cannot be fine-tuned
// (package engine/policy).
var ErrFineTune = policy.ErrFineTune

// newPolicyModel is the run's trainable policy: the foreign InitPolicy (initData, bound with
// hs and names), or a new native model from the config's architecture and seed.
func newPolicyModel(ctx context.Context, cfg Config, hs head.Spec, names head.Names, initData []byte, session onnx.Config) (policy.Model, error) {
	if cfg.InitPolicy != "" {
		f, err := policy.LoadForeign(ctx, initData, hs, policy.ForeignOptions{Names: names, Head: head.Kind(cfg.Head), Session: session,
			Rand: rand.New(rand.NewPCG(cfg.Seed, 0x63726974696373)), ValueWarmup: cfg.ValueWarmup})
		if err != nil {
			return nil, fmt.Errorf("engine: fine-tuning %s: %w", cfg.InitPolicy, err)
		}
		return f, nil
	}
	mcfg := models.Config{Spec: hs, Hidden: cfg.Hidden, Activation: models.Activation(cfg.Activation), Shared: cfg.Shared, LogStdInit: cfg.LogStdInit}
	params, err := models.NewParams(mcfg, rand.New(rand.NewPCG(cfg.Seed, 0x706172616d73)))
	if err != nil {
		return nil, err
	}
	return policy.Native{Params: params}, nil
}

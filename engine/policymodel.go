package engine

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// policyModel is the trainable policy: our own architecture, or an imported foreign graph.
type policyModel interface {
	flatParams() []float32
	headSpec() head.Spec
	export(version int64) ([]byte, error)
	// artifact is policy.onnx for an export; trained is the graph the batchers run when it
	// differs from the artifact (written beside it), else nil.
	artifact(model []byte, version int64) ([]byte, error)
	trained(model []byte) []byte
	towers(algo.Algorithm) learner.TowerFactory
	// publishLayout places flatParams' weights in the exported graph, for Batcher.Publish.
	publishLayout() []bind.Param
}

// native is one of our architectures (package models).
type native struct{ p *models.Params }

func (n native) flatParams() []float32                        { return n.p.Data() }
func (n native) headSpec() head.Spec                          { return n.p.Config().Spec }
func (n native) export(v int64) ([]byte, error)               { return models.Export(n.p, v) }
func (n native) towers(a algo.Algorithm) learner.TowerFactory { return Towers(n.p, a) }
func (n native) artifact(m []byte, _ int64) ([]byte, error)   { return m, nil }
func (n native) trained([]byte) []byte                        { return nil }

func (n native) publishLayout() []bind.Param {
	ps := make([]bind.Param, n.p.Len())
	for i, name := range n.p.Names() {
		size := 1
		for _, d := range n.p.Shape(i) {
			size *= d
		}
		ps[i] = bind.Param{Name: name, Offset: n.p.Offset(i), Len: size}
	}
	return ps
}

func (f *foreign) trained(m []byte) []byte {
	if f.critic {
		return m
	}
	return nil
}
func (f *foreign) flatParams() []float32 { return f.flat }
func (f *foreign) headSpec() head.Spec   { return f.spec }

// newPolicyModel is the run's trainable policy: the foreign InitPolicy (initData, bound with
// hs and names), or a new native model from the config's architecture and seed.
func newPolicyModel(ctx context.Context, cfg Config, hs head.Spec, names head.Names, initData []byte, session onnx.Config) (policyModel, error) {
	if cfg.InitPolicy != "" {
		f, err := loadForeign(ctx, initData, hs, layout.Overrides{Names: names, Head: head.Kind(cfg.Head)}, session,
			rand.New(rand.NewPCG(cfg.Seed, 0x63726974696373)))
		if err != nil {
			return nil, fmt.Errorf("engine: fine-tuning %s: %w", cfg.InitPolicy, err)
		}
		f.source = initData
		return f, nil
	}
	mcfg := models.Config{Spec: hs, Hidden: cfg.Hidden, Activation: models.Activation(cfg.Activation), Shared: cfg.Shared, LogStdInit: cfg.LogStdInit}
	params, err := models.NewParams(mcfg, rand.New(rand.NewPCG(cfg.Seed, 0x706172616d73)))
	if err != nil {
		return nil, err
	}
	return native{params}, nil
}

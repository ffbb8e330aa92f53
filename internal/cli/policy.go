package cli

import (
	"flag"
	"fmt"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"go.uber.org/zap"
)

// HeadFlags are the flags that bind a foreign policy (one without towerrl metadata) to a head,
// shared by batcher, eval and train.
type HeadFlags struct {
	Head, ActionSpace, Params, LogStd, Value string
}

// Register adds the flags to fs.
func (p *HeadFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&p.Head, "head", "", "head of a foreign policy without towerrl metadata: categorical or gaussian (default: from the env's action space)")
	fs.StringVar(&p.ActionSpace, "action-space", "", "action space of a foreign policy: discrete:N or box:DIM:LOW:HIGH (default: the env's)")
	fs.StringVar(&p.Params, "logits-output", "", "output holding the logits or the Gaussian mean (default: by convention)")
	fs.StringVar(&p.LogStd, "logstd-output", "", "output holding the Gaussian log_std (default: an output named *log_std*)")
	fs.StringVar(&p.Value, "value-output", "", "output holding the state value (default: an output named *value*)")
}

// PolicyFlags are the flags that say how to run an ONNX policy, shared by batcher and eval.
type PolicyFlags struct {
	HeadFlags
	Device, Library string
	Threads         int
}

// Register adds the flags to fs.
func (p *PolicyFlags) Register(fs *flag.FlagSet) {
	p.HeadFlags.Register(fs)
	fs.StringVar(&p.Device, "device", "cpu", "where the policy runs: cpu, cuda or auto (cuda, falling back to cpu)")
	fs.StringVar(&p.Library, "ort-lib", "", "ONNX Runtime library (default: $"+onnx.LibraryEnv+", then the per-user cache)")
	fs.IntVar(&p.Threads, "threads", 1, "ONNX Runtime intra-op threads per worker (-1: one per core)")
}

// Config turns the flags into a batcher.PolicyConfig.
func (p *PolicyFlags) Config(log *zap.Logger) (batcher.PolicyConfig, error) {
	prov, err := onnx.ParseProvider(p.Device)
	if err != nil {
		return batcher.PolicyConfig{}, fmt.Errorf("--device: %w", err)
	}
	cfg := batcher.PolicyConfig{
		Names:   head.Names{Params: p.Params, LogStd: p.LogStd, Value: p.Value},
		Session: onnx.Config{Provider: prov, Library: p.Library, IntraOpThreads: p.Threads, Logger: log},
	}
	if p.ActionSpace != "" || p.Head != "" {
		if p.ActionSpace == "" {
			return cfg, fmt.Errorf("--head needs --action-space")
		}
		spec := head.Spec{Head: head.Kind(p.Head)}
		if err := spec.ParseActionSpace(p.ActionSpace); err != nil {
			return cfg, fmt.Errorf("--action-space: %w", err)
		}
		if err := spec.Validate(); err != nil {
			return cfg, fmt.Errorf("--head: %w", err)
		}
		cfg.Spec = &spec
	}
	return cfg, nil
}

package cli

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"go.uber.org/zap"
)

// HeadFlags are the flags that bind a foreign policy to a head, shared by batcher, eval and
// train. Every one is optional: the graph's head and tensors are recognised (towerrl metadata,
// Stable-Baselines3, SAC, RLlib, Sample Factory, CleanRL layouts, naming conventions), and a
// flag only overrides what was recognised.
type HeadFlags struct {
	Head, ActionSpace, Params, LogStd, Value string
}

// Register adds the flags to fs.
func (p *HeadFlags) Register(fs *flag.FlagSet) {
	kinds := make([]string, len(head.Kinds))
	for i, k := range head.Kinds {
		kinds[i] = string(k)
	}
	fs.StringVar(&p.Head, "head", "", "policy head: "+strings.Join(kinds, ", ")+" (default: recognised from the graph, else the env's action space)")
	fs.StringVar(&p.ActionSpace, "action-space", "", "action space of a foreign policy: discrete:N or box:DIM:LOW:HIGH; must be the env's (default: the env's)")
	fs.StringVar(&p.Params, "logits-output", "", "tensor holding the logits or the Gaussian mean: a graph output or an inner tensor (default: recognised)")
	fs.StringVar(&p.LogStd, "logstd-output", "", "tensor holding the Gaussian log_std: an output, inner tensor or initializer (default: recognised)")
	fs.StringVar(&p.Value, "value-output", "", "tensor holding the state value: an output or inner tensor (default: recognised)")
}

// PolicyFlags are the flags that say how to run an ONNX policy, shared by batcher and eval.
type PolicyFlags struct {
	HeadFlags
	// Actions is --actions-output, the graph's own deterministic actions; ActionScale is
	// --action-scale (env or none) for a tanh-gaussian head.
	Actions, ActionScale string
	Device, Library      string
	Threads              int
}

// Register adds the flags to fs.
func (p *PolicyFlags) Register(fs *flag.FlagSet) {
	p.HeadFlags.Register(fs)
	fs.StringVar(&p.Actions, "actions-output", "", "tensor holding the policy's own deterministic actions, for a policy without logits or mean (runs with --deterministic only; default: recognised)")
	fs.StringVar(&p.ActionScale, "action-scale", "", "tanh-gaussian (SAC) actions: env maps [-1,1] onto the env's bounds, none passes them as they are (default: detected from the graph)")
	fs.StringVar(&p.Device, "device", "cpu", "where the policy runs: cpu, cuda or auto (cuda, falling back to cpu)")
	fs.StringVar(&p.Library, "ort-lib", "", "ONNX Runtime library (default: $"+onnx.LibraryEnv+", then the per-user cache)")
	fs.IntVar(&p.Threads, "threads", 1, "ONNX Runtime intra-op threads per worker (-1: one per core)")
}

// CheckThreads checks --threads before anything is loaded: -1 (ONNX Runtime picks, one per
// core), or 0 (the default, 1) to the cores.
func (p *PolicyFlags) CheckThreads() error {
	if p.Threads >= -1 && p.Threads <= runtime.NumCPU() {
		return nil
	}
	return fmt.Errorf("--threads %d: want -1 (one per core) or 1 to %d (the cores here)", p.Threads, runtime.NumCPU())
}

// Config turns the flags into a bind.Config whose session logs to log.
func (p *PolicyFlags) Config(log *zap.Logger) (bind.Config, error) {
	prov, err := onnx.ParseProvider(p.Device)
	if err != nil {
		return bind.Config{}, fmt.Errorf("--device: %w", err)
	}
	scale, err := head.ParseScale(p.ActionScale)
	if err != nil {
		return bind.Config{}, fmt.Errorf("--action-scale: %w", err)
	}
	cfg := bind.Config{
		Names:   head.Names{Params: p.Params, LogStd: p.LogStd, Value: p.Value, Actions: p.Actions},
		Session: onnx.Config{Provider: prov, Library: p.Library, IntraOpThreads: p.Threads, Logger: log},
	}
	if p.ActionScale != "" {
		cfg.ActionScale = scale
	}
	if p.Head != "" && !slices.Contains(head.Kinds, head.Kind(p.Head)) {
		return cfg, fmt.Errorf("--head %q: want one of %v", p.Head, head.Kinds)
	}
	switch {
	case p.ActionSpace != "":
		spec := head.Spec{Head: head.Kind(p.Head)}
		if err := spec.ParseActionSpace(p.ActionSpace); err != nil {
			return cfg, fmt.Errorf("--action-space: %w", err)
		}
		if err := spec.Validate(); err != nil {
			return cfg, fmt.Errorf("--head %s --action-space %s: %w", spec.Head, p.ActionSpace, err)
		}
		cfg.Spec = &spec
	case p.Head != "":
		cfg.Head = head.Kind(p.Head)
	}
	if h := head.Kind(p.Head); cfg.ActionScale != "" && h != "" && h != head.TanhGaussianKind {
		return cfg, errors.New("--action-scale applies to the tanh-gaussian head only")
	}
	return cfg, nil
}

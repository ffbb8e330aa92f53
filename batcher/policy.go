package batcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// ErrPolicy is wrapped by every error about a policy that does not fit the environment.
var ErrPolicy = errors.New("batcher: policy does not fit the environment")

// PolicyConfig says how to run an ONNX policy.
type PolicyConfig struct {
	// Spec describes a foreign policy's head and spaces. Default: the model's towerrl.*
	// metadata, else the environment's action space (categorical over a Discrete space,
	// Gaussian over a Box).
	Spec *head.Spec
	// Names picks the outputs holding the head's parameters, log_std and value. Default:
	// head.Bind's conventions.
	Names head.Names
	// Session configures the ONNX Runtime sessions (provider, threads, library). MaxBatch is
	// set by the batcher.
	Session onnx.Config
}

// Policy is an ONNX policy checked against an environment, ready to make one agent per worker.
type Policy struct {
	model   []byte
	version int64
	spec    head.Spec
	outs    head.Outputs
	cfg     PolicyConfig
}

// Spec is the policy's head and spaces.
func (p *Policy) Spec() head.Spec { return p.spec }

// HasValue reports whether the policy has a value output (Rollout.Values and the bootstrap
// values are zeros without one).
func (p *Policy) HasValue() bool { return p.outs.Value >= 0 }

// Version is the policy version its samples carry.
func (p *Policy) Version() int64 { return p.version }

// NewPolicy checks an ONNX policy against env before any step: its single input must take the
// env's observation rows and its head must match the env's action space. The model bytes are
// kept, not copied: do not modify them.
func NewPolicy(ctx context.Context, model []byte, version int64, env envs.Spec, cfg PolicyConfig) (*Policy, error) {
	sc := cfg.Session
	sc.MaxBatch = 1
	s, err := onnx.New(ctx, model, sc)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ins := s.Inputs()
	if len(ins) != 1 {
		return nil, fmt.Errorf("%w: the policy has %d inputs (%v); a batcher feeds one, the observations", ErrPolicy, len(ins), ins)
	}
	if ins[0].DType != onnx.Float32 {
		return nil, fmt.Errorf("%w: policy input %q holds %s; observations are float32", ErrPolicy, ins[0].Name, ins[0].DType)
	}
	obs := make([]int64, len(env.Observation.Shape))
	for i, d := range env.Observation.Shape {
		obs[i] = int64(d)
	}
	if !ins[0].Batched || !slices.Equal(ins[0].Row, obs) {
		return nil, fmt.Errorf("%w: policy input %q takes rows of shape %v, %s observations have shape %v",
			ErrPolicy, ins[0].Name, ins[0].Row, env.ID, obs)
	}
	spec, err := resolveSpec(s.Metadata(), env, cfg.Spec)
	if err != nil {
		return nil, err
	}
	outs, err := head.Bind(spec, s.Outputs(), cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	return &Policy{model: model, version: version, spec: spec, outs: outs, cfg: cfg}, nil
}

// WithModel returns the policy for model, a version of p's graph with other weights (a trainer's
// re-export, a fine-tuned write-back). The checks NewPolicy made for p, and its head and output
// bindings, hold for it as they are, so no session is opened to check it again.
func (p *Policy) WithModel(model []byte, version int64) *Policy {
	q := *p
	q.model, q.version = model, version
	return &q
}

// resolveSpec picks the head spec (given, from metadata, or from the env) and checks that its
// action space is the env's.
func resolveSpec(meta map[string]string, env envs.Spec, given *head.Spec) (head.Spec, error) {
	var spec head.Spec
	switch fromMeta, ok, err := head.FromMetadata(meta); {
	case given != nil:
		spec = *given
	case err != nil:
		return spec, fmt.Errorf("%w: %v", ErrPolicy, err)
	case ok:
		spec = fromMeta
	default:
		if err := spec.ParseActionSpace(env.Action.String()); err != nil {
			return spec, fmt.Errorf("%w: %v", ErrPolicy, err)
		}
	}
	if err := spec.Validate(); err != nil {
		return spec, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	var want head.Spec
	if err := want.ParseActionSpace(env.Action.String()); err != nil {
		return spec, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	if spec.ActionSpace() != want.ActionSpace() || (spec.Head != want.Head) {
		return spec, fmt.Errorf("%w: the policy's %s head acts in %s, %s's action space is %s",
			ErrPolicy, spec.Head, spec.ActionSpace(), env.ID, want.ActionSpace())
	}
	return spec, nil
}

// agent makes the ONNX agent for a worker stepping n envs with the given random streams.
func (p *Policy) agent(ctx context.Context, n int, rngs []*rand.Rand, deterministic bool) (*onnxAgent, error) {
	sc := p.cfg.Session
	sc.MaxBatch = n
	s, err := onnx.New(ctx, p.model, sc)
	if err != nil {
		return nil, err
	}
	a := &onnxAgent{sess: s, spec: p.spec, rngs: rngs, deterministic: deterministic, version: p.version,
		act: make([]int32, 1), lp: make([]float32, 1)}
	fail := func(err error) (*onnxAgent, error) { return nil, errors.Join(err, s.Close()) }
	if a.in, err = onnx.Input[float32](s, 0); err != nil {
		return fail(err)
	}
	if a.params, err = onnx.Output[float32](s, p.outs.Params); err != nil {
		return fail(err)
	}
	if p.outs.LogStd >= 0 {
		if a.logStd, err = onnx.Output[float32](s, p.outs.LogStd); err != nil {
			return fail(err)
		}
		a.logStdPerRow = s.Outputs()[p.outs.LogStd].Batched
	}
	if p.outs.Value >= 0 {
		if a.value, err = onnx.Output[float32](s, p.outs.Value); err != nil {
			return fail(err)
		}
	}
	return a, nil
}

// LoadPolicy reads an ONNX policy file and checks it against the environment envID (see NewPolicy).
// The version is the file's towerrl.version metadata when it has one, else 0.
func LoadPolicy(ctx context.Context, path, envID string, cfg PolicyConfig) (*Policy, error) {
	env, err := envs.Lookup(envID)
	if err != nil {
		return nil, err
	}
	model, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("batcher: loading policy: %w", err)
	}
	p, err := NewPolicy(ctx, model, 0, env, cfg)
	if err != nil {
		return nil, fmt.Errorf("loading policy %q: %w", path, err)
	}
	if cfg.Spec == nil {
		p.version = p.spec.Version
	}
	return p, nil
}

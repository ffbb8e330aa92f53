package bind

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/bounded"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// ErrPolicy is wrapped by every error about a policy that does not fit the environment.
var ErrPolicy = errors.New("bind: the policy does not fit the environment")

// Config says how to bind and run an ONNX policy. The zero value binds the policy by itself
// (see New).
type Config struct {
	// Spec names a foreign policy's head and action space (--head with --action-space); the
	// action space must be the env's. Default: recognised from the graph (package
	// models/layout): towerrl.* metadata, an exporter's layout, naming conventions.
	Spec *head.Spec
	// Head names the head (--head) without an action space, when Spec is nil. Default:
	// recognised.
	Head head.Kind
	// Names binds the head's logits or mean, log_std, value and deterministic actions to
	// tensors by name (--logits-output, --logstd-output, --value-output, --actions-output):
	// graph outputs, inner tensors or initializers. Default: recognised.
	Names head.Names
	// ActionScale says how a tanh-gaussian head's actions in [−1, 1] reach the env
	// (--action-scale): head.ScaleEnv maps them onto the env's bounds, head.ScaleNone passes
	// them as they are. Default: detected (a graph that scales its own actions says so).
	ActionScale head.Scale
	// Session configures the ONNX Runtime sessions (provider, threads, library). MaxBatch and
	// Weights are set by the Runner. Its Logger receives, at info level, what the policy was
	// bound to and how its graph was rewritten.
	Session onnx.Config
	// Publish lays out the weights a trainer publishes in place with batcher.Batcher.Publish: each
	// names an initializer of the graph given to New (or an Identity's output over one,
	// which becomes an initializer of its own: onnx/graph's untied parameters) and where its
	// values lie in the trainer's flat parameter vector ([ContiguousParams] lays out names
	// back to back, as onnx/graph's Params.TrainableNames and models.Params.Names are). The
	// sessions then read these weights from buffers each worker owns (package onnx's fed
	// weights); the others stay the graph's constants. Default: none (Publish is refused; new
	// weights go through WithModel and UpdatePolicy).
	Publish []Param
}

// Param locates one published weight in a trainer's flat parameter vector.
type Param struct {
	Name   string // the initializer's name
	Offset int    // where its values start in the flat vector
	Len    int    // how many values it holds: the initializer's size, row-major
}

// ContiguousParams lays out the named weights back to back from offset 0, sizes[i] values for
// names[i].
func ContiguousParams(names []string, sizes []int) []Param {
	out := make([]Param, len(names))
	off := 0
	for i, name := range names {
		n := 0
		if i < len(sizes) {
			n = sizes[i]
		}
		out[i] = Param{Name: name, Offset: off, Len: n}
		off += n
	}
	return out
}

// Policy is an ONNX policy checked against an environment, ready to make one Runner per worker.
// It is immutable and safe for concurrent use.
type Policy struct {
	model   *onnx.Model // what sessions are made from: the given model, or its edited copy
	version int64
	spec    head.Spec
	outs    head.Outputs
	binding layout.Binding // names in the original graph, for Binding
	feeds   feeds          // session inputs and outputs by role
	cfg     Config
	// fixed is the batch a model that could not be freed is fixed at (the agents run it one
	// batch per call); 0 for a dynamic batch.
	fixed int
	// reweigh carries the edits over to WithModel's bytes; nil when the model runs unedited.
	reweigh *reweigh
	// pub is the layout of the weights batcher.Batcher.Publish writes (Config.Publish) with the
	// model's values; nil when the policy is not published in place.
	pub *publishing
	// err is WithModel's failure, returned when agents are made from the policy.
	err error
}

// feeds locates what a session's inputs take and its recurrent state outputs, by index.
type feeds struct {
	obs     int
	seqLens int // -1 when absent
	starts  int // -1 when absent
	zeros   []int
	states  []stateIO
}

// stateIO is one recurrent state as the session sees it (batch first).
type stateIO struct {
	name    string // the graph input's name, for messages
	in, out int    // session input and output indexes
	row     []int  // shape of one env's state
	size    int    // elements in row
}

// Spec is the policy's head and spaces.
func (p *Policy) Spec() head.Spec { return p.spec }

// HasValue reports whether the policy has a value output (Rollout.Values and the bootstrap
// values are zeros without one).
func (p *Policy) HasValue() bool { return p.outs.Value >= 0 }

// Version is the policy version its samples carry.
func (p *Policy) Version() int64 { return p.version }

// Binding is what the policy's head and inputs were bound to, with names in the graph given
// to New (inner tensors and initializers included, before any tensor was exposed):
// what a trainer fine-tuning that graph reads its head from.
func (p *Policy) Binding() layout.Binding {
	b := p.binding
	b.State = slices.Clone(b.State)
	b.Zeros = slices.Clone(b.Zeros)
	b.Notes = slices.Clone(b.Notes)
	return b
}

// Recurrent reports whether the policy carries a recurrent state from step to step.
func (p *Policy) Recurrent() bool { return len(p.feeds.states) > 0 }

// Edited reports whether the sessions run an edited copy of the graph given to New (batch
// freed, inner tensors exposed, recurrent states made batch-first); WithModel carries the same
// edits over to a re-export.
func (p *Policy) Edited() bool { return p.reweigh != nil }

// FixedBatch is the batch a policy whose fixed batch could not be made dynamic runs at, one
// batch per call; 0 when the policy runs at any batch.
func (p *Policy) FixedBatch() int { return p.fixed }

// New checks an ONNX policy against env before any step and binds it without flags:
//
//  1. A model whose batch is fixed (every input dimension a number) is rewritten with a
//     dynamic batch (edit.DynamicBatch, verified against the original); when that cannot be
//     done the workers run it one fixed batch per call, with a warning.
//  2. layout.Recognise finds its head (categorical, gaussian, tanh-gaussian), the tensors
//     holding logits or mean, log_std, value and deterministic actions, and how its inputs
//     are fed (observations, recurrent states, seq_lens, episode_starts, dummy inputs); cfg's
//     Spec, Head, Names and ActionScale win over what it finds. When nothing fits its error
//     lists the candidate tensors and the flags to pass, and New returns it as it is.
//  3. layout.Expose makes the inner tensors named graph outputs, and recurrent states with
//     their batch on axis 1 are transposed to batch-first at the graph's edge.
//  4. A session checks the result: the observation input takes the env's observations, and
//     head.Bind binds the outputs.
//
// Every binding note and rewrite goes to cfg.Session.Logger at info level. A towerrl model
// (dynamic batch, head outputs named) is used as it is. The model's bytes are parsed and checked
// once (onnx.Parse), then kept, not copied: do not modify them.
func New(ctx context.Context, model []byte, version int64, env envs.Spec, cfg Config) (*Policy, error) {
	m, err := onnx.Parse(model)
	if err != nil {
		return nil, err
	}
	return FromModel(ctx, m, version, env, cfg)
}

// FromModel is New for a model parsed and checked once by onnx.Parse (a caller that reads the
// model too passes it on instead of its bytes): nothing parses the bytes again. The model is
// kept, not copied.
func FromModel(ctx context.Context, model *onnx.Model, version int64, env envs.Spec, cfg Config) (*Policy, error) {
	log := cfg.Session.Logger
	if log == nil {
		log = zap.NewNop()
	}
	envHead, err := envHeadSpec(env)
	if err != nil {
		return nil, err
	}
	orig := model.Proto()
	if err := checkObsDeclared(orig, env); err != nil {
		return nil, err
	}
	over := layout.Overrides{Names: cfg.Names, Head: cfg.Head, Scale: cfg.ActionScale}
	if cfg.Spec != nil {
		if err := checkGivenSpec(*cfg.Spec, envHead, env.ID); err != nil {
			return nil, err
		}
		over.Head = cfg.Spec.Head
		if cfg.Spec.Head == head.TanhGaussianKind && over.Scale == "" && cfg.Spec.Scale != "" {
			over.Scale = cfg.Spec.Scale
		}
	}
	fromMeta, hasMeta, metaErr := head.FromMetadata(model.Metadata())
	if hasMeta && metaErr == nil && cfg.Spec == nil {
		if err := checkGivenSpec(fromMeta, envHead, env.ID); err != nil {
			return nil, err
		}
	}

	pr, err := prepare(ctx, model, envHead, over, cfg.Session, log)
	if err != nil {
		return nil, err
	}
	var pub *publishing
	if len(cfg.Publish) > 0 {
		if pr.model, pub, err = preparePublish(pr.model, cfg.Publish); err != nil {
			return nil, err
		}
		log.Info("policy: published in place: its sessions read the trainer's weights from buffers",
			zap.Int("weights", len(cfg.Publish)), zap.Int("values", pub.size))
		if len(pub.conv) > 0 {
			log.Warn("policy: published convolution weights are fed to ONNX Runtime, which then runs those convolutions without its constant-weight layout (measured 2.3× slower for an Atari CNN at batch 64); for a convolutional policy, publishing with WithModel and UpdatePolicy is faster",
				zap.Strings("conv_weights", pub.conv))
		}
	}
	sc := cfg.Session
	sc.MaxBatch = 1
	sc.Weights = pub.names()
	s, err := onnx.NewSession(ctx, pr.model, sc)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	spec := pr.binding.Spec(envHead)
	if hasMeta && metaErr == nil {
		spec.EnvID, spec.Version = fromMeta.EnvID, fromMeta.Version
		if spec.Head == head.QValuesKind && fromMeta.Head == head.QValuesKind {
			spec.Epsilon = fromMeta.Epsilon // the exploration rate the trainer published with the weights
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	outs, err := bindOutputs(spec, s.Outputs(), pr.exposed)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	fd, err := bindFeeds(s, pr.exposed, pr.states, env)
	if err != nil {
		return nil, err
	}
	fixed := pr.fixed
	if !s.StaticBatch() {
		fixed = 0
	}
	p := &Policy{model: pr.model, version: version, spec: spec, outs: outs, binding: pr.binding, feeds: fd, cfg: cfg,
		fixed: fixed, reweigh: pr.reweigh, pub: pub}
	if note := p.bareMean(); note != "" {
		log.Info("policy: " + note)
	}
	if w := p.probeScale(ctx, env); w != "" {
		log.Warn("policy: " + w)
	}
	return p, nil
}

// bareMean says what is assumed of a Box policy whose only action output is a mean, with no
// log_std and no tanh in the graph: the mean is the action, clipped to the env's bounds. An
// SB3 1.x SAC actor exports exactly that shape but means its output before tanh, and nothing in
// the graph tells the two apart, so the note names the flag that binds it so. Empty for every
// other policy.
func (p *Policy) bareMean() string {
	b := p.binding
	if p.spec.Head != head.GaussianKind || !p.outs.DeterministicOnly || p.outs.Params < 0 || p.outs.LogStd >= 0 ||
		p.outs.Split || b.Family == layout.FamilyTowerRL {
		return ""
	}
	return fmt.Sprintf("output %q is taken as a Gaussian mean clipped to the bounds %v to %v (the graph has no log_std and no tanh), so the policy runs deterministically; if it is a SAC actor's pre-tanh mean, bind it with --head tanh-gaussian",
		b.Params, p.spec.Low, p.spec.High)
}

// probeScale runs a continuous feed-forward policy deterministically on the first
// observations of probeEnvs envs of env and returns a warning when its actions look like
// another scale than the env's bounds: most rows far outside them (clipped at every step), or
// every row inside [−1, 1] where the bounds are wider (a policy trained on normalised actions,
// as SAC's squashed ones are, taken as env units). Empty: nothing to say, or no probe possible.
func (p *Policy) probeScale(ctx context.Context, env envs.Spec) string {
	// towerrl's own exports name their head and action space in their metadata: a Gaussian
	// mean past the bounds there is the policy's (PPO's means are not squashed; the env
	// clips), not a binding to correct.
	if !p.spec.Head.Continuous() || p.Recurrent() || p.binding.Family == layout.FamilyTowerRL {
		return ""
	}
	const n = probeEnvs
	v, err := envs.Make(env.ID, envs.Config{NumEnvs: n, Seed: 1})
	if err != nil {
		return ""
	}
	defer v.Close()
	if v.Reset() != nil {
		return ""
	}
	rngs := make([]*rand.Rand, n)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(1, uint64(i)))
	}
	a, err := p.NewRunner(ctx, n, rngs, true)
	if err != nil {
		return ""
	}
	defer a.Close()
	d := p.spec.ActionDim()
	acts, envActs, logp := make([]float32, n*d), make([]float32, n*d), make([]float32, n)
	if a.Run(n, v.Buffers().Obs, nil, nil) != nil || a.sample(n, acts, envActs, logp) != nil {
		return ""
	}
	// The policy's actions in env units before clipping: the raw mean for a Gaussian, the
	// mapped ones for a tanh-gaussian (which never leave the bounds).
	policyActs := acts
	if p.spec.Head == head.TanhGaussianKind {
		policyActs = envActs
	}
	far, unit, wide := 0, 0, false
	for i := range n {
		rowFar, rowUnit := false, true
		for j := range d {
			x := math.Abs(float64(policyActs[i*d+j]))
			bound := math.Max(math.Abs(float64(p.spec.Low[j])), math.Abs(float64(p.spec.High[j])))
			wide = wide || bound >= 1.5
			rowFar = rowFar || x > 1.5*bound
			rowUnit = rowUnit && x <= 1
		}
		if rowFar {
			far++
		}
		if rowUnit {
			unit++
		}
	}
	bounds := fmt.Sprintf("%s's bounds %v to %v", env.ID, p.spec.Low, p.spec.High)
	switch {
	case far*2 >= n:
		return fmt.Sprintf("%d of %d probe observations give actions beyond 1.5× %s, so most steps will be clipped: if the policy outputs a pre-tanh mean (SAC), bind it with --head tanh-gaussian; if it was trained with rescaled actions, check --action-space", far, n, bounds)
	case wide && unit == n && p.spec.Head != head.TanhGaussianKind:
		return fmt.Sprintf("every action of %d probe observations lies in [−1, 1] while %s are wider: a policy trained on normalised actions (SAC's squashed tanh output) is taken as env units here; let towerrl bind it (no --head/--logits-output: SAC exports are recognised), or name the pre-tanh mean with --head tanh-gaussian --action-scale env", n, bounds)
	}
	return ""
}

// probeEnvs is the number of observations probeScale runs the policy on.
const probeEnvs = 32

// bindOutputs locates the tensors of b (named as the session's outputs) among outs with
// head.Bind. The binding is the decision: head.Bind sees only the outputs it names, so a role
// it left empty (a mean it dropped, a log_std it found none of) stays empty instead of going
// by head.Bind's conventions to another output (a log-probability, sampled actions, a
// recurrent state).
func bindOutputs(spec head.Spec, infos []onnx.TensorInfo, b layout.Binding) (head.Outputs, error) {
	outs := HeadTensors(infos)
	names := b.Names()
	roles := []string{names.Params, names.LogStd, names.Value, names.Actions}
	var bound []head.Tensor
	var at []int // at[j] is the index in outs of bound[j]
	for i, t := range outs {
		if slices.Contains(roles, t.Name) {
			bound, at = append(bound, t), append(at, i)
		}
	}
	for _, name := range roles {
		if name != "" && !slices.ContainsFunc(bound, func(t head.Tensor) bool { return t.Name == name }) {
			return head.Bind(spec, outs, names) // its error names the missing output and lists them all
		}
	}
	o, err := head.Bind(spec, bound, names)
	if err != nil {
		return o, err
	}
	for _, i := range []*int{&o.Params, &o.LogStd, &o.Value, &o.Actions} {
		if *i >= 0 {
			*i = at[*i]
		}
	}
	return o, nil
}

// HeadTensor is a session's description of a tensor as package head reads it.
func HeadTensor(t onnx.TensorInfo) head.Tensor {
	return head.Tensor{Name: t.Name, DType: head.DType(t.DType.String()), Declared: t.Declared, Batched: t.Batched, Row: t.Row}
}

// HeadTensors converts a session's outputs for head.Bind.
func HeadTensors(infos []onnx.TensorInfo) []head.Tensor {
	out := make([]head.Tensor, len(infos))
	for i, t := range infos {
		out[i] = HeadTensor(t)
	}
	return out
}

// envHeadSpec is the env's action space as a head spec (categorical over a Discrete space,
// gaussian over a Box) with its observation shape.
func envHeadSpec(env envs.Spec) (head.Spec, error) {
	var s head.Spec
	if err := s.SetSpace(env.Action); err != nil {
		return s, fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	s.ObsShape = slices.Clone(env.Observation.Shape)
	return s, nil
}

// checkObsDeclared refuses early a graph with one input whose declared rows cannot be the
// env's observations (the full check, on every graph, is bindFeeds').
func checkObsDeclared(m *onnxpb.ModelProto, env envs.Spec) error {
	g := m.GetGraph()
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	var ins []*onnxpb.ValueInfoProto
	for _, in := range g.GetInput() {
		if !inits[in.GetName()] {
			ins = append(ins, in)
		}
	}
	if len(ins) != 1 {
		return nil
	}
	dims := ins[0].GetType().GetTensorType().GetShape().GetDim()
	if len(dims) == 0 {
		return nil
	}
	row := make([]int64, len(dims)-1)
	fits := len(row) == len(env.Observation.Shape)
	for i, d := range dims[1:] {
		row[i] = -1
		if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
			row[i] = v.DimValue
			fits = fits && v.DimValue == int64(env.Observation.Shape[i])
		}
	}
	if fits {
		return nil
	}
	return fmt.Errorf("%w: policy input %q takes rows of shape %v, %s observations have shape %v",
		ErrPolicy, ins[0].GetName(), row, env.ID, env.Observation.Shape)
}

// checkGivenSpec checks that a spec from the caller or the metadata acts in the env's space.
func checkGivenSpec(spec, env head.Spec, envID string) error {
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	if spec.ActionSpace() != env.ActionSpace() || spec.Head.Continuous() != env.Head.Continuous() {
		return fmt.Errorf("%w: the policy's %s head acts in %s, %s's action space is %s",
			ErrPolicy, spec.Head, spec.ActionSpace(), envID, env.ActionSpace())
	}
	return nil
}

// bindFeeds gives every session input a role from the binding and checks the observation
// input and the recurrent states.
func bindFeeds(s *onnx.Session, b layout.Binding, states []layout.State, env envs.Spec) (feeds, error) {
	f := feeds{obs: -1, seqLens: -1, starts: -1}
	ins, outs := s.Inputs(), s.Outputs()
	stateIn := map[string]int{}
	for k, st := range states {
		stateIn[st.Input] = k
	}
	f.states = make([]stateIO, len(states))
	for i, in := range ins {
		if k, ok := stateIn[in.Name]; ok {
			st := states[k]
			out := slices.IndexFunc(outs, func(t onnx.TensorInfo) bool { return t.Name == st.Output })
			switch {
			case out < 0:
				return f, fmt.Errorf("%w: recurrent state %q has no output %q", ErrPolicy, b.State[k].Input, b.State[k].Output)
			case in.DType != onnx.Float32 || outs[out].DType != onnx.Float32:
				return f, fmt.Errorf("%w: recurrent state %q holds %s; the batcher carries float32 states", ErrPolicy, b.State[k].Input, in.DType)
			case !in.Batched || !outs[out].Batched || in.RowSize() != outs[out].RowSize():
				return f, fmt.Errorf("%w: recurrent state %s → %s: want one row per env on both sides, of the same size",
					ErrPolicy, in, outs[out])
			}
			row := make([]int, len(in.Row))
			for j, d := range in.Row {
				row[j] = int(d)
			}
			f.states[k] = stateIO{name: b.State[k].Input, in: i, out: out, row: row, size: in.RowSize()}
			continue
		}
		switch {
		case in.Name == b.Observation:
			f.obs = i
		case in.Name == b.SeqLens:
			f.seqLens = i
		case in.Name == b.EpisodeStarts:
			f.starts = i
		case slices.Contains(b.Zeros, in.Name):
			f.zeros = append(f.zeros, i)
		default:
			return f, fmt.Errorf("%w: the policy's input %s has no role (observations, recurrent state, seq_lens, episode_starts, or one fed zeros)",
				ErrPolicy, in)
		}
	}
	if f.obs < 0 {
		return f, fmt.Errorf("%w: the policy has no observation input %q among %v", ErrPolicy, b.Observation, ins)
	}
	obs := ins[f.obs]
	want := make([]int64, len(env.Observation.Shape))
	for i, d := range env.Observation.Shape {
		want[i] = int64(d)
	}
	switch {
	case obs.DType != onnx.Float32 && obs.DType != onnx.Float64 && obs.DType != onnx.Uint8:
		return f, fmt.Errorf("%w: policy input %q holds %s; observations are float32", ErrPolicy, obs.Name, obs.DType)
	case !obs.Batched || !slices.Equal(obs.Row, want):
		return f, fmt.Errorf("%w: policy input %q takes rows of shape %v, %s observations have shape %v",
			ErrPolicy, obs.Name, obs.Row, env.ID, want)
	}
	for _, i := range []int{f.seqLens, f.starts} {
		if i >= 0 && (!ins[i].Batched || ins[i].RowSize() != 1) {
			return f, fmt.Errorf("%w: policy input %s: want one value per env", ErrPolicy, ins[i])
		}
	}
	return f, nil
}

// WithModel returns the policy for model, a version of the graph given to New with other
// weights (a trainer's re-export, a fine-tuned write-back). The head, bindings and checks of p
// hold for it as they are: nothing is recognised or verified again, and no session is opened.
// When p's graph was edited (batch freed, tensors exposed, states made batch-first), the same
// edits are applied to model by taking its initializers by name into p's edited graph. A model
// that does not fit (a missing initializer, another shape) makes the Runners fail: batcher.New
// and UpdatePolicy return the error. A policy published in place (Config.Publish) starts
// its agents from model's values of the published weights.
func (p *Policy) WithModel(model []byte, version int64) *Policy {
	q := *p
	q.version, q.err = version, nil
	if p.reweigh != nil {
		q.model, q.err = p.reweigh.apply(model)
	} else {
		q.model, q.err = onnx.Parse(model)
	}
	if p.pub != nil && q.err == nil {
		q.model, q.pub, q.err = preparePublish(q.model, p.pub.params)
	}
	return &q
}

// Stochastic returns nil when the policy can sample, else an ErrPolicy error naming
// --deterministic: a DeterministicOnly binding acts only with its mean or its graph's actions.
func (p *Policy) Stochastic() error {
	if err := p.outs.Stochastic(p.spec); err != nil {
		return fmt.Errorf("%w: %w (batcher.Config.Deterministic: batcher --deterministic, eval without --sample)", ErrPolicy, err)
	}
	return nil
}

// State is one recurrent state a policy carries from step to step, as its Runner feeds and
// returns it: one row per env, batch first.
type State struct {
	Name string // the graph input's name
	Row  []int  // the shape of one env's state
}

// States lists the policy's recurrent states in the order Runner.Step takes them; nil for a
// feed-forward policy.
func (p *Policy) States() []State {
	var out []State
	for _, s := range p.feeds.states {
		out = append(out, State{Name: s.name, Row: slices.Clone(s.row)})
	}
	return out
}

// StateLayout describes the recurrent states (names and row shapes), to compare two policies':
// a worker carries states over a policy swap only when the layouts are equal.
func (p *Policy) StateLayout() string {
	var sb strings.Builder
	for _, s := range p.feeds.states {
		fmt.Fprintf(&sb, "%s%v;", s.name, s.row)
	}
	return sb.String()
}

// NewRunner makes the Runner of a worker stepping n envs, env i drawing its actions from
// rngs[i] (owned by the worker). Without deterministic the policy must be able to sample
// (Stochastic). The error of a WithModel that did not fit is returned here.
func (p *Policy) NewRunner(ctx context.Context, n int, rngs []*rand.Rand, deterministic bool) (*Runner, error) {
	if p.err != nil {
		return nil, p.err
	}
	if !deterministic {
		if err := p.Stochastic(); err != nil {
			return nil, err
		}
	}
	return newRunner(ctx, p, n, rngs, deterministic)
}

// NewRunnerPCG is NewRunner with env i's stream given by its source, pcgs[i] (the worker's
// rand.New(pcgs[i]) draws the same numbers: the state is the source's). A categorical head
// then takes each row's uniform number from the source itself, without a call through the
// rand.Source interface per row; the actions are those NewRunner's would be.
func (p *Policy) NewRunnerPCG(ctx context.Context, n int, pcgs []*rand.PCG, deterministic bool) (*Runner, error) {
	if len(pcgs) < n {
		return nil, fmt.Errorf("bind: %d random sources for %d envs", len(pcgs), n)
	}
	rngs := make([]*rand.Rand, len(pcgs))
	for i, src := range pcgs {
		if src == nil {
			return nil, fmt.Errorf("bind: the random source of env %d is nil", i)
		}
		rngs[i] = rand.New(src)
	}
	r, err := p.NewRunner(ctx, n, rngs, deterministic)
	if err != nil {
		return nil, err
	}
	r.pcgs, r.u = pcgs, make([]float64, n)
	return r, nil
}

// Load reads an ONNX policy file and checks it against the environment env (see New). The
// version is the file's towerrl.version metadata when it has one, else 0.
func Load(ctx context.Context, path string, env envs.Spec, cfg Config) (*Policy, error) {
	model, err := bounded.ReadFile("bind: loading policy", path, bounded.ModelLimit)
	if err != nil {
		return nil, err
	}
	p, err := New(ctx, model, 0, env, cfg)
	if err != nil {
		return nil, fmt.Errorf("loading policy %q: %w", path, err)
	}
	if cfg.Spec == nil {
		p.version = p.spec.Version
	}
	return p, nil
}

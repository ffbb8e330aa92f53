package layout

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Family names the exporter whose layout a binding recognised.
type Family string

// The families Recognise tells apart.
const (
	FamilyTowerRL       Family = "towerrl"               // towerrl.* metadata (towerrl's own export)
	FamilySB3           Family = "sb3"                   // Stable-Baselines3 on-policy: action_net, value_net, log_std
	FamilySB3SAC        Family = "sb3-sac"               // Stable-Baselines3 SAC actor: latent_pi, mu, log_std
	FamilySB3Recurrent  Family = "sb3-contrib-recurrent" // SB3-contrib RecurrentPPO: lstm_actor, [layers, batch, hidden] states
	FamilySB3DQN        Family = "sb3-dqn"               // Stable-Baselines3 DQN: q_net (QNetwork), Q-values
	FamilyCleanRLDQN    Family = "cleanrl-dqn"           // CleanRL's DQN QNetwork: network alone, one output of Q-values
	FamilyRLlib         Family = "rllib"                 // RLlib ModelV2 export: _logits, _value_branch, state_ins, seq_lens
	FamilySampleFactory Family = "sample-factory"        // Sample Factory: action_parameterization, critic_linear, rnn_states
	FamilyCleanRL       Family = "cleanrl"               // CleanRL: actor/critic, actor_mean, actor_logstd, fc_mean
	FamilyConvention    Family = "convention"            // none of those: output names (logits, value, log_std)
)

var (
	// ErrModel is wrapped by errors about a model that is not a well-formed graph.
	ErrModel = errors.New("layout: malformed model")
	// ErrNotRecognised is wrapped by every error saying which tensors could not be bound.
	ErrNotRecognised = errors.New("layout: cannot tell which tensors carry the policy's head")
)

// State is one recurrent state: an input the policy reads and the output it writes the next
// state to, of the same shape.
type State struct {
	Input, Output string
	// Shape is the input's declared shape; -1 marks a dynamic dimension.
	Shape []int64
	// BatchAxis is the axis that runs over envs: 0 for [batch, hidden] (RLlib, Sample
	// Factory), 1 for torch's [layers, batch, hidden] (SB3-contrib).
	BatchAxis int
}

// Binding says which tensors of a graph carry a policy's head, and how its inputs are fed.
// Tensor names may be graph outputs, inner tensors (node outputs) or initializers; [Expose]
// makes the inner ones graph outputs.
type Binding struct {
	Family Family
	Head   head.Kind
	// Params holds the logits (categorical) or the mean (before tanh for tanh-gaussian).
	Params string
	// LogStd holds the Gaussian log standard deviation: a parameter ([D], [1, D]) or one row
	// per observation (head.LogStdLayout). Equal to Params when Split.
	LogStd string
	// Split: Params' rows hold the mean then the log_std, 2·D values (RLlib's layout).
	Split bool
	Value string
	// Actions is the graph's own deterministic action (argmax, mean, tanh of the mean).
	Actions string
	// ActionsScaled: Actions are in the env's units already. Always true for the gaussian
	// and categorical heads; for tanh-gaussian, true when the graph maps tanh's [−1, 1] onto
	// the bounds itself (Mul/Add by constants after the Tanh) or the user said
	// --action-scale none.
	ActionsScaled bool
	// Scale is how the tanh-gaussian head maps the actions it samples onto the env:
	// head.ScaleEnv unless the user said none.
	Scale head.Scale
	// DeterministicOnly: no distribution could be recovered (no logits, or a mean with no
	// log_std); the policy runs deterministically only.
	DeterministicOnly bool

	Observation   string  // the input that takes the observations
	State         []State // recurrent states, each carried per env from one step to the next
	SeqLens       string  // input taking each row's sequence length (RLlib), fed ones
	EpisodeStarts string  // input taking 1 where an episode starts (SB3-contrib), else 0
	// Zeros are the other inputs, fed zeros of their declared shape: ones the graph never
	// reads (RLlib's dummy state input) or reads without a matching output.
	Zeros []string
	// Notes say what was bound and why, for the log.
	Notes []string
}

// Names is the binding's tensors as head.Names, for head.Bind over the exposed outputs.
func (b Binding) Names() head.Names {
	return head.Names{Params: b.Params, LogStd: b.LogStd, Value: b.Value, Actions: b.Actions}
}

// Spec is env (the env's action space) with the recognised head and scale.
func (b Binding) Spec(env head.Spec) head.Spec {
	s := env
	s.Head = b.Head
	if b.Head == head.TanhGaussianKind {
		s.Scale = b.Scale
	}
	return s
}

// Overrides are what the user named; each wins over recognition.
type Overrides struct {
	// Names binds tensors by name (--logits-output, --logstd-output, --value-output,
	// --actions-output); they may be inner tensors or initializers.
	Names head.Names
	// Head is --head; empty recognises it.
	Head head.Kind
	// Scale is --action-scale (env or none); empty detects it.
	Scale head.Scale
}

// towerrlPrefix starts the names of the tensors towerrl adds to a graph (models.CriticOutput).
const towerrlPrefix = "towerrl_"

// Recognise binds the graph m to a head for an env whose action space env holds (its Head
// says discrete or continuous: categorical, or one of the Gaussian heads). tensors, when not
// nil, gives concrete shapes for any of the graph's tensors (a session's inputs and outputs as
// head.Tensor; inner tensors probed after exposing them); the rest come from the graph's
// declarations and a light shape inference. Precedence: the user's overrides, then towerrl.* metadata, then an
// exporter's layout (module names, initializer shapes and graph structure), then naming
// conventions. An error wrapping ErrNotRecognised lists the candidate tensors and the flags
// to pass.
func Recognise(m *onnxpb.ModelProto, tensors []head.Tensor, env head.Spec, o Overrides) (Binding, error) {
	x, err := newIndex(m, tensors)
	if err != nil {
		return Binding{}, err
	}
	if err := env.Validate(); err != nil {
		return Binding{}, fmt.Errorf("layout: the env's action space: %w", err)
	}
	r := &recogniser{x: x, env: env, b: Binding{Scale: head.ScaleEnv}}
	r.inputs()
	if err := r.heads(o); err != nil {
		return r.b, err
	}
	return r.b, nil
}

type recogniser struct {
	x     *index
	env   head.Spec
	b     Binding
	drawn string // an output of actions the graph samples itself (never the deterministic ones)
}

func (r *recogniser) note(format string, args ...any) {
	r.b.Notes = append(r.b.Notes, fmt.Sprintf(format, args...))
}

func (r *recogniser) continuous() bool { return r.env.Head.Continuous() }

// heads binds Params, LogStd, Value and Actions and decides the head.
func (r *recogniser) heads(o Overrides) error {
	x, b := r.x, &r.b
	if !r.continuous() {
		b.Head = head.CategoricalKind
	} else {
		b.Head = head.GaussianKind
	}
	if spec, ok, err := head.FromMetadata(x.meta); ok && err == nil {
		b.Family, b.Head = FamilyTowerRL, spec.Head
		if spec.Head == head.TanhGaussianKind {
			b.Scale = spec.Scale
		}
		r.note("towerrl metadata: %s head", spec.Head)
		r.conventions()
	} else {
		if err != nil {
			r.note("ignoring malformed towerrl metadata: %v", err)
		}
		b.Family = r.family()
		r.layout()
		r.conventions()
		if (b.Family == FamilySB3DQN || b.Family == FamilyCleanRLDQN) && !r.continuous() {
			// A Q-network's outputs are action values, not logits: acted on greedily (or
			// ε-greedily), never sampled from a softmax over them.
			b.Head = head.QValuesKind
			what := map[Family]string{FamilySB3DQN: "SB3 DQN Q-network (q_net)", FamilyCleanRLDQN: "CleanRL DQN QNetwork (network)"}[b.Family]
			r.note("%s: the qvalues head, acting greedily on %s (--head categorical samples it as logits instead)", what, b.Params)
		}
	}
	if err := r.overrides(o); err != nil {
		return err
	}
	return r.finish(o)
}

// overrides applies the user's names, head and scale over what was recognised.
func (r *recogniser) overrides(o Overrides) error {
	b := &r.b
	named := map[*string]string{&b.Params: o.Names.Params, &b.LogStd: o.Names.LogStd, &b.Value: o.Names.Value, &b.Actions: o.Names.Actions}
	for _, f := range []struct {
		name, flag string
		dst        *string
	}{
		{o.Names.Params, "--logits-output", &b.Params}, {o.Names.LogStd, "--logstd-output", &b.LogStd},
		{o.Names.Value, "--value-output", &b.Value}, {o.Names.Actions, "--actions-output", &b.Actions},
	} {
		if f.name == "" {
			continue
		}
		if r.x.tensor(f.name) == nil {
			return fmt.Errorf("%w: %s %q: the graph has no tensor of that name; candidates: %s",
				ErrNotRecognised, f.flag, f.name, r.candidateList())
		}
		// A tensor the user moved to another role leaves the one it had, unless the user
		// named it for that role too (a Gaussian's mean is also its deterministic action; a
		// Split output is the mean and the log_std).
		for _, other := range []*string{&b.Params, &b.LogStd, &b.Value, &b.Actions} {
			if other != f.dst && *other == f.name && named[other] != f.name && !(b.Split && (other == &b.LogStd || other == &b.Params)) {
				*other = ""
			}
		}
		*f.dst = f.name
		if strings.HasPrefix(f.name, towerrlPrefix) {
			// towerrl's own tensors (the critic a fine-tune adds to an actor-only policy,
			// models.CriticOutput) are named by the trainer, not by anyone's flag.
			r.note("value %s (the critic towerrl added)", f.name)
		} else {
			r.note("%s %s (named by the user)", f.flag, f.name)
		}
	}
	if o.Names.Params != "" || o.Names.LogStd != "" {
		b.Split = false
		if r.continuous() && (b.LogStd == "" || b.LogStd == b.Params) && r.x.rowSize(r.x.tensor(b.Params)) == 2*int64(r.env.ActionDim()) {
			b.Split, b.LogStd = true, b.Params
		}
	}
	if o.Head != "" {
		if o.Head.Continuous() != r.continuous() {
			return fmt.Errorf("%w: --head %s does not act in the env's action space %s", ErrNotRecognised, o.Head, r.env.ActionSpace())
		}
		b.Head = o.Head
		r.note("--head %s (named by the user)", o.Head)
	}
	if o.Scale != "" {
		sc, err := head.ParseScale(string(o.Scale))
		if err != nil {
			return err
		}
		b.Scale, b.ActionsScaled = sc, sc == head.ScaleNone
		r.note("--action-scale %s (named by the user)", sc)
	}
	return nil
}

// finish checks the sizes of what was bound and decides DeterministicOnly.
func (r *recogniser) finish(o Overrides) error {
	b := &r.b
	if b.Head != head.TanhGaussianKind {
		b.ActionsScaled = true
	}
	d := int64(r.env.ActionDim())
	if b.Params != "" {
		want := d
		if b.Split {
			want = 2 * d
		}
		if n := r.x.rowSize(r.x.tensor(b.Params)); n >= 0 && n != want {
			if o.Names.Params != "" {
				return fmt.Errorf("%w: --logits-output %s has %d values a row; the %s head over %s needs %d",
					ErrNotRecognised, r.x.tensor(b.Params).describe(), n, b.Head, r.env.ActionSpace(), want)
			}
			r.note("dropped %s: %d values a row, the %s head needs %d", b.Params, n, b.Head, want)
			b.Params, b.Split = "", false
		}
	}
	if b.Value != "" {
		if n := r.x.rowSize(r.x.tensor(b.Value)); n >= 0 && n != 1 {
			if o.Names.Value != "" {
				return fmt.Errorf("%w: --value-output %s has %d values a row; a value has one",
					ErrNotRecognised, r.x.tensor(b.Value).describe(), n)
			}
			r.note("dropped value %s: %d values a row", b.Value, n)
			b.Value = ""
		}
	}
	if b.Params == "" && b.Actions == "" {
		return r.unrecognised()
	}
	if b.Params == "" || (b.Head.Continuous() && b.LogStd == "") {
		b.DeterministicOnly = true
		r.note("no action distribution recovered (%s); the policy runs with --deterministic only", r.lacking())
	}
	if !b.Head.Continuous() {
		b.LogStd, b.Split = "", false
	}
	return nil
}

func (r *recogniser) lacking() string {
	switch {
	case r.b.Params == "" && r.b.Head.Continuous():
		return "no mean"
	case r.b.Params == "":
		return "no logits"
	}
	return "no log_std"
}

// candidateList is the tensors a user might bind: the graph outputs, then the outputs of
// fully connected layers and Exp inputs, with shapes.
func (r *recogniser) candidateList() string {
	var parts []string
	for _, c := range r.candidates() {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, ", ")
}

// Candidate is a tensor a user might bind, listed by errors.
type Candidate struct {
	Name  string
	DType head.DType
	Shape []int64 // nil when unknown; -1 marks a dynamic dimension
	Where string  // "graph output", or the layer that writes it: "Gemm in policy.action_net"
}

func (c Candidate) String() string {
	t := tensor{name: c.Name, dtype: c.DType, shape: c.Shape}
	return fmt.Sprintf("%s (%s)", t.describe(), c.Where)
}

func (r *recogniser) candidates() []Candidate {
	var out []Candidate
	seen := map[string]bool{}
	add := func(name, where string) {
		if seen[name] {
			return
		}
		seen[name] = true
		t := r.x.tensor(name)
		out = append(out, Candidate{Name: name, DType: t.dtype, Shape: slices.Clone(t.shape), Where: where})
	}
	for _, name := range r.x.outputs {
		add(name, "graph output")
	}
	for _, l := range r.x.linears() {
		add(l.out, fmt.Sprintf("%s in %s", l.op, l.path))
	}
	for _, n := range r.x.nodes {
		if n.GetOpType() == "Exp" && len(n.GetInput()) == 1 {
			add(n.GetInput()[0], "input of "+nodeName(n))
		}
	}
	return out
}

// UnrecognisedError says that no tensor could be bound to a head's parameters or actions,
// lists the candidates and the flags to pass.
type UnrecognisedError struct {
	Head       head.Kind
	Family     Family
	Candidates []Candidate
}

func (e *UnrecognisedError) Error() string {
	parts := make([]string, len(e.Candidates))
	for i, c := range e.Candidates {
		parts[i] = c.String()
	}
	what, flags := "logits", "--logits-output NAME --value-output NAME --head categorical"
	if e.Head.Continuous() {
		what, flags = "mean", fmt.Sprintf("--logits-output NAME --logstd-output NAME --value-output NAME --head %s", e.Head)
	}
	return fmt.Sprintf("%v: found no %s nor actions for the %s head (layout %s); candidates: %s; name them with %s (inner tensors are accepted), or name the deterministic actions with --actions-output NAME and run with --deterministic",
		ErrNotRecognised, what, e.Head, e.Family, strings.Join(parts, ", "), flags)
}

func (e *UnrecognisedError) Unwrap() error { return ErrNotRecognised }

func (r *recogniser) unrecognised() error {
	return &UnrecognisedError{Head: r.b.Head, Family: r.b.Family, Candidates: r.candidates()}
}

func nodeName(n *onnxpb.NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	return n.GetOpType()
}

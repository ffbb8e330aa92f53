package head

import (
	"errors"
	"fmt"
	"strings"
)

// ErrDeterministicOnly is wrapped by the error of a policy that has no action distribution
// (only its own actions, or a mean without a log_std) when it is asked to sample.
var ErrDeterministicOnly = errors.New("head: the policy has no action distribution, only deterministic actions; run it with --deterministic")

// Outputs locates a policy's outputs by index into the model's outputs; -1 when absent.
type Outputs struct {
	Params int // logits (categorical) or mean (gaussian, tanh-gaussian: the mean before tanh)
	LogStd int // log standard deviation of the Gaussian heads; equal to Params when Split
	Value  int // state value, optional
	// Actions is the graph's own deterministic action output (an argmax, a mean, a tanh of
	// the mean), optional. A policy needs it only when Params is absent.
	Actions int
	// Split is set when Params' rows hold 2·D values, the mean and then the log_std (RLlib's
	// diagonal Gaussian layout); LogStd is then Params.
	Split bool
	// DeterministicOnly is set when no distribution can be formed: no logits or mean, only
	// Actions; or a mean without a log_std. Such a policy acts deterministically only (the
	// Actions output, or the mode of the mean) and has no log-probabilities.
	DeterministicOnly bool
}

// Names picks outputs by name, overriding Bind's conventions; empty fields are found by them.
type Names struct{ Params, LogStd, Value, Actions string }

// Stochastic returns nil when actions can be sampled with log-probabilities, and otherwise an
// error wrapping ErrDeterministicOnly that says what the policy lacks.
func (o Outputs) Stochastic(spec Spec) error {
	if !o.DeterministicOnly {
		return nil
	}
	var lacks string
	switch {
	case spec.Head.Continuous() && o.Params >= 0:
		lacks = "log_std (name one with --logstd-output)"
	case spec.Head.Continuous():
		lacks = "mean and no log_std (name them with --logits-output and --logstd-output)"
	default:
		lacks = "logits (name them with --logits-output)"
	}
	return fmt.Errorf("%w: its %s head has no %s", ErrDeterministicOnly, spec.Head, lacks)
}

// LogStdLayout is the one rule the batcher and the trainer read a Gaussian log_std by. A
// log_std is shared (one row of D values for every batch row) when it does not follow the
// batch and holds D values: [D] (SB3's log_std parameter, [1] for one action dimension),
// [1, D] (CleanRL's actor_logstd) or any shape of D values with other dimensions 1. It is per
// row when it follows the batch with D values a row: [batch, D]. Anything else is an error.
// A model with a fixed batch of one reports its [1, D] log_std as following the batch: per
// row or shared read the same there.
func LogStdLayout(info Tensor, d int) (shared bool, err error) {
	if info.RowSize() == d {
		if info.Batched {
			return false, nil
		}
		ones := 0
		for _, n := range info.Row {
			if n == 1 {
				ones++
			}
		}
		if ones >= len(info.Row)-1 {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: log_std %s: want %d values shared ([%d] or [1,%d]) or per row ([batch,%d])",
		ErrSpec, info, d, d, d, d)
}

// Bind finds which outputs of a model hold the head's parameters, log_std, value and
// deterministic actions. Names win; the rest go by [Conventional] roles, the first output of
// each role taking it, and the first remaining float output with rows of the head's size (N
// logits, D means, or 2·D for a mean and log_std together) is the parameters.
//
// Sizes are checked against the spec: N logits a row, or D means; for the Gaussian heads a
// parameters output of 2·D a row without a log_std output is Split, and the log_std follows
// [LogStdLayout]. Without parameters but with actions, or with a mean but no log_std, the
// policy is DeterministicOnly (see [Outputs.Stochastic]).
func Bind(spec Spec, outs []Tensor, names Names) (Outputs, error) {
	if err := spec.Validate(); err != nil {
		return Outputs{}, err
	}
	o := Outputs{Params: -1, LogStd: -1, Value: -1, Actions: -1}
	lookup := func(name, role string) (int, error) {
		for i, t := range outs {
			if t.Name == name {
				return i, nil
			}
		}
		return -1, fmt.Errorf("%w: no output named %q for the %s; outputs are %s", ErrSpec, name, role, list(outs))
	}
	var err error
	for _, f := range []struct {
		name string
		dst  *int
		role string
	}{
		{names.Params, &o.Params, "parameters"}, {names.LogStd, &o.LogStd, "log_std"},
		{names.Value, &o.Value, "value"}, {names.Actions, &o.Actions, "actions"},
	} {
		if f.name != "" {
			if *f.dst, err = lookup(f.name, f.role); err != nil {
				return o, err
			}
		}
	}
	taken := func(i int) bool { return i == o.Params || i == o.LogStd || i == o.Value || i == o.Actions }
	skip := make([]bool, len(outs))
	for i, t := range outs {
		if taken(i) {
			continue
		}
		switch Conventional(t) {
		case RoleActions:
			if names.Actions == "" && o.Actions < 0 {
				o.Actions = i
			}
		case RoleLogStd:
			if names.LogStd == "" && o.LogStd < 0 {
				o.LogStd = i
			}
		case RoleValue:
			if names.Value == "" && o.Value < 0 {
				o.Value = i
			}
		case RoleParams:
		default:
			skip[i] = true
		}
	}
	d := spec.ActionDim()
	if names.Params == "" {
		// The first remaining output that fits the head; failing that, with no actions to
		// fall back on, the first remaining one (for its error).
		first := -1
		for i, t := range outs {
			if taken(i) || skip[i] {
				continue
			}
			if first < 0 {
				first = i
			}
			if t.Batched && (t.RowSize() == d || (spec.Head.Continuous() && o.LogStd < 0 && t.RowSize() == 2*d)) {
				o.Params = i
				break
			}
		}
		if o.Params < 0 && o.Actions < 0 {
			o.Params = first
		}
	}
	if o.Actions >= 0 {
		if err := checkActions(spec, outs[o.Actions]); err != nil {
			return o, err
		}
	}
	if o.Params < 0 {
		if o.Actions < 0 {
			return o, fmt.Errorf("%w: no output left for the %s head's parameters, nor an actions output, among %s; name them with --logits-output",
				ErrSpec, spec.Head, list(outs))
		}
		o.LogStd, o.DeterministicOnly = -1, true
		return o, checkValue(outs, o.Value)
	}
	p := outs[o.Params]
	switch {
	case p.DType != Float32:
		return o, fmt.Errorf("%w: output %q holds %s; the %s head's parameters are float32", ErrSpec, p.Name, p.DType, spec.Head)
	case !p.Batched:
		return o, fmt.Errorf("%w: output %q (%s) does not follow the batch; the %s head's parameters need one row per observation",
			ErrSpec, p.Name, p, spec.Head)
	case spec.Head.Continuous() && o.LogStd < 0 && p.RowSize() == 2*d:
		o.Split, o.LogStd = true, o.Params
	case p.RowSize() != d:
		return o, fmt.Errorf("%w: output %q has rows of %v, the %s head needs %d per row (action space %s)",
			ErrSpec, p.Name, p.Row, spec.Head, d, spec.ActionSpace())
	}
	if !spec.Head.Continuous() {
		o.LogStd = -1
	} else if o.LogStd < 0 {
		o.DeterministicOnly = true
	} else if !o.Split {
		if _, err := LogStdLayout(outs[o.LogStd], d); err != nil {
			return o, err
		}
	}
	return o, checkValue(outs, o.Value)
}

// Roles an output's name and type give it by convention ([Conventional]).
const (
	RoleParams  = "params"  // a candidate for the logits or mean
	RoleLogStd  = "log_std" // a Gaussian log standard deviation
	RoleValue   = "value"   // the state value
	RoleActions = "actions" // the policy's own actions
	RoleLogProb = "logp"    // a log-probability, never bound
	RoleNone    = ""        // not usable (a type no head reads)
)

// Conventional is the role Bind's conventions give an output by its name and type, in this
// order: an integer output is the actions; a float one whose name contains "log_std" or
// "logstd" the log_std; one whose name contains "action" (but not logit, mean, dist, param,
// prob, std, logp, value or critic) the actions; "q", or a name containing "q_value" or
// "qvalue" (a Q-network's), a parameters candidate; "v", or a name containing "value" or
// "critic", the value; a name containing logp, log_prob or logprob a log-probability; any
// other float32 output a parameters candidate.
func Conventional(t Tensor) string {
	n := strings.ToLower(t.Name)
	switch {
	case t.DType == Int64 || t.DType == Int32:
		return RoleActions
	case t.DType != Float32:
		return RoleNone
	case strings.Contains(n, "log_std") || strings.Contains(n, "logstd"):
		return RoleLogStd
	case actionLike(n):
		return RoleActions
	case n == "q" || strings.Contains(n, "q_value") || strings.Contains(n, "qvalue"):
		return RoleParams
	case n == "v" || strings.Contains(n, "value") || strings.Contains(n, "critic"):
		return RoleValue
	case strings.Contains(n, "logp") || strings.Contains(n, "log_prob") || strings.Contains(n, "logprob"):
		return RoleLogProb
	}
	return RoleParams
}

// actionLike reports whether a float output's lower-case name says it holds actions.
func actionLike(n string) bool {
	if !strings.Contains(n, "action") {
		return false
	}
	for _, not := range []string{"logit", "mean", "dist", "param", "prob", "std", "logp", "value", "critic"} {
		if strings.Contains(n, not) {
			return false
		}
	}
	return true
}

func checkActions(spec Spec, a Tensor) error {
	switch {
	case !a.Batched:
		return fmt.Errorf("%w: actions output %s does not follow the batch", ErrSpec, a)
	case spec.Head.Continuous() && (a.DType != Float32 || a.RowSize() != spec.ActionDim()):
		return fmt.Errorf("%w: actions output %s: the %s head acts with %d float32 values a row", ErrSpec, a, spec.Head, spec.ActionDim())
	case !spec.Head.Continuous() && a.RowSize() != 1:
		return fmt.Errorf("%w: actions output %s: a categorical head acts with one index a row", ErrSpec, a)
	}
	return nil
}

func checkValue(outs []Tensor, i int) error {
	if i < 0 {
		return nil
	}
	if p := outs[i]; !p.Batched || p.RowSize() != 1 || p.DType != Float32 {
		return fmt.Errorf("%w: value output %s: want one float32 a row", ErrSpec, p)
	}
	return nil
}

func list(outs []Tensor) string {
	parts := make([]string, len(outs))
	for i, t := range outs {
		parts[i] = t.String()
	}
	return strings.Join(parts, ", ")
}

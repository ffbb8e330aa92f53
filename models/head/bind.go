package head

import (
	"fmt"
	"strings"

	"github.com/towerrl/towerrl/onnx"
)

// Outputs locates a policy's outputs by index into the model's outputs; -1 when absent.
type Outputs struct {
	Params int // logits (categorical) or mean (Gaussian)
	LogStd int // Gaussian log standard deviation
	Value  int // state value, optional
}

// Names picks outputs by name, overriding Bind's conventions; empty fields are found by them.
type Names struct{ Params, LogStd, Value string }

// Bind finds which outputs of a model hold the head's parameters and the value. Without
// names it goes by convention: an output whose name contains "log_std" or "logstd" is the log
// standard deviation; one named "value", "v", or containing "value" or "critic" is the value;
// the first remaining output is the parameters. Sizes are checked against the spec.
func Bind(spec Spec, outs []onnx.TensorInfo, names Names) (Outputs, error) {
	if err := spec.Validate(); err != nil {
		return Outputs{}, err
	}
	o := Outputs{Params: -1, LogStd: -1, Value: -1}
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
	}{{names.Params, &o.Params, "parameters"}, {names.LogStd, &o.LogStd, "log_std"}, {names.Value, &o.Value, "value"}} {
		if f.name != "" {
			if *f.dst, err = lookup(f.name, f.role); err != nil {
				return o, err
			}
		}
	}
	taken := func(i int) bool { return i == o.Params || i == o.LogStd || i == o.Value }
	for i, t := range outs {
		n := strings.ToLower(t.Name)
		switch {
		case taken(i):
		case names.LogStd == "" && o.LogStd < 0 && (strings.Contains(n, "log_std") || strings.Contains(n, "logstd")):
			o.LogStd = i
		case names.Value == "" && o.Value < 0 && (n == "v" || strings.Contains(n, "value") || strings.Contains(n, "critic")):
			o.Value = i
		}
	}
	for i := range outs {
		if names.Params == "" && o.Params < 0 && !taken(i) {
			o.Params = i
		}
	}
	if o.Params < 0 {
		return o, fmt.Errorf("%w: no output left for the %s head's parameters among %s", ErrSpec, spec.Head, list(outs))
	}
	d := spec.ActionDim()
	if p := outs[o.Params]; !p.Batched || p.RowSize() != d {
		return o, fmt.Errorf("%w: output %q has rows of %v, the %s head needs %d per row (action space %s)",
			ErrSpec, p.Name, p.Row, spec.Head, d, spec.ActionSpace())
	}
	if spec.Head == GaussianKind {
		if o.LogStd < 0 {
			return o, fmt.Errorf("%w: the gaussian head needs a log_std output; outputs are %s", ErrSpec, list(outs))
		}
		if p := outs[o.LogStd]; p.RowSize() != d {
			return o, fmt.Errorf("%w: log_std output %q has rows of %v, want %d", ErrSpec, p.Name, p.Row, d)
		}
	} else {
		o.LogStd = -1
	}
	if o.Value >= 0 {
		if p := outs[o.Value]; !p.Batched || p.RowSize() != 1 {
			return o, fmt.Errorf("%w: value output %q has rows of %v, want 1", ErrSpec, p.Name, p.Row)
		}
	}
	return o, nil
}

func list(outs []onnx.TensorInfo) string {
	parts := make([]string, len(outs))
	for i, t := range outs {
		parts[i] = t.String()
	}
	return strings.Join(parts, ", ")
}

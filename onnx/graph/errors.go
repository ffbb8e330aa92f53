package graph

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/internal/names"
)

// Sentinel errors, matched with errors.Is; the errors returned wrap them with the details
// (the node, the tensor, the sizes).
var (
	// ErrModel: the model is not a usable ONNX graph (unreadable bytes, a missing tensor,
	// an element type or attribute value towerrl does not handle, external data).
	ErrModel = errors.New("graph: invalid model")
	// ErrUnsupported: an operator towerrl cannot import, or an attribute value of a supported
	// one it does not handle. Operators missing from [SupportedOps] are reported together in
	// an [*UnsupportedError].
	ErrUnsupported = errors.New("graph: unsupported operator")
	// ErrShape: shapes that do not fit (an op's operands, a batch size, a parameter tensor).
	ErrShape = errors.New("graph: shape mismatch")
	// ErrParams: a [Params] that does not belong to the model (a missing or extra name, a
	// different shape or element type).
	ErrParams = errors.New("graph: parameters do not match the model")
	// ErrNoTensor: a tensor name asked for (an output to compute) that the graph does not
	// define. The error names the nearest tensor names the graph has.
	ErrNoTensor = errors.New("graph: no such tensor")
)

// UnsupportedNode is one node whose operator (or operator domain) the importer lacks.
type UnsupportedNode struct {
	Node   string // the node's name, or its first output when it has none
	OpType string
	Domain string // empty for the default ONNX domain
}

func (n UnsupportedNode) op() string {
	if n.Domain != "" && n.Domain != "ai.onnx" {
		return n.Domain + "." + n.OpType
	}
	return n.OpType
}

// UnsupportedError lists every node, on the path to the tensors asked for, whose operator the
// importer lacks. [Model.Check] and [Model.Build] return it; nodes no asked-for tensor
// depends on are never reported.
type UnsupportedError struct {
	Nodes   []UnsupportedNode // in graph order
	Outputs []string          // the tensors asked for
}

func (e *UnsupportedError) Error() string {
	// Group by operator: "LSTM ×2 (lstm_0, lstm_1)".
	var ops []string
	byOp := map[string][]string{}
	for _, n := range e.Nodes {
		op := n.op()
		if _, ok := byOp[op]; !ok {
			ops = append(ops, op)
		}
		byOp[op] = append(byOp[op], n.Node)
	}
	parts := make([]string, len(ops))
	for k, op := range ops {
		names := byOp[op]
		shown := names
		if len(shown) > 4 {
			shown = append(slices.Clone(shown[:4]), "...")
		}
		parts[k] = fmt.Sprintf("%s ×%d (%s)", op, len(names), strings.Join(quoteAll(shown), ", "))
	}
	what := "node uses an operator"
	if len(e.Nodes) != 1 {
		what = "nodes use operators"
	}
	return fmt.Sprintf("graph: %d %s the importer lacks, on the path to %s: %s; "+
		"compute a tensor before them instead (Build's outputs may name any inner tensor) "+
		"or re-export the model with supported operators: %s",
		len(e.Nodes), what, strings.Join(quoteAll(e.Outputs), ", "), strings.Join(parts, ", "),
		strings.Join(SupportedOps(), ", "))
}

// Unwrap makes errors.Is(err, ErrUnsupported) hold.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for k, n := range names {
		if n == "..." {
			out[k] = n
			continue
		}
		out[k] = fmt.Sprintf("%q", n)
	}
	return out
}

// nodeError wraps err with the node it happened at.
func nodeError(n nodeRef, err error) error {
	return fmt.Errorf("graph: node %q (op %s): %w", n.name, n.op, err)
}

type nodeRef struct{ name, op string }

// nearest returns up to k of names closest to name (names.Nearest).
func nearest(name string, candidates []string, k int) []string {
	return names.Nearest(name, candidates, k)
}

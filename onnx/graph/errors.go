package graph

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, matched with errors.Is; the errors returned wrap them with the details
// (the node, the tensor, the sizes).
var (
	// ErrModel: the model is not a usable ONNX graph (unreadable bytes, a missing tensor,
	// an element type or attribute value towerrl does not handle, external data).
	ErrModel = errors.New("graph: invalid model")
	// ErrUnsupported: an operator towerrl cannot import. The error is an [*UnsupportedError].
	ErrUnsupported = errors.New("graph: unsupported operator")
	// ErrShape: shapes that do not fit (an op's operands, a batch size, a parameter tensor).
	ErrShape = errors.New("graph: shape mismatch")
	// ErrParams: a [Params] that does not belong to the model (a missing or extra name, a
	// different shape or element type).
	ErrParams = errors.New("graph: parameters do not match the model")
)

// UnsupportedError reports a node whose operator (or operator domain) the importer lacks.
type UnsupportedError struct {
	Node   string // the node's name, or its first output when it has none
	OpType string
	Domain string // empty for the default ONNX domain
}

func (e *UnsupportedError) Error() string {
	op := e.OpType
	if e.Domain != "" && e.Domain != "ai.onnx" {
		op = e.Domain + "." + op
	}
	return fmt.Sprintf("graph: node %q (op %s) is not supported; supported: %s",
		e.Node, op, strings.Join(SupportedOps(), ", "))
}

// Unwrap makes errors.Is(err, ErrUnsupported) hold.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// nodeError wraps err with the node it happened at.
func nodeError(n nodeRef, err error) error {
	return fmt.Errorf("graph: node %q (op %s): %w", n.name, n.op, err)
}

type nodeRef struct{ name, op string }

package edit

import "errors"

// Sentinel errors, matched with errors.Is; the errors returned wrap them with the details. A
// model that is not readable ONNX gives an error wrapping [onnx.ErrModel] instead.
var (
	// ErrFixedBatch: DynamicBatch could not make the fixed batch dimension dynamic, or the
	// rewritten model did not reproduce the original row by row. The error says why; the
	// model still runs at its fixed batch (one row per call for a batch of 1).
	ErrFixedBatch = errors.New("edit: the fixed batch cannot be made dynamic")
	// ErrNoTensor: a tensor name the graph does not compute.
	ErrNoTensor = errors.New("edit: no such tensor")
	// ErrNoType: a tensor whose element type neither value_info nor type propagation tells.
	ErrNoType = errors.New("edit: element type unknown")
)

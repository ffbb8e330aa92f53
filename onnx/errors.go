package onnx

import "errors"

// Sentinel errors, matched with errors.Is; the errors returned wrap them with the details
// (the input's name, the sizes, the value found).
var (
	// ErrModel: the bytes are not a usable ONNX model (missing, truncated, not ONNX, or using
	// tensor types towerrl does not handle).
	ErrModel = errors.New("onnx: invalid model")
	// ErrInput: an input name or index the model does not have.
	ErrInput = errors.New("onnx: no such input or output")
	// ErrShape: data whose rank or shape does not match the model's.
	ErrShape = errors.New("onnx: shape mismatch")
	// ErrDType: data whose element type does not match the model's.
	ErrDType = errors.New("onnx: element type mismatch")
	// ErrBatch: a batch size outside 1..MaxBatch (or not the static batch of a fixed-batch model).
	ErrBatch = errors.New("onnx: batch size out of range")
	// ErrNaN: a NaN in a floating-point input.
	ErrNaN = errors.New("onnx: NaN in input")
	// ErrProvider: an execution provider that cannot be honoured.
	ErrProvider = errors.New("onnx: execution provider unavailable")
	// ErrClosed: a call on a closed Session.
	ErrClosed = errors.New("onnx: session is closed")
	// ErrTooLarge: a buffer whose size, from the model's shapes and the batch, overflows or
	// passes the memory available.
	ErrTooLarge = errors.New("onnx: buffer too large")
	// ErrConfig: an invalid Config field.
	ErrConfig = errors.New("onnx: invalid config")
)

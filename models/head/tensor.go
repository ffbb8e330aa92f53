package head

import (
	"fmt"
	"strings"
)

// DType is a tensor's element type by name, spelt as package onnx's DType prints it. Bind
// tells float32 (parameters, log_std, value) from the integer types (actions); a name outside
// the constants below is a type no head reads.
type DType string

// The element types a model's outputs may hold.
const (
	Float32 DType = "float32"
	Float64 DType = "float64"
	Int32   DType = "int32"
	Int64   DType = "int64"
	Uint8   DType = "uint8"
)

// Tensor describes one output of a model as Bind reads it: what a session reports of it,
// kept in this package's own type so that the head maths never links ONNX Runtime. A batcher
// fills it from onnx.TensorInfo field by field (DType from the onnx DType's name).
type Tensor struct {
	Name  string
	DType DType
	// Declared is the shape the model declares; -1 marks a dynamic dimension. Only messages
	// read it.
	Declared []int64
	// Batched reports whether dimension 0 is the batch dimension.
	Batched bool
	// Row is the concrete shape of one batch row (dimensions 1...) when Batched, otherwise
	// the whole concrete shape.
	Row []int64
}

// RowSize is the number of elements in one row (the whole tensor when not Batched).
func (t Tensor) RowSize() int {
	n := 1
	for _, d := range t.Row {
		n *= int(d)
	}
	return n
}

// String is "name float32[?,2]": the name, the element type and the declared shape, a
// dynamic dimension printed as ?.
func (t Tensor) String() string {
	dims := make([]string, len(t.Declared))
	for i, d := range t.Declared {
		if d < 0 {
			dims[i] = "?"
		} else {
			dims[i] = fmt.Sprint(d)
		}
	}
	return fmt.Sprintf("%s %s[%s]", t.Name, t.DType, strings.Join(dims, ","))
}

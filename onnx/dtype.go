package onnx

import (
	"fmt"

	ort "github.com/yalue/onnxruntime_go"
)

// DType is the element type of a tensor.
type DType int

// The element types a Session reads and writes.
const (
	Unsupported DType = iota
	Float32
	Float64
	Int32
	Int64
	Uint8
)

var dtypeNames = [...]string{"unsupported", "float32", "float64", "int32", "int64", "uint8"}

func (d DType) String() string {
	if d < 0 || int(d) >= len(dtypeNames) {
		return fmt.Sprintf("DType(%d)", int(d))
	}
	return dtypeNames[d]
}

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	case Uint8:
		return 1
	}
	return 0
}

// Element is the set of Go types that map onto a [DType].
type Element interface {
	float32 | float64 | int32 | int64 | uint8
}

// DTypeOf returns the DType of the Go element type T.
func DTypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	}
	return Unsupported
}

func fromORT(t ort.TensorElementDataType) (DType, string) {
	switch t {
	case ort.TensorElementDataTypeFloat:
		return Float32, ""
	case ort.TensorElementDataTypeDouble:
		return Float64, ""
	case ort.TensorElementDataTypeInt32:
		return Int32, ""
	case ort.TensorElementDataTypeInt64:
		return Int64, ""
	case ort.TensorElementDataTypeUint8:
		return Uint8, ""
	}
	return Unsupported, t.String()
}

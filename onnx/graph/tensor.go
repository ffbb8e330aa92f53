package graph

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// constant is a tensor known at import time: a non-float initializer, a Constant node, or the
// result of folding ops whose inputs are all constants (Shape of a statically shaped tensor,
// Gather, Unsqueeze, Concat of shapes...). Float constants hold their values in f, integer
// ones (int64, int32, bool...) in i.
type constant struct {
	shape []int
	f     []float64
	i     []int64
	isInt bool
}

func (c *constant) size() int { return product(c.shape) }

// ints returns the values as int64 (float values truncated).
func (c *constant) ints() []int64 {
	if c.isInt {
		return c.i
	}
	out := make([]int64, len(c.f))
	for k, v := range c.f {
		out[k] = int64(v)
	}
	return out
}

// floats returns the values as float64.
func (c *constant) floats() []float64 {
	if !c.isInt {
		return c.f
	}
	out := make([]float64, len(c.i))
	for k, v := range c.i {
		out[k] = float64(v)
	}
	return out
}

func (c *constant) String() string {
	if c.isInt {
		return fmt.Sprintf("int%v%v", c.shape, c.i)
	}
	return fmt.Sprintf("float%v", c.shape)
}

func product(s []int) int {
	p := 1
	for _, d := range s {
		p *= d
	}
	return p
}

// rowStrides returns the row-major strides of shape.
func rowStrides(shape []int) []int {
	strides := make([]int, len(shape))
	s := 1
	for d := len(shape) - 1; d >= 0; d-- {
		strides[d] = s
		s *= shape[d]
	}
	return strides
}

// advance moves pos to the next position of a tensor of the given shape in row-major order,
// and reports false after the last one (pos is then all zeros again).
func advance(pos, shape []int) bool {
	for d := len(shape) - 1; d >= 0; d-- {
		pos[d]++
		if pos[d] < shape[d] {
			return true
		}
		pos[d] = 0
	}
	return false
}

// affineIndex lists, for each position of a tensor of shape out in row-major order, the
// offset Σ pos[d]·strides[d]: with a source's strides permuted, zeroed on broadcast axes...,
// the index map of a transpose, a broadcast...
func affineIndex(out, strides []int) []int {
	idx := make([]int, product(out))
	if len(idx) == 0 {
		return idx
	}
	pos := make([]int, len(out))
	for i := range idx {
		for d := range pos {
			idx[i] += pos[d] * strides[d]
		}
		advance(pos, out)
	}
	return idx
}

// maxElements bounds the size of any tensor the importer makes or folds (2^28 values): a
// policy never comes near it, and a corrupt shape must be an error, not an allocation that
// exhausts memory.
const maxElements = 1 << 28

// checkShape refuses negative dimensions and shapes of more than maxElements values (without
// overflowing on the way).
func checkShape(shape []int) error {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("%w: negative dimension in %v", ErrShape, shape)
		}
		if d == 0 {
			return nil
		}
	}
	for _, d := range shape {
		if n > maxElements/d {
			return fmt.Errorf("%w: a tensor of shape %v holds more than %d values", ErrShape, shape, maxElements)
		}
		n *= d
	}
	return nil
}

// isFloatType reports whether an ONNX element type is one the importer treats as trainable.
func isFloatType(dt int32) bool {
	return dt == int32(onnxpb.TensorProto_FLOAT) || dt == int32(onnxpb.TensorProto_DOUBLE)
}

func isIntType(dt int32) bool {
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_INT64, onnxpb.TensorProto_INT32, onnxpb.TensorProto_INT16,
		onnxpb.TensorProto_INT8, onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL:
		return true
	}
	return false
}

// decodeTensor reads a TensorProto holding float, double or integer elements.
func decodeTensor(t *onnxpb.TensorProto) (*constant, error) {
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(t.GetExternalData()) > 0 {
		return nil, fmt.Errorf("%w: tensor %q keeps its data in an external file, which is not supported",
			ErrModel, t.GetName())
	}
	if t.GetSegment() != nil {
		return nil, fmt.Errorf("%w: tensor %q is segmented, which is not supported", ErrModel, t.GetName())
	}
	shape := make([]int, len(t.GetDims()))
	for k, d := range t.GetDims() {
		if d < 0 || d > math.MaxInt32 {
			return nil, fmt.Errorf("%w: tensor %q has dimension %d", ErrModel, t.GetName(), d)
		}
		shape[k] = int(d)
	}
	if err := checkShape(shape); err != nil {
		return nil, fmt.Errorf("%w: tensor %q: %v", ErrModel, t.GetName(), err)
	}
	n := product(shape)
	c := &constant{shape: shape}
	raw := t.GetRawData()
	dt := onnxpb.TensorProto_DataType(t.GetDataType())
	bad := func(have int) error {
		return fmt.Errorf("%w: tensor %q of shape %v (%v) holds %d elements", ErrModel, t.GetName(), shape, dt, have)
	}
	switch dt {
	case onnxpb.TensorProto_FLOAT:
		c.f = make([]float64, n)
		switch {
		case raw != nil:
			if len(raw) != 4*n {
				return nil, bad(len(raw) / 4)
			}
			for k := range c.f {
				c.f[k] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:])))
			}
		default:
			if len(t.GetFloatData()) != n {
				return nil, bad(len(t.GetFloatData()))
			}
			for k, v := range t.GetFloatData() {
				c.f[k] = float64(v)
			}
		}
	case onnxpb.TensorProto_DOUBLE:
		c.f = make([]float64, n)
		switch {
		case raw != nil:
			if len(raw) != 8*n {
				return nil, bad(len(raw) / 8)
			}
			for k := range c.f {
				c.f[k] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*k:]))
			}
		default:
			if len(t.GetDoubleData()) != n {
				return nil, bad(len(t.GetDoubleData()))
			}
			copy(c.f, t.GetDoubleData())
		}
	case onnxpb.TensorProto_INT64:
		c.isInt, c.i = true, make([]int64, n)
		switch {
		case raw != nil:
			if len(raw) != 8*n {
				return nil, bad(len(raw) / 8)
			}
			for k := range c.i {
				c.i[k] = int64(binary.LittleEndian.Uint64(raw[8*k:]))
			}
		default:
			if len(t.GetInt64Data()) != n {
				return nil, bad(len(t.GetInt64Data()))
			}
			copy(c.i, t.GetInt64Data())
		}
	case onnxpb.TensorProto_INT32, onnxpb.TensorProto_INT16, onnxpb.TensorProto_INT8,
		onnxpb.TensorProto_UINT8, onnxpb.TensorProto_BOOL:
		c.isInt, c.i = true, make([]int64, n)
		switch {
		case raw != nil:
			width := map[onnxpb.TensorProto_DataType]int{onnxpb.TensorProto_INT32: 4,
				onnxpb.TensorProto_INT16: 2}[dt]
			if width == 0 {
				width = 1
			}
			if len(raw) != width*n {
				return nil, bad(len(raw) / width)
			}
			for k := range c.i {
				switch dt {
				case onnxpb.TensorProto_INT32:
					c.i[k] = int64(int32(binary.LittleEndian.Uint32(raw[4*k:])))
				case onnxpb.TensorProto_INT16:
					c.i[k] = int64(int16(binary.LittleEndian.Uint16(raw[2*k:])))
				case onnxpb.TensorProto_INT8:
					c.i[k] = int64(int8(raw[k]))
				default:
					c.i[k] = int64(raw[k])
				}
			}
		default:
			if len(t.GetInt32Data()) != n {
				return nil, bad(len(t.GetInt32Data()))
			}
			for k, v := range t.GetInt32Data() {
				c.i[k] = int64(v)
			}
		}
	default:
		return nil, fmt.Errorf("%w: tensor %q has element type %v, which is not supported", ErrModel, t.GetName(), dt)
	}
	return c, nil
}

// encodeFloats writes vals as the raw little-endian data of an ONNX FLOAT or DOUBLE tensor.
func encodeFloats(dt int32, vals []float64) []byte {
	if dt == int32(onnxpb.TensorProto_DOUBLE) {
		raw := make([]byte, 8*len(vals))
		for k, v := range vals {
			binary.LittleEndian.PutUint64(raw[8*k:], math.Float64bits(v))
		}
		return raw
	}
	raw := make([]byte, 4*len(vals))
	for k, v := range vals {
		binary.LittleEndian.PutUint32(raw[4*k:], math.Float32bits(float32(v)))
	}
	return raw
}

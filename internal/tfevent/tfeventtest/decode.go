// Package tfeventtest reads TensorBoard event files with a decoder written from the formats'
// definitions alone, sharing no code with package tfevent's writer: a bitwise CRC-32C (no
// table, no hash/crc32), TFRecord framing, and a protocol buffer walker that knows the field
// numbers of event.proto, summary.proto, tensor.proto and tensor_shape.proto
// (tensorboard/compat/proto). Tests of tfevent check it against known answers; the tests of
// the packages that write event files read them back with it.
package tfeventtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// CRC32C is CRC-32C bit by bit: reflected, polynomial 0x1EDC6F41 (reversed 0x82F63B78),
// initial value and final XOR 0xFFFFFFFF (RFC 3720, appendix B.4).
func CRC32C(data []byte) uint32 {
	c := ^uint32(0)
	for _, b := range data {
		c ^= uint32(b)
		for range 8 {
			if c&1 == 1 {
				c = c>>1 ^ 0x82F63B78
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

// Mask is TFRecord's masking of a CRC: rotate right by 15 bits, add 0xa282ead8.
func Mask(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }

// Records splits a TFRecord file into its records' data, checking both checksums of every
// record with CRC32C.
func Records(b []byte) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return out, fmt.Errorf("record %d: %d bytes left, a header takes 12", len(out), len(b)-off)
		}
		n := binary.LittleEndian.Uint64(b[off:])
		if got, want := binary.LittleEndian.Uint32(b[off+8:]), Mask(CRC32C(b[off:off+8])); got != want {
			return out, fmt.Errorf("record %d: length CRC %#x, want %#x", len(out), got, want)
		}
		if n > uint64(len(b)-off-16) {
			return out, fmt.Errorf("record %d: length %d past the end", len(out), n)
		}
		data := b[off+12 : off+12+int(n)]
		if got, want := binary.LittleEndian.Uint32(b[off+12+int(n):]), Mask(CRC32C(data)); got != want {
			return out, fmt.Errorf("record %d: data CRC %#x, want %#x", len(out), got, want)
		}
		out = append(out, data)
		off += 16 + int(n)
	}
	return out, nil
}

// field is one protocol buffer field: its number, wire type, and value (a varint, a fixed
// 32- or 64-bit word, or the bytes of a length-delimited field).
type field struct {
	num   int
	wire  int
	v     uint64
	bytes []byte
}

// fields walks a protocol buffer message.
func fields(b []byte) ([]field, error) {
	var out []field
	varint := func() (uint64, error) {
		var v uint64
		for i := 0; ; i++ {
			if i == len(b) || i == 10 {
				return 0, fmt.Errorf("truncated varint")
			}
			v |= uint64(b[i]&0x7f) << (7 * i)
			if b[i] < 0x80 {
				b = b[i+1:]
				return v, nil
			}
		}
	}
	for len(b) > 0 {
		key, err := varint()
		if err != nil {
			return nil, err
		}
		f := field{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			if f.v, err = varint(); err != nil {
				return nil, err
			}
		case 1:
			if len(b) < 8 {
				return nil, fmt.Errorf("truncated fixed64")
			}
			f.v, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			n, err := varint()
			if err != nil {
				return nil, err
			}
			if n > uint64(len(b)) {
				return nil, fmt.Errorf("field %d: length %d past the end", f.num, n)
			}
			f.bytes, b = b[:n], b[n:]
		case 5:
			if len(b) < 4 {
				return nil, fmt.Errorf("truncated fixed32")
			}
			f.v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return nil, fmt.Errorf("wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

// Event is a decoded Event.
type Event struct {
	Wall        float64
	Step        int64
	FileVersion string
	Values      []Value // of its summary
}

// Value is a decoded Summary.Value.
type Value struct {
	Tag    string
	Plugin string   // metadata.plugin_data.plugin_name
	Simple *float32 // simple_value
	// Tensor, when HasTensor: its dtype (types.proto: 1 DT_FLOAT, 7 DT_STRING), the sizes of
	// its shape's dims (none: a scalar), tensor_content, float_val and string_val.
	HasTensor bool
	DType     int
	Dims      []int64
	Content   []byte
	FloatVal  []float32
	StringVal []string
	// Image, when HasImage: width, height, colorspace and encoded_image_string.
	HasImage                  bool
	Width, Height, Colorspace int
	Encoded                   []byte
}

// Scalar is the value's number: simple_value, or that of a DT_FLOAT scalar tensor
// (tensor_content's 4 bytes, or one float_val).
func (v Value) Scalar() (float32, error) {
	switch {
	case v.Simple != nil:
		return *v.Simple, nil
	case v.HasTensor && v.DType == 1 && len(v.Dims) == 0 && len(v.Content) == 4:
		return math.Float32frombits(binary.LittleEndian.Uint32(v.Content)), nil
	case v.HasTensor && v.DType == 1 && len(v.Dims) == 0 && len(v.FloatVal) == 1:
		return v.FloatVal[0], nil
	}
	return 0, fmt.Errorf("value %q holds no scalar", v.Tag)
}

// Decode decodes an encoded Event.
func Decode(b []byte) (Event, error) {
	var e Event
	fs, err := fields(b)
	if err != nil {
		return e, err
	}
	for _, f := range fs {
		switch {
		case f.num == 1 && f.wire == 1:
			e.Wall = math.Float64frombits(f.v)
		case f.num == 2 && f.wire == 0:
			e.Step = int64(f.v)
		case f.num == 3 && f.wire == 2:
			e.FileVersion = string(f.bytes)
		case f.num == 5 && f.wire == 2:
			vs, err := fields(f.bytes)
			if err != nil {
				return e, err
			}
			for _, vf := range vs {
				if vf.num != 1 || vf.wire != 2 {
					return e, fmt.Errorf("summary field %d", vf.num)
				}
				v, err := decodeValue(vf.bytes)
				if err != nil {
					return e, err
				}
				e.Values = append(e.Values, v)
			}
		default:
			return e, fmt.Errorf("event field %d (wire type %d)", f.num, f.wire)
		}
	}
	return e, nil
}

func decodeValue(b []byte) (Value, error) {
	var v Value
	fs, err := fields(b)
	if err != nil {
		return v, err
	}
	for _, f := range fs {
		switch {
		case f.num == 1 && f.wire == 2:
			v.Tag = string(f.bytes)
		case f.num == 2 && f.wire == 5:
			x := math.Float32frombits(uint32(f.v))
			v.Simple = &x
		case f.num == 4 && f.wire == 2:
			v.HasImage = true
			im, err := fields(f.bytes)
			if err != nil {
				return v, err
			}
			for _, g := range im {
				switch g.num {
				case 1:
					v.Height = int(g.v)
				case 2:
					v.Width = int(g.v)
				case 3:
					v.Colorspace = int(g.v)
				case 4:
					v.Encoded = g.bytes
				}
			}
		case f.num == 8 && f.wire == 2:
			v.HasTensor = true
			ts, err := fields(f.bytes)
			if err != nil {
				return v, err
			}
			for _, g := range ts {
				switch {
				case g.num == 1 && g.wire == 0:
					v.DType = int(g.v)
				case g.num == 2 && g.wire == 2:
					dims, err := fields(g.bytes)
					if err != nil {
						return v, err
					}
					for _, d := range dims {
						if d.num != 2 {
							return v, fmt.Errorf("tensor_shape field %d", d.num)
						}
						size, err := fields(d.bytes)
						if err != nil {
							return v, err
						}
						var s int64
						for _, x := range size {
							if x.num == 1 {
								s = int64(x.v)
							}
						}
						v.Dims = append(v.Dims, s)
					}
				case g.num == 4 && g.wire == 2:
					v.Content = g.bytes
				case g.num == 5 && g.wire == 2: // packed float_val
					for i := 0; i+4 <= len(g.bytes); i += 4 {
						v.FloatVal = append(v.FloatVal, math.Float32frombits(binary.LittleEndian.Uint32(g.bytes[i:])))
					}
				case g.num == 8 && g.wire == 2:
					v.StringVal = append(v.StringVal, string(g.bytes))
				default:
					return v, fmt.Errorf("tensor field %d", g.num)
				}
			}
		case f.num == 9 && f.wire == 2:
			md, err := fields(f.bytes)
			if err != nil {
				return v, err
			}
			for _, g := range md {
				if g.num == 1 && g.wire == 2 {
					pd, err := fields(g.bytes)
					if err != nil {
						return v, err
					}
					for _, h := range pd {
						if h.num == 1 {
							v.Plugin = string(h.bytes)
						}
					}
				}
			}
		default:
			return v, fmt.Errorf("value field %d (wire type %d)", f.num, f.wire)
		}
	}
	return v, nil
}

// ReadFile decodes every event of the file at path.
func ReadFile(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	recs, err := Records(b)
	if err != nil {
		return nil, err
	}
	evs := make([]Event, len(recs))
	for i, r := range recs {
		if evs[i], err = Decode(r); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
	}
	return evs, nil
}

// ReadDir decodes the event files of dir (names starting events.out.tfevents.), in name
// order, their events one after the other.
func ReadDir(dir string) ([]Event, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var evs []Event
	for _, e := range entries { // os.ReadDir sorts by name
		if !strings.HasPrefix(e.Name(), "events.out.tfevents.") {
			continue
		}
		more, err := ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		evs = append(evs, more...)
	}
	return evs, nil
}

// Point is a scalar at a step.
type Point struct {
	Step  int64
	Value float32
}

// Scalars gathers the scalars of evs by tag, in their order.
func Scalars(evs []Event) (map[string][]Point, error) {
	out := map[string][]Point{}
	for _, e := range evs {
		for _, v := range e.Values {
			if v.HasImage || (v.HasTensor && v.DType != 1) {
				continue
			}
			x, err := v.Scalar()
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", e.Step, err)
			}
			out[v.Tag] = append(out[v.Tag], Point{e.Step, x})
		}
	}
	return out, nil
}

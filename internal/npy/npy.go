// Package npy reads and writes NumPy .npy arrays (format versions 1.0 to 3.0 read, 1.0 written)
// of little-endian float32, float64, int32, int64, uint8 and bool elements in C order, with
// any shape. It holds no state; every function is safe for concurrent use.
package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// ErrFormat is wrapped by every error about a malformed or unsupported file.
var ErrFormat = errors.New("npy: unsupported or malformed .npy data")

var magic = []byte("\x93NUMPY")

// Array is a decoded array: exactly one of the typed slices is set, as Descr says.
type Array struct {
	Descr string // NumPy type string: <f4, <f8, <i4, <i8, |u1, |b1
	Shape []int
	F32   []float32
	F64   []float64
	I32   []int32
	I64   []int64
	U8    []uint8 // also holds |b1 (bool) data, one byte per element
}

// Len is the number of elements the shape holds.
func (a *Array) Len() int { return numel(a.Shape) }

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Element is the set of Go types written by [Write].
type Element interface {
	float32 | float64 | int32 | int64 | uint8 | bool
}

func descr[T Element]() string {
	var z T
	switch any(z).(type) {
	case float32:
		return "<f4"
	case float64:
		return "<f8"
	case int32:
		return "<i4"
	case int64:
		return "<i8"
	case uint8:
		return "|u1"
	default:
		return "|b1"
	}
}

// Write writes data with the given shape as a version 1.0 .npy stream.
func Write[T Element](w io.Writer, shape []int, data []T) error {
	if n := numel(shape); n != len(data) {
		return fmt.Errorf("npy: shape %v holds %d elements, data has %d", shape, n, len(data))
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr[T](), tuple)
	// Pad with spaces so that magic(6)+version(2)+len(2)+header+'\n' is a multiple of 64.
	pad := 64 - (10+len(h)+1)%64
	if pad == 64 {
		pad = 0
	}
	h += strings.Repeat(" ", pad) + "\n"
	if len(h) > math.MaxUint16 {
		return fmt.Errorf("npy: header of %d bytes is too long for format 1.0", len(h))
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.Write(magic)
	bw.Write([]byte{1, 0})
	binary.Write(bw, binary.LittleEndian, uint16(len(h)))
	bw.WriteString(h)
	if err := binary.Write(bw, binary.LittleEndian, data); err != nil {
		return fmt.Errorf("npy: writing data: %w", err)
	}
	return bw.Flush()
}

var (
	reDescr   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	reFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	reShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// Read decodes one .npy stream.
func Read(r io.Reader) (*Array, error) {
	br := bufio.NewReader(r)
	pre := make([]byte, 8)
	if _, err := io.ReadFull(br, pre); err != nil {
		return nil, fmt.Errorf("%w: reading the preamble: %v", ErrFormat, err)
	}
	if !bytes.Equal(pre[:6], magic) {
		return nil, fmt.Errorf("%w: missing the \\x93NUMPY magic", ErrFormat)
	}
	var hlen int
	switch pre[6] {
	case 1:
		var n uint16
		if err := binary.Read(br, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("%w: reading the header length: %v", ErrFormat, err)
		}
		hlen = int(n)
	case 2, 3:
		var n uint32
		if err := binary.Read(br, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("%w: reading the header length: %v", ErrFormat, err)
		}
		hlen = int(n)
	default:
		return nil, fmt.Errorf("%w: format version %d.%d", ErrFormat, pre[6], pre[7])
	}
	if hlen > 1<<20 {
		return nil, fmt.Errorf("%w: header length %d", ErrFormat, hlen)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(br, hb); err != nil {
		return nil, fmt.Errorf("%w: reading the header: %v", ErrFormat, err)
	}
	h := string(hb)
	m := reDescr.FindStringSubmatch(h)
	if m == nil {
		return nil, fmt.Errorf("%w: no descr in header %q", ErrFormat, h)
	}
	a := &Array{Descr: m[1]}
	if f := reFortran.FindStringSubmatch(h); f != nil && f[1] == "True" {
		return nil, fmt.Errorf("%w: Fortran-ordered arrays are not supported", ErrFormat)
	}
	s := reShape.FindStringSubmatch(h)
	if s == nil {
		return nil, fmt.Errorf("%w: no shape in header %q", ErrFormat, h)
	}
	for _, f := range strings.Split(s[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%w: bad dimension %q in shape (%s)", ErrFormat, f, s[1])
		}
		a.Shape = append(a.Shape, d)
	}
	n := a.Len()
	var dst any
	switch a.Descr {
	case "<f4":
		a.F32 = make([]float32, n)
		dst = a.F32
	case "<f8":
		a.F64 = make([]float64, n)
		dst = a.F64
	case "<i4":
		a.I32 = make([]int32, n)
		dst = a.I32
	case "<i8":
		a.I64 = make([]int64, n)
		dst = a.I64
	case "|u1", "<u1", "|b1":
		a.U8 = make([]uint8, n)
		dst = a.U8
	default:
		return nil, fmt.Errorf("%w: element type %q (supported: <f4, <f8, <i4, <i8, |u1, |b1)", ErrFormat, a.Descr)
	}
	if err := binary.Read(br, binary.LittleEndian, dst); err != nil {
		return nil, fmt.Errorf("%w: reading %d elements of %s for shape %v: %v", ErrFormat, n, a.Descr, a.Shape, err)
	}
	return a, nil
}

// ReadFile decodes the .npy file at path. Format errors name the file; a file that cannot be
// opened gives os.Open's error, which names it too.
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

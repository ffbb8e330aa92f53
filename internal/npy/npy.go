// Package npy reads and writes NumPy .npy arrays (format versions 1.0 to 3.0 read, 1.0 written)
// of little-endian float32, float64, int32, int64, uint8 and bool elements in C order, with
// any shape. It holds no state; every function is safe for concurrent use.
//
// Files may be hostile: a malformed header is an [ErrFormat] error saying what is wrong, and
// the size a header claims is checked for overflow, and by [ReadFile] against the file's size,
// before anything is allocated; [Read] grows its buffers only as data arrives.
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
	"slices"
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
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("npy: shape %v has a negative dimension", shape)
		}
	}
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

// maxHeader is the longest header Read accepts; numpy writes a few hundred bytes at most.
const maxHeader = 1 << 20

var (
	reDescr   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	reFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	reShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// supported lists the element types Read decodes, for error messages.
const supported = "<f4 (float32), <f8 (float64), <i4 (int32), <i8 (int64), |u1 (uint8) and |b1 (bool), little-endian, C order"

// elemSize is the size in bytes of one element of descr, or 0 when Read does not decode it.
func elemSize(descr string) int {
	switch descr {
	case "<f4", "<i4":
		return 4
	case "<f8", "<i8":
		return 8
	case "|u1", "<u1", "|b1":
		return 1
	}
	return 0
}

// Read decodes one .npy stream. The data is read as it arrives, so a header claiming more
// elements than the stream holds is an error after reading what is there, never a huge
// allocation; [ReadFile] checks the claim against the file's size before reading any data.
func Read(r io.Reader) (*Array, error) { return read(r, -1) }

// read decodes one .npy stream of size bytes (-1 when unknown).
func read(r io.Reader, size int64) (*Array, error) {
	br := bufio.NewReader(r)
	pre := make([]byte, 8)
	if _, err := io.ReadFull(br, pre); err != nil {
		return nil, fmt.Errorf("%w: reading the preamble: %v", ErrFormat, err)
	}
	if !bytes.Equal(pre[:6], magic) {
		return nil, fmt.Errorf("%w: missing the \\x93NUMPY magic", ErrFormat)
	}
	var hlen, lenSize int
	switch pre[6] {
	case 1:
		var n uint16
		if err := binary.Read(br, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("%w: reading the header length: %v", ErrFormat, err)
		}
		hlen, lenSize = int(n), 2
	case 2, 3:
		var n uint32
		if err := binary.Read(br, binary.LittleEndian, &n); err != nil {
			return nil, fmt.Errorf("%w: reading the header length: %v", ErrFormat, err)
		}
		hlen, lenSize = int(n), 4
	default:
		return nil, fmt.Errorf("%w: format version %d.%d (supported: 1.0, 2.0, 3.0)", ErrFormat, pre[6], pre[7])
	}
	start := int64(len(pre) + lenSize + hlen) // where the data begins
	switch {
	case hlen > maxHeader:
		return nil, fmt.Errorf("%w: the header claims %d bytes; numpy writes a few hundred, and at most %d are accepted",
			ErrFormat, hlen, maxHeader)
	case size >= 0 && start > size:
		return nil, fmt.Errorf("%w: the header claims %d bytes but the file has %d bytes in all (truncated?)", ErrFormat, hlen, size)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(br, hb); err != nil {
		return nil, fmt.Errorf("%w: reading the %d-byte header: %v", ErrFormat, hlen, err)
	}
	a, err := parseHeader(hb)
	if err != nil {
		return nil, err
	}
	es := elemSize(a.Descr)
	if es == 0 {
		return nil, fmt.Errorf("%w: element type %q; supported: %s (numpy: np.save(path, arr.astype(np.float32)))",
			ErrFormat, a.Descr, supported)
	}
	n, nbytes, ok := dataSize(a.Shape, es)
	if !ok {
		return nil, fmt.Errorf("%w: shape %v of %s would hold more than %d bytes; the header is corrupt",
			ErrFormat, a.Shape, a.Descr, math.MaxInt64)
	}
	if size >= 0 && nbytes > size-start {
		return nil, fmt.Errorf("%w: shape %v of %s needs %d bytes of data, but the file has %d bytes (%d after the %d-byte header): truncated or corrupt",
			ErrFormat, a.Shape, a.Descr, nbytes, size, size-start, start)
	}
	switch a.Descr {
	case "<f4":
		a.F32, err = readElems[float32](br, n)
	case "<f8":
		a.F64, err = readElems[float64](br, n)
	case "<i4":
		a.I32, err = readElems[int32](br, n)
	case "<i8":
		a.I64, err = readElems[int64](br, n)
	default: // |u1, <u1, |b1
		a.U8, err = readElems[uint8](br, n)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading %d elements of %s for shape %v: %v", ErrFormat, n, a.Descr, a.Shape, err)
	}
	return a, nil
}

// parseHeader reads the descr and shape from the header dictionary.
func parseHeader(hb []byte) (*Array, error) {
	for i, c := range hb {
		if c >= 0x80 {
			return nil, fmt.Errorf("%w: header byte %d is %#x, not ASCII: not a .npy header numpy writes", ErrFormat, i, c)
		}
	}
	h := string(hb)
	if t := strings.TrimSpace(strings.TrimRight(h, "\x00")); !strings.HasPrefix(t, "{") || !strings.HasSuffix(t, "}") {
		return nil, fmt.Errorf("%w: the header %q is not a Python dict literal", ErrFormat, h)
	}
	m := reDescr.FindStringSubmatch(h)
	if m == nil {
		return nil, fmt.Errorf("%w: no descr in header %q", ErrFormat, h)
	}
	a := &Array{Descr: m[1]}
	if f := reFortran.FindStringSubmatch(h); f != nil && f[1] == "True" {
		return nil, fmt.Errorf("%w: Fortran-ordered arrays are not supported (numpy: np.save(path, np.ascontiguousarray(arr)))", ErrFormat)
	}
	s := reShape.FindStringSubmatch(h)
	if s == nil {
		return nil, fmt.Errorf("%w: no shape in header %q", ErrFormat, h)
	}
	for _, f := range strings.Split(s[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := strconv.Atoi(strings.TrimSuffix(f, "L")) // Python 2's numpy wrote long ints as 3L
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: dimension %q in shape (%s) is not an integer that fits in int", ErrFormat, f, s[1])
		case d < 0:
			return nil, fmt.Errorf("%w: negative dimension %d in shape (%s)", ErrFormat, d, s[1])
		}
		a.Shape = append(a.Shape, d)
	}
	return a, nil
}

// dataSize is the number of elements of shape and their size in bytes; ok is false when
// either overflows.
func dataSize(shape []int, elem int) (n int, nbytes int64, ok bool) {
	n = 1
	for _, d := range shape {
		if d != 0 && n > math.MaxInt/d {
			return 0, 0, false
		}
		n *= d
	}
	if n > math.MaxInt64/elem {
		return 0, 0, false
	}
	return n, int64(n) * int64(elem), true
}

// readElems reads n little-endian elements, growing the slice as the data arrives so that a
// stream shorter than claimed costs no more memory than it holds.
func readElems[T float32 | float64 | int32 | int64 | uint8](r io.Reader, n int) ([]T, error) {
	const chunk = 1 << 16 // elements read before the first growth
	out := make([]T, 0, min(n, chunk))
	for len(out) < n {
		have := len(out)
		k := min(n-have, max(have, chunk))
		out = slices.Grow(out, k)[:have+k]
		if err := binary.Read(r, binary.LittleEndian, out[have:]); err != nil {
			return nil, fmt.Errorf("the data ends within elements %d to %d: %w", have, have+k, err)
		}
	}
	return out, nil
}

// ReadFile decodes the .npy file at path, checking the shape its header claims against the
// file's size before reading the data. Format errors name the file; a file that cannot be
// opened gives os.Open's error, which names it too.
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	a, err := read(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

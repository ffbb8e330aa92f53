package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbinet/npyio"
)

// The fixtures were written by numpy.save (scripts/gen_fixtures.py): an independent writer.
func TestReadNumpyFixture(t *testing.T) {
	f, err := os.Open("../../testdata/mlp_tanh.input.npy")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if a.Descr != "<f4" || !cmp.Equal(a.Shape, []int{16, 4}) || len(a.F32) != 64 {
		t.Fatalf("got descr %s shape %v len %d, want <f4 [16 4] 64", a.Descr, a.Shape, len(a.F32))
	}
	// npyio, a second reader, must agree element for element.
	f.Seek(0, 0)
	var ref []float32
	if err := npyio.Read(f, &ref); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ref, a.F32); d != "" {
		t.Fatalf("disagrees with npyio (-npyio +ours):\n%s", d)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	shape := []int{2, 3, 4}
	data := make([]float64, 24)
	for i := range data {
		data[i] = float64(i) * 0.5
	}
	var buf bytes.Buffer
	if err := Write(&buf, shape, data); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%64 != 24*8%64 { // header block is a multiple of 64 bytes
		t.Fatalf("header not padded to 64 bytes: total %d", buf.Len())
	}
	r, err := npyio.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("npyio cannot read our file: %v", err)
	}
	if !cmp.Equal(r.Header.Descr.Shape, shape) || r.Header.Descr.Type != "<f8" {
		t.Fatalf("npyio sees %v %s", r.Header.Descr.Shape, r.Header.Descr.Type)
	}
	a, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(a.Shape, shape) || !cmp.Equal(a.F64, data) {
		t.Fatalf("round trip: got %v %v", a.Shape, a.F64)
	}
}

func TestWriteShapes(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		want  string
	}{
		{[]int{3}, "(3,)"},
		{[]int{}, "()"},
		{[]int{2, 1}, "(2, 1)"},
	} {
		var buf bytes.Buffer
		if err := Write(&buf, tc.shape, make([]int64, numel(tc.shape))); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(buf.Bytes(), []byte("'shape': "+tc.want)) {
			t.Errorf("shape %v: header %q lacks %s", tc.shape, buf.Bytes()[10:60], tc.want)
		}
		a, err := Read(&buf)
		if err != nil || numel(a.Shape) != numel(tc.shape) || len(a.Shape) != len(tc.shape) {
			t.Errorf("shape %v: read back %v, %v", tc.shape, a, err)
		}
	}
}

func TestReadErrors(t *testing.T) {
	var good bytes.Buffer
	Write(&good, []int{4}, []float32{1, 2, 3, 4})
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":     {nil, "preamble"},
		"not npy":   {[]byte("PK\x03\x04 this is a zip"), "magic"},
		"truncated": {good.Bytes()[:good.Len()-3], "reading 4 elements"},
		"dtype":     {bytes.Replace(good.Bytes(), []byte("<f4"), []byte("<c8"), 1), `"<c8"`},
	} {
		_, err := Read(bytes.NewReader(tc.data))
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
			t.Errorf("%s: error %v, want one mentioning %s", name, err, tc.want)
		}
	}
	if err := Write(&good, []int{3}, []float32{1}); err == nil {
		t.Error("Write accepted 1 element for shape [3]")
	}
}

// rawNPY builds a .npy stream with the given format version, header text and data bytes,
// without the checks Write makes: the malformed files a careless or hostile writer makes.
func rawNPY(version byte, header string, data []byte) []byte {
	b := append([]byte{}, magic...)
	b = append(b, version, 0)
	if version == 1 {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(header)))
	} else {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(header)))
	}
	b = append(b, header...)
	return append(b, data...)
}

func dict(descr, shape string) string {
	return fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }\n", descr, shape)
}

// TestReadHugeShapes: a header claiming far more elements than the file holds (or than fit in
// memory, or in an int) is an error naming the shape (and, from a file, its size) before any
// allocation. (2^62, 4) of <f4 panicked in makeslice; (2^32, 2^32) overflowed to 0 elements
// and was accepted with an empty slice.
func TestReadHugeShapes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, descr, shape string
		want               []string // in both the stream and the file error
		fileWant           string   // in the file error only
	}{
		{"2^62 x 4", "<f4", "(4611686018427387904, 4)", []string{"[4611686018427387904 4]", "more than"}, ""},
		{"2^32 x 2^32", "<f4", "(4294967296, 4294967296)", []string{"[4294967296 4294967296]", "more than"}, ""},
		{"2^61 bytes of f8", "<f8", "(288230376151711744,)", []string{"[288230376151711744]"}, "needs 2305843009213693952 bytes"},
		{"2^40 rows of 4", "<f4", "(1099511627776, 4)", []string{"[1099511627776 4]"}, "needs 17592186044416 bytes of data, but the file has %d bytes"},
		{"one row too many", "<f4", "(3, 4)", []string{"[3 4]"}, "needs 48 bytes of data, but the file has %d bytes (32 after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := rawNPY(1, dict(tc.descr, tc.shape), make([]byte, 32)) // 2 rows of 4 float32
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".npy")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, serr := Read(bytes.NewReader(data))
			_, ferr := ReadFile(path)
			for _, err := range []error{serr, ferr} {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("error %v, want ErrFormat", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %s", err, w)
					}
				}
			}
			if strings.Contains(tc.fileWant, "%d") {
				tc.fileWant = fmt.Sprintf(tc.fileWant, len(data))
			}
			if !strings.Contains(ferr.Error(), tc.fileWant) || !strings.Contains(ferr.Error(), path) {
				t.Errorf("file error %q does not mention %q and the file", ferr, tc.fileWant)
			}
		})
	}
}

// TestReadMalformedHeaders: every malformed header is an ErrFormat error saying what is wrong.
func TestReadMalformedHeaders(t *testing.T) {
	four := make([]byte, 16)
	huge := append([]byte{}, magic...)
	huge = append(huge, 2, 0)
	huge = binary.LittleEndian.AppendUint32(huge, 1<<31)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"negative dimension", rawNPY(1, dict("<f4", "(-4,)"), four), "negative dimension -4"},
		{"negative among several", rawNPY(1, dict("<f4", "(2, -2)"), four), "negative dimension -2"},
		{"dimension not a number", rawNPY(1, dict("<f4", "(four,)"), four), `dimension "four"`},
		{"dimension past int", rawNPY(1, dict("<f4", "(99999999999999999999,)"), four), `"99999999999999999999"`},
		{"non-ASCII header", rawNPY(1, dict("<f4", "(4,)")+"\xe9", four), "not ASCII"},
		{"not a dict", rawNPY(1, "descr=<f4 shape=4\n", four), "not a Python dict"},
		{"no descr", rawNPY(1, "{'shape': (4,)}\n", four), "no descr"},
		{"no shape", rawNPY(1, "{'descr': '<f4'}\n", four), "no shape"},
		{"truncated header", rawNPY(1, dict("<f4", "(4,)"), nil)[:30], "reading the 58-byte header"},
		{"huge header length", huge, "claims 2147483648 bytes"},
		{"version 4", rawNPY(4, dict("<f4", "(4,)"), four), "format version 4.0 (supported: 1.0, 2.0, 3.0)"},
		{"fortran order", rawNPY(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }\n", four), "np.ascontiguousarray"},
		{"big-endian", rawNPY(1, dict(">f4", "(4,)"), four), `">f4"; supported: <f4 (float32)`},
		{"complex", rawNPY(1, dict("<c8", "(2,)"), four), "astype(np.float32)"},
		{"truncated data", rawNPY(1, dict("<f4", "(5,)"), four), "reading 5 elements of <f4 for shape [5]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrFormat mentioning %q", err, tc.want)
			}
		})
	}
}

// TestReadVersions: versions 2.0 and 3.0 (4-byte header length) and Python 2's long dims read
// like 1.0.
func TestReadVersions(t *testing.T) {
	vals := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}
	for _, tc := range []struct {
		version byte
		shape   string
	}{{1, "(3,)"}, {2, "(3,)"}, {3, "(1, 3)"}, {1, "(3L,)"}} {
		a, err := Read(bytes.NewReader(rawNPY(tc.version, dict("<i4", tc.shape), vals)))
		if err != nil {
			t.Fatalf("version %d shape %s: %v", tc.version, tc.shape, err)
		}
		if !cmp.Equal(a.I32, []int32{1, 2, 3}) {
			t.Errorf("version %d shape %s: %v", tc.version, tc.shape, a.I32)
		}
	}
}

// TestReadBool: numpy's bool arrays (|b1, one byte per element) read into U8 as 0 and 1.
func TestReadBool(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, []int{2, 2}, []bool{true, false, false, true}); err != nil {
		t.Fatal(err)
	}
	a, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if a.Descr != "|b1" || !cmp.Equal(a.U8, []uint8{1, 0, 0, 1}) {
		t.Fatalf("got %s %v", a.Descr, a.U8)
	}
}

// FuzzRead: no input panics, and what Read accepts holds as many elements as its shape says
// and survives a Write/Read round trip.
func FuzzRead(f *testing.F) {
	for _, p := range []string{"../../testdata/mlp_tanh.input.npy", "../../testdata/mlp_tanh.value.npy"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(rawNPY(1, dict("<f4", "(4611686018427387904, 4)"), make([]byte, 32)))
	f.Add(rawNPY(2, dict("|b1", "(2, 2)"), []byte{1, 0, 0, 1}))
	f.Add(rawNPY(3, dict("<i8", "()"), make([]byte, 8)))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		n := a.Len()
		if got := len(a.F32) + len(a.F64) + len(a.I32) + len(a.I64) + len(a.U8); got != n {
			t.Fatalf("shape %v holds %d elements, read %d", a.Shape, n, got)
		}
		var buf bytes.Buffer
		switch {
		case a.F32 != nil:
			err = Write(&buf, a.Shape, a.F32)
		case a.F64 != nil:
			err = Write(&buf, a.Shape, a.F64)
		case a.I32 != nil:
			err = Write(&buf, a.Shape, a.I32)
		case a.I64 != nil:
			err = Write(&buf, a.Shape, a.I64)
		default:
			err = Write(&buf, a.Shape, a.U8)
		}
		if err != nil {
			t.Fatalf("writing back shape %v: %v", a.Shape, err)
		}
		b, err := Read(&buf)
		if err != nil || b.Len() != n {
			t.Fatalf("round trip of shape %v: %v", a.Shape, err)
		}
	})
}

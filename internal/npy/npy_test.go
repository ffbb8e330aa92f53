package npy

import (
	"bytes"
	"os"
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

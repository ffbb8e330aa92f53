package tfevent_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/towerrl/towerrl/internal/tfevent"
	"github.com/towerrl/towerrl/internal/tfevent/tfeventtest"
)

// Two records of a file TensorFlow 2 wrote for tf.summary.scalar("accuracy", 0.99, step=77),
// as TensorBoard's data server quotes them (tensorboard/data/server/tf_record.rs,
// test_success): the file_version event at wall time 1599759586.0 and the scalar at
// 1599759606.859727, each framed with its length's and its data's masked CRC-32C.
var (
	tfRecord1 = []byte("\x18\x00\x00\x00\x00\x00\x00\x00" + "\xa3\x7f\x4b\x22" +
		"\x09\x00\x00\x80\x38\x99\xd6\xd7\x41\x1a\x0dbrain.Event:2" + "\x12\x4b\x36\xab")
	tfRecord2 = []byte("\x32\x00\x00\x00\x00\x00\x00\x00" + "\x24\x19\x56\xec" +
		"\x09\xc4\x05\xb7\x3d\x99\xd6\xd7\x41" + // wall_time (field 1, double)
		"\x10\x4d" + // step 77 (field 2, varint)
		"\x2a\x25" + // summary (field 5), 37 bytes
		"\x0a\x23" + // value (field 1), 35 bytes
		"\x0a\x08accuracy" + // tag (field 1)
		"\x42\x0a\x08\x01\x12\x00\x22\x04\xa4\x70\x7d\x3f" + // tensor: dtype DT_FLOAT, shape [], content 0.99f
		"\x4a\x0b\x0a\x09\x0a\x07scalars" + // metadata.plugin_data.plugin_name
		"\xa5\x5b\x64\x33")
)

// TestCRC32C checks the test decoder's bitwise CRC-32C and the package's table-driven one
// against RFC 3720's examples (appendix B.4) and the usual check value, and the masking
// against a value worked by hand.
func TestCRC32C(t *testing.T) {
	asc, desc := make([]byte, 32), make([]byte, 32)
	for i := range 32 {
		asc[i], desc[i] = byte(i), byte(31-i)
	}
	for _, c := range []struct {
		name string
		data []byte
		want uint32
	}{
		{"32 zero bytes", make([]byte, 32), 0x8a9136aa},
		{"32 bytes 0xff", bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43},
		{"bytes 0 to 31", asc, 0x46dd794e},
		{"bytes 31 to 0", desc, 0x113fdb5c},
		{"123456789", []byte("123456789"), 0xe3069283},
	} {
		if got := tfeventtest.CRC32C(c.data); got != c.want {
			t.Errorf("bitwise CRC-32C of %s = %#x, want %#x", c.name, got, c.want)
		}
		if got := crc32.Checksum(c.data, crc32.MakeTable(crc32.Castagnoli)); got != c.want {
			t.Errorf("hash/crc32 Castagnoli of %s = %#x, want %#x", c.name, got, c.want)
		}
	}
	// 0xe3069283 rotated right by 15: 0xe3069283>>15 = 0x1c60d, 0xe3069283<<17 (32 bits) =
	// 0x25060000, together 0x2507c60d; plus 0xa282ead8 is 0xc78ab0e5.
	if got := tfevent.MaskedCRC([]byte("123456789")); got != 0xc78ab0e5 {
		t.Errorf("MaskedCRC(123456789) = %#x, want 0xc78ab0e5", got)
	}
	if got := tfeventtest.Mask(0xe3069283); got != 0xc78ab0e5 {
		t.Errorf("Mask(0xe3069283) = %#x, want 0xc78ab0e5", got)
	}
	// TensorBoard's data server (masked_crc.rs): RFC 3720's zeros masked, and a file_version
	// event's bytes.
	if got := tfevent.MaskedCRC(make([]byte, 32)); got != tfeventtest.Mask(0x8a9136aa) {
		t.Errorf("MaskedCRC(32 zeros) = %#x", got)
	}
	if got := tfevent.MaskedCRC([]byte("\x1a\x11CRC test, one two")); got != 0x5794d08a {
		t.Errorf("MaskedCRC(file_version event) = %#x, want 0x5794d08a", got)
	}
}

// TestKnownRecords frames and encodes TensorFlow's two records and compares every byte; the
// test decoder reads them as their field comments say.
func TestKnownRecords(t *testing.T) {
	recs, err := tfeventtest.Records(append(append([]byte{}, tfRecord1...), tfRecord2...))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for i, want := range [][]byte{tfRecord1, tfRecord2} {
		if got := tfevent.AppendRecord(nil, recs[i]); !bytes.Equal(got, want) {
			t.Errorf("record %d framed as\n%q, want\n%q", i, got, want)
		}
	}
	e1, err := tfeventtest.Decode(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	e2, err := tfeventtest.Decode(recs[1])
	if err != nil {
		t.Fatal(err)
	}
	if e1.Wall != 1599759586.0 || e1.Step != 0 || e1.FileVersion != tfevent.FileVersion {
		t.Errorf("record 1 = %+v", e1)
	}
	if e2.Wall != 1599759606.859727 || e2.Step != 77 || len(e2.Values) != 1 || e2.Values[0].Tag != "accuracy" || e2.Values[0].Plugin != "scalars" {
		t.Errorf("record 2 = %+v", e2)
	}
	if x, err := e2.Values[0].Scalar(); err != nil || x != float32(0.99) {
		t.Errorf("record 2's scalar = %v, %v; want 0.99", x, err)
	}

	// The writer, given the same wall times, writes the same bytes after the 12-byte header.
	dir := t.TempDir()
	w, err := tfevent.Create(dir, wallTime(e1.Wall))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(wallTime(e2.Wall), 77, []tfevent.Scalar{{Tag: "accuracy", Value: 0.99}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, tfRecord1...), tfRecord2...)
	if !bytes.Equal(got, want) {
		t.Errorf("the writer wrote\n%q\nTensorFlow wrote\n%q", got, want)
	}
}

// wallTime is the time whose seconds since the epoch are s, to the nanosecond.
func wallTime(s float64) time.Time {
	sec := math.Floor(s)
	return time.Unix(int64(sec), int64(math.Round((s-sec)*1e9)))
}

// TestName checks the file name against TensorBoard's pattern
// events.out.tfevents.%010d.<host>.<pid>.<n>, and Create's choice of n.
func TestName(t *testing.T) {
	at := time.Unix(1599759586, 0)
	if got, want := tfevent.Name(at, "box", 4242, 0), "events.out.tfevents.1599759586.box.4242.0"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
	if got, want := tfevent.Name(time.Unix(86400, 0), "h", 1, 3), "events.out.tfevents.0000086400.h.1.3"; got != want {
		t.Errorf("Name = %q, want %q", got, want)
	}
	dir := t.TempDir()
	var paths []string
	for range 3 {
		w, err := tfevent.Create(dir, at)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Base(w.Path()))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	re := regexp.MustCompile(`^events\.out\.tfevents\.1599759586\.[^/]+\.[0-9]+\.([0-9]+)$`)
	for i, p := range paths {
		m := re.FindStringSubmatch(p)
		if m == nil || m[1] != string(rune('0'+i)) {
			t.Errorf("file %d is named %q, want n = %d", i, p, i)
		}
	}
	files, err := tfevent.Files(dir)
	if err != nil || len(files) != 3 {
		t.Errorf("Files = %v, %v; want 3", files, err)
	}
}

// TestWriterValues writes scalars (a NaN among them), a text and an image and reads them back
// with the test decoder.
func TestWriterValues(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1700000000, 250_000_000)
	w, err := tfevent.Create(dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	table := "|param|value|\n|-|-|\n|env|CartPole-v1|"
	gif := []byte("GIF89a\x01\x00\x01\x00")
	steps := []int64{512, 1024, 300_000_000_000} // past 32 bits: a varint of 5 bytes
	if err := w.Text(t0, 0, "hyperparameters", table); err != nil {
		t.Fatal(err)
	}
	for i, s := range steps {
		vs := []tfevent.Scalar{{"charts/episodic_return", float64(i) + 0.5}, {"losses/approx_kl", math.NaN()}, {"charts/SPS", -1e30}}
		if err := w.Scalars(t0.Add(time.Duration(i)*time.Second), s, vs); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Scalars(t0, 5, []tfevent.Scalar{{"x", math.Inf(1)}}); err != nil { // nothing finite: no event
		t.Fatal(err)
	}
	if err := w.Image(t0, 1024, "episode", 600, 400, 3, gif); err != nil {
		t.Fatal(err)
	}
	if err := w.Image(t0, 1024, "episode", 0, 400, 3, gif); err == nil {
		t.Error("an image 0 pixels wide was written")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Scalars(t0, 1, []tfevent.Scalar{{"x", 1}}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Scalars after Close: %v, want os.ErrClosed", err)
	}
	evs, err := tfeventtest.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2+len(steps)+1 {
		t.Fatalf("%d events, want %d", len(evs), 2+len(steps)+1)
	}
	if evs[0].FileVersion != "brain.Event:2" || evs[0].Wall != 1700000000.25 {
		t.Errorf("first event %+v", evs[0])
	}
	txt := evs[1].Values[0]
	if txt.Tag != "hyperparameters" || txt.Plugin != "text" || txt.DType != 7 || txt.Dims != nil ||
		len(txt.StringVal) != 1 || txt.StringVal[0] != table {
		t.Errorf("text value %+v", txt)
	}
	got, err := tfeventtest.Scalars(evs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]tfeventtest.Point{
		"charts/episodic_return": {{Step: 512, Value: 0.5}, {Step: 1024, Value: 1.5}, {Step: 300_000_000_000, Value: 2.5}},
		"charts/SPS":             {{Step: 512, Value: -1e30}, {Step: 1024, Value: -1e30}, {Step: 300_000_000_000, Value: -1e30}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("scalars (-want +got):\n%s", d)
	}
	img := evs[len(evs)-1]
	if v := img.Values[0]; img.Step != 1024 || v.Tag != "episode" || !v.HasImage || v.Width != 600 || v.Height != 400 ||
		v.Colorspace != 3 || !bytes.Equal(v.Encoded, gif) {
		t.Errorf("image event %+v", img)
	}
}

// TestTruncate cuts a file back to a step, cuts a torn record, and leaves a file that is not
// an event file alone.
func TestTruncate(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Unix(1700000000, 0)
	w, err := tfevent.Create(dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Text(t0, 0, "hyperparameters", "x"); err != nil {
		t.Fatal(err)
	}
	for s := int64(100); s <= 500; s += 100 {
		if err := w.Scalars(t0, s, []tfevent.Scalar{{"a", float64(s)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	steps := func() []int64 {
		evs, err := tfeventtest.ReadFile(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		var s []int64
		for _, e := range evs {
			s = append(s, e.Step)
		}
		return s
	}
	kept, err := tfevent.Truncate(w.Path(), 300)
	if err != nil || kept != 5 {
		t.Errorf("Truncate(300) kept %d, %v; want 5", kept, err)
	}
	if d := cmp.Diff([]int64{0, 0, 100, 200, 300}, steps()); d != "" {
		t.Errorf("steps after Truncate(300) (-want +got):\n%s", d)
	}
	// A torn record (a process killed mid-write): its first 20 bytes only.
	b, _ := os.ReadFile(w.Path())
	rec := tfevent.AppendRecord(nil, []byte("\x10\x90\x03"))
	if err := os.WriteFile(w.Path(), append(b, rec[:len(rec)-2]...), 0o644); err != nil {
		t.Fatal(err)
	}
	if kept, err := tfevent.Truncate(w.Path(), 1000); err != nil || kept != 5 {
		t.Errorf("Truncate of a torn file kept %d, %v; want 5", kept, err)
	}
	if got, _ := os.ReadFile(w.Path()); !bytes.Equal(got, b) {
		t.Errorf("the torn record was not cut: %d bytes, want %d", len(got), len(b))
	}
	// A record whose data CRC is wrong ends the file too.
	bad := tfevent.AppendRecord(nil, []byte("\x10\x90\x03"))
	binary.LittleEndian.PutUint32(bad[len(bad)-4:], 0)
	os.WriteFile(w.Path(), append(append([]byte{}, b...), bad...), 0o644)
	if kept, err := tfevent.Truncate(w.Path(), 1000); err != nil || kept != 5 {
		t.Errorf("Truncate past a corrupt record kept %d, %v; want 5", kept, err)
	}
	// Not an event file: refused, unchanged.
	other := filepath.Join(dir, "events.out.tfevents.notes")
	os.WriteFile(other, []byte("my notes\n"), 0o644)
	if _, err := tfevent.Truncate(other, 0); !errors.Is(err, tfevent.ErrCorrupt) || !strings.Contains(err.Error(), "not truncated") {
		t.Errorf("Truncate of a text file: %v, want ErrCorrupt", err)
	}
	if got, _ := os.ReadFile(other); string(got) != "my notes\n" {
		t.Errorf("a text file was changed to %q", got)
	}
	// Torn in its first record (killed while Create wrote it): emptied.
	torn := filepath.Join(dir, "events.out.tfevents.torn")
	w2, err := tfevent.Create(dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	first, _ := os.ReadFile(w2.Path())
	for _, n := range []int{0, 5, 12, 20, len(first) - 1} {
		os.WriteFile(torn, first[:n], 0o644)
		if kept, err := tfevent.Truncate(torn, 0); err != nil || kept != 0 {
			t.Errorf("Truncate of a file torn after %d bytes of its first record: kept %d, %v; want 0, nil", n, kept, err)
		}
		if fi, err := os.Stat(torn); err != nil || fi.Size() != 0 {
			t.Errorf("a file torn after %d bytes of its first record was not emptied: %v, %v", n, fi, err)
		}
	}
	if _, err := tfevent.Truncate(filepath.Join(dir, "missing"), 0); err == nil {
		t.Error("Truncate of a missing file succeeded")
	}
}

// TestScalarsAllocs: an iteration's scalars allocate nothing once the buffers have grown.
func TestScalarsAllocs(t *testing.T) {
	w, err := tfevent.Create(t.TempDir(), time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	vs := []tfevent.Scalar{{Tag: "charts/episodic_return", Value: 1}, {Tag: "losses/value_loss", Value: 2}, {Tag: "charts/SPS", Value: 3}}
	step := int64(0)
	write := func() {
		step += 512
		if err := w.Scalars(time.Unix(1700000000, 0), step, vs); err != nil {
			t.Fatal(err)
		}
	}
	write()
	if n := testing.AllocsPerRun(100, write); n != 0 {
		t.Errorf("Scalars allocates %v times a call", n)
	}
}

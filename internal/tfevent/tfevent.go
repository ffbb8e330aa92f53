// Package tfevent writes TensorBoard's event files: TFRecord framing (each record its length,
// the length's masked CRC-32C, the bytes, their masked CRC-32C) around Event protocol buffers
// (tensorboard/compat/proto/event.proto and summary.proto) that carry scalars, text and images.
// TensorBoard, Weights & Biases (wandb sync --sync-tensorboard) and every reader of
// TensorFlow's event files read them.
//
// A file is named events.out.tfevents.<unix seconds>.<host>.<pid>.<n> (see [Name]) and starts
// with the file_version event "brain.Event:2". Scalars are written as TensorFlow 2 writes
// them: a float32 scalar tensor tagged with the "scalars" plugin; text as the "text" plugin's
// string tensor; images as Summary.Image with the encoded bytes (PNG, or an animated GIF,
// which TensorBoard's image dashboard plays).
//
// Lifecycle: [Create] a file, write events (each one record, handed to the operating system at
// once, so a TensorBoard watching the folder sees it), [Writer.Close]. [Truncate] cuts a file
// back to a step, so that a resumed run continues it without repeating steps.
//
// A Writer is not safe for concurrent use; one goroutine owns it. Scalars allocates nothing
// once it has written an event as large (its buffers are reused).
package tfevent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Prefix starts the name of every event file.
const Prefix = "events.out.tfevents."

// FileVersion is the file_version of the first event of every file.
const FileVersion = "brain.Event:2"

// ErrCorrupt is wrapped by the errors of [Read] and [Truncate] about a file that is not a
// sequence of whole TFRecords of events.
var ErrCorrupt = errors.New("tfevent: corrupt event file")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's checksum of data: its CRC-32C (the Castagnoli polynomial) rotated
// right by 15 bits plus 0xa282ead8, so that a CRC of bytes holding CRCs stays well mixed.
func MaskedCRC(data []byte) uint32 {
	c := crc32.Checksum(data, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// AppendRecord appends data framed as one TFRecord to dst: the length (uint64, little
// endian), its masked CRC, data, data's masked CRC.
func AppendRecord(dst, data []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(data)))
	dst = binary.LittleEndian.AppendUint32(dst, MaskedCRC(dst[len(dst)-8:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Name is the event file name TensorBoard's writers give: events.out.tfevents. then the unix
// time in seconds (ten digits at least), the host, the process id and n, a number that keeps
// the names of one process apart.
func Name(t time.Time, host string, pid, n int) string {
	return fmt.Sprintf("%s%010d.%s.%d.%d", Prefix, t.Unix(), host, pid, n)
}

// Files lists the event files in dir, by name.
func Files(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix) && e.Type().IsRegular() {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(paths)
	return paths, nil
}

// Writer appends events to one event file.
type Writer struct {
	f    *os.File
	path string
	rec  []byte // the record being written, reused
	ev   []byte // its event, reused
	sum  []byte // the event's summary, reused
	val  []byte // one summary value, reused
}

// Create makes a new event file in dir (which must exist), named by [Name] with the time t,
// this host and process, and the smallest n from 0 whose name is not taken in dir, and
// writes its file_version event at wall time t.
func Create(dir string, t time.Time) (*Writer, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(host)
	for n := 0; ; n++ {
		path := filepath.Join(dir, Name(t, host, os.Getpid(), n))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tfevent: %w", err)
		}
		w := &Writer{f: f, path: path}
		w.ev = appendEventHead(w.ev[:0], t, 0)
		w.ev = protowire.AppendTag(w.ev, 3, protowire.BytesType) // file_version
		w.ev = protowire.AppendString(w.ev, FileVersion)
		if err := w.write(); err != nil {
			f.Close()
			os.Remove(path)
			return nil, err
		}
		return w, nil
	}
}

// Path is the file's path.
func (w *Writer) Path() string { return w.path }

// Scalar is one named value of a [Writer.Scalars] event.
type Scalar struct {
	Tag   string
	Value float64
}

// Scalars writes one event at step holding every value of vs that is finite (a NaN, such as
// the return of an iteration in which no episode ended, is left out: TensorBoard would draw
// it as a gap or a spike). Values are stored as float32. Nothing is written when no value is
// finite.
func (w *Writer) Scalars(t time.Time, step int64, vs []Scalar) error {
	w.sum = w.sum[:0]
	for _, v := range vs {
		if math.IsNaN(v.Value) || math.IsInf(v.Value, 0) {
			continue
		}
		w.val = appendScalarValue(w.val[:0], v.Tag, float32(v.Value))
		w.sum = protowire.AppendTag(w.sum, 1, protowire.BytesType) // Summary.value
		w.sum = protowire.AppendBytes(w.sum, w.val)
	}
	if len(w.sum) == 0 {
		return nil
	}
	return w.summary(t, step)
}

// Text writes tag's text at step, as the text plugin shows it (Markdown: a table is drawn as
// one).
func (w *Writer) Text(t time.Time, step int64, tag, text string) error {
	w.val = appendTextValue(w.val[:0], tag, text)
	w.sum = protowire.AppendTag(w.sum[:0], 1, protowire.BytesType)
	w.sum = protowire.AppendBytes(w.sum, w.val)
	return w.summary(t, step)
}

// Image writes an encoded image (PNG, JPEG, or a GIF, animated or not) of width × height
// pixels with channels colour channels (3: RGB, 4: RGBA) under tag at step.
func (w *Writer) Image(t time.Time, step int64, tag string, width, height, channels int, encoded []byte) error {
	if width <= 0 || height <= 0 || width > math.MaxInt32 || height > math.MaxInt32 {
		return fmt.Errorf("tfevent: image %q of %d×%d pixels: want sizes from 1 to %d", tag, width, height, math.MaxInt32)
	}
	var img []byte
	img = protowire.AppendTag(img, 1, protowire.VarintType) // height
	img = protowire.AppendVarint(img, uint64(height))
	img = protowire.AppendTag(img, 2, protowire.VarintType) // width
	img = protowire.AppendVarint(img, uint64(width))
	img = protowire.AppendTag(img, 3, protowire.VarintType) // colorspace
	img = protowire.AppendVarint(img, uint64(channels))
	img = protowire.AppendTag(img, 4, protowire.BytesType) // encoded_image_string
	img = protowire.AppendBytes(img, encoded)
	w.val = protowire.AppendTag(w.val[:0], 1, protowire.BytesType) // Value.tag
	w.val = protowire.AppendString(w.val, tag)
	w.val = protowire.AppendTag(w.val, 4, protowire.BytesType) // Value.image
	w.val = protowire.AppendBytes(w.val, img)
	w.sum = protowire.AppendTag(w.sum[:0], 1, protowire.BytesType)
	w.sum = protowire.AppendBytes(w.sum, w.val)
	return w.summary(t, step)
}

// Close closes the file.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("tfevent: %w", err)
	}
	return nil
}

// summary writes an event at step holding w.sum as its Summary.
func (w *Writer) summary(t time.Time, step int64) error {
	w.ev = appendEventHead(w.ev[:0], t, step)
	w.ev = protowire.AppendTag(w.ev, 5, protowire.BytesType) // Event.summary
	w.ev = protowire.AppendBytes(w.ev, w.sum)
	return w.write()
}

// write writes w.ev as one record in one write call.
func (w *Writer) write() error {
	if w.f == nil {
		return fmt.Errorf("tfevent: %s: %w", w.path, fs.ErrClosed)
	}
	w.rec = AppendRecord(w.rec[:0], w.ev)
	if _, err := w.f.Write(w.rec); err != nil {
		return fmt.Errorf("tfevent: %w", err)
	}
	return nil
}

// appendEventHead appends an Event's wall_time (seconds since the epoch, a double) and step
// (omitted when 0, as proto3 omits defaults).
func appendEventHead(b []byte, t time.Time, step int64) []byte {
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(float64(t.Unix())+float64(t.Nanosecond())/1e9))
	if step != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	return b
}

// appendScalarValue appends a Summary.Value holding v as TensorFlow 2's tf.summary.scalar
// writes it: tag, a tensor {dtype DT_FLOAT, shape [] (scalar), tensor_content: v's 4 bytes,
// little endian}, and metadata naming the "scalars" plugin.
func appendScalarValue(b []byte, tag string, v float32) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType) // tag
	b = protowire.AppendString(b, tag)
	b = protowire.AppendTag(b, 8, protowire.BytesType) // tensor: 10 bytes
	b = protowire.AppendVarint(b, 10)
	b = protowire.AppendTag(b, 1, protowire.VarintType) // dtype
	b = protowire.AppendVarint(b, dtFloat)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // tensor_shape: no dims
	b = protowire.AppendVarint(b, 0)
	b = protowire.AppendTag(b, 4, protowire.BytesType) // tensor_content
	b = protowire.AppendVarint(b, 4)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	return appendPluginMetadata(b, "scalars")
}

// appendTextValue appends a Summary.Value holding text as the text plugin's summary: tag, a
// tensor {dtype DT_STRING, shape [] (scalar), string_val [text]}, metadata naming "text".
func appendTextValue(b []byte, tag, text string) []byte {
	var tensor []byte
	tensor = protowire.AppendTag(tensor, 1, protowire.VarintType) // dtype
	tensor = protowire.AppendVarint(tensor, dtString)
	tensor = protowire.AppendTag(tensor, 2, protowire.BytesType) // tensor_shape: no dims
	tensor = protowire.AppendVarint(tensor, 0)
	tensor = protowire.AppendTag(tensor, 8, protowire.BytesType) // string_val
	tensor = protowire.AppendString(tensor, text)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, tag)
	b = protowire.AppendTag(b, 8, protowire.BytesType)
	b = protowire.AppendBytes(b, tensor)
	return appendPluginMetadata(b, "text")
}

// appendPluginMetadata appends Value.metadata {plugin_data {plugin_name: name}} (the plugins'
// content is empty at their version 0).
func appendPluginMetadata(b []byte, name string) []byte {
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(name))
	b = protowire.AppendTag(b, 9, protowire.BytesType) // metadata
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(n)))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // plugin_data
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // plugin_name
	return protowire.AppendString(b, name)
}

// TensorFlow's DataType values (types.proto).
const (
	dtFloat  = 1
	dtString = 7
)

// Truncate cuts the event file at path back to its records of steps up to step, so that a run
// resumed from step continues it with no step written twice: it keeps the records before the
// first whose event's step is past step, or before the first torn or corrupt one (what a
// process killed while writing leaves; a file torn in its first record is emptied). It
// returns how many records it kept. A file whose first record is whole but not a TFRecord
// holding an Event is not an event file this package wrote: it is left alone and the error
// wraps [ErrCorrupt].
func Truncate(path string, step int64) (kept int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("tfevent: %w", err)
	}
	off := 0
	for off < len(data) {
		ev, n, ok := nextRecord(data[off:])
		var s int64
		if ok {
			s, ok = eventStep(ev)
		}
		if !ok && kept == 0 && !torn(data) {
			return 0, fmt.Errorf("%w: %s: its first record is not a TFRecord holding an Event; not truncated", ErrCorrupt, path)
		}
		if !ok || s > step {
			break
		}
		off += n
		kept++
	}
	if off < len(data) {
		if err := os.Truncate(path, int64(off)); err != nil {
			return kept, fmt.Errorf("tfevent: %w", err)
		}
	}
	return kept, nil
}

// torn reports whether b ends inside its first record, whose length it states with a
// matching checksum, or inside the header Create writes first (what a process killed while
// writing a file's first record leaves).
func torn(b []byte) bool {
	if len(b) < 12 {
		// The file_version event: wall_time (9 bytes) and file_version (2 + 13) bytes.
		head := AppendRecord(nil, make([]byte, 9+2+len(FileVersion)))[:12]
		return bytes.HasPrefix(head, b)
	}
	whole := len(b) >= 16 && binary.LittleEndian.Uint64(b[:8]) <= uint64(len(b)-16)
	return binary.LittleEndian.Uint32(b[8:12]) == MaskedCRC(b[:8]) && !whole
}

// nextRecord returns the data of the TFRecord at the start of b and the record's size, ok
// false when b holds no whole record with matching checksums.
func nextRecord(b []byte) (data []byte, size int, ok bool) {
	if len(b) < 16 || binary.LittleEndian.Uint32(b[8:12]) != MaskedCRC(b[:8]) {
		return nil, 0, false
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > uint64(len(b)-16) {
		return nil, 0, false
	}
	data = b[12 : 12+n]
	if binary.LittleEndian.Uint32(b[12+n:]) != MaskedCRC(data) {
		return nil, 0, false
	}
	return data, int(16 + n), true
}

// eventStep returns the step of an encoded Event, ok false when ev is not a well-formed
// protocol buffer message.
func eventStep(ev []byte) (step int64, ok bool) {
	for len(ev) > 0 {
		num, typ, n := protowire.ConsumeTag(ev)
		if n < 0 {
			return 0, false
		}
		ev = ev[n:]
		if num == 2 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(ev)
			if m < 0 {
				return 0, false
			}
			step = int64(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, ev)
		if m < 0 {
			return 0, false
		}
		ev = ev[m:]
	}
	return step, true
}

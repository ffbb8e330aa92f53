package remote

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// FormatVersion is the version of the rollout message format this package writes and
// the only one it reads. A change to the layout below increments it. Version 2 added
// float64 columns (a batcher rollout's episode returns).
const FormatVersion = 2

// MaxRolloutBytes bounds the uncompressed size of one rollout's columns (1 GiB); larger
// rollouts are refused at encoding and at decoding, before anything that size is allocated.
const MaxRolloutBytes = 1 << 30

// MaxMessageBytes is the largest NATS message (headers and payload) this package sends:
// NATS's default max_payload, 1 MiB. A rollout is split into chunks that fit it.
const MaxMessageBytes = 1 << 20

// chunkDataBytes is the rollout bytes a chunk carries: MaxMessageBytes less room for the
// chunk header (≤ 102 bytes) and the NATS header naming the message ID (≤ 150 bytes).
const chunkDataBytes = MaxMessageBytes - 1024

// maxColumns and maxChunks bound what a header may claim.
const (
	maxColumns = 256
	maxChunks  = 1<<16 - 1
	maxNameLen = 255
	maxEnvLen  = 1024
)

var (
	rolloutMagic = [4]byte{'T', 'R', 'R', 'L'}
	chunkMagic   = [4]byte{'T', 'R', 'R', 'C'}
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
)

// Codec is the compression of a rollout message's columns.
type Codec uint8

// Codecs. The value is what the message header stores; CodecDefault is never stored.
const (
	CodecDefault Codec = 0 // CodecS2
	CodecNone    Codec = 1 // no compression
	CodecS2      Codec = 2 // S2 (Snappy-compatible, GB/s, the default)
	CodecZstd    Codec = 3 // Zstandard at its fastest level: smaller, ~4× slower to encode than S2
)

func (c Codec) String() string {
	switch c {
	case CodecDefault:
		return "default"
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("Codec(%d)", uint8(c))
}

// ParseCodec reads a codec name as [Codec.String] writes it ("" is CodecDefault).
func ParseCodec(s string) (Codec, error) {
	for _, c := range []Codec{CodecDefault, CodecNone, CodecS2, CodecZstd} {
		if s == c.String() || s == "" && c == CodecDefault {
			return c, nil
		}
	}
	return 0, fmt.Errorf("remote: unknown codec %q (want none, s2 or zstd)", s)
}

// DType is a column's element type.
type DType uint8

// Column element types; all are stored little-endian.
const (
	Float32 DType = 1
	Int64   DType = 2
	Float64 DType = 3
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	case Float64:
		return "float64"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// size is the bytes of one element.
func (d DType) size() int {
	if d == Float32 {
		return 4
	}
	return 8
}

// Column is one named column of a rollout: F32 for a float32 column, I64 for an int64 one,
// F64 for a float64 one (exactly one of them is non-nil; an empty float32 column may leave
// all nil).
type Column struct {
	Name string
	F32  []float32
	I64  []int64
	F64  []float64
}

// DType is the column's element type.
func (c *Column) DType() DType {
	switch {
	case c.I64 != nil:
		return Int64
	case c.F64 != nil:
		return Float64
	}
	return Float32
}

// Len is the number of elements.
func (c *Column) Len() int {
	switch {
	case c.I64 != nil:
		return len(c.I64)
	case c.F64 != nil:
		return len(c.F64)
	}
	return len(c.F32)
}

// RolloutMsg is one rollout as it travels from a batcher to the learner: a header and
// named columns (time-major [T×N×…] buffers, episode summaries, anything the learner reads;
// a column's length is free).
type RolloutMsg struct {
	EnvID         string // Gymnasium id of the env that produced it
	PolicyVersion int64  // version of the (oldest) policy that acted in it
	// BatcherID, Session and Seq identify the rollout: Client.PublishRollout sets them to
	// ClientConfig.BatcherID, a random number drawn at Dial and 1, 2, … per Client. The
	// learner de-duplicates on the triple.
	BatcherID string
	Session   uint64
	Seq       uint64
	T, N      int // steps and envs
	ObsDim    int // elements per observation
	ActDim    int // elements per action
	Columns   []Column
}

// Column returns the column called name, or nil.
func (m *RolloutMsg) Column(name string) *Column {
	for i := range m.Columns {
		if m.Columns[i].Name == name {
			return &m.Columns[i]
		}
	}
	return nil
}

// Float32 returns the float32 column called name; it is an error (ErrColumn) when the
// rollout lacks it or holds it as int64.
func (m *RolloutMsg) Float32(name string) ([]float32, error) {
	c := m.Column(name)
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w %q: missing (the rollout has %v)", ErrColumn, name, m.columnNames())
	case c.DType() != Float32:
		return nil, fmt.Errorf("%w %q: holds %v, want float32", ErrColumn, name, c.DType())
	}
	return c.F32, nil
}

// Int64 returns the int64 column called name; it is an error (ErrColumn) when the rollout
// lacks it or holds it as float32.
func (m *RolloutMsg) Int64(name string) ([]int64, error) {
	c := m.Column(name)
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w %q: missing (the rollout has %v)", ErrColumn, name, m.columnNames())
	case c.DType() != Int64:
		return nil, fmt.Errorf("%w %q: holds %v, want int64", ErrColumn, name, c.DType())
	}
	return c.I64, nil
}

// Float64 returns the float64 column called name; it is an error (ErrColumn) when the
// rollout lacks it or holds it with another type.
func (m *RolloutMsg) Float64(name string) ([]float64, error) {
	c := m.Column(name)
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w %q: missing (the rollout has %v)", ErrColumn, name, m.columnNames())
	case c.DType() != Float64:
		return nil, fmt.Errorf("%w %q: holds %v, want float64", ErrColumn, name, c.DType())
	}
	return c.F64, nil
}

func (m *RolloutMsg) columnNames() []string {
	out := make([]string, len(m.Columns))
	for i := range m.Columns {
		out[i] = m.Columns[i].Name
	}
	return out
}

// The encoded rollout ("blob"), all integers little-endian:
//
//	magic "TRRL" | format u16 | codec u8 | flags u8 (0)
//	session u64 | seq u64 | policy version i64 | T u32 | N u32 | obs dim u32 | act dim u32
//	env id (u16 length, bytes) | batcher id (u16 length, bytes)
//	columns u16, each: name (u16 length, bytes) | dtype u8 | elements u64
//	raw length u64 | compressed length u64
//	payload: the columns' elements back to back, in column order, compressed by codec
//	crc32c u32 of every byte before it
//
// A blob is carried by one or more chunks, each one NATS message:
//
//	magic "TRRC" | format u16 | index u16 | count u16 | flags u16 (0)
//	session u64 | seq u64 | blob length u64 | batcher id (u16 length, bytes)
//	the blob's bytes [index·chunkData, …) up to chunkData of them

// codec encodes and decodes rollouts. Its zstd coder is made on first use. Safe for
// concurrent use.
type codec struct {
	chunkData int // blob bytes per chunk
	maxRaw    int // bound on a rollout's uncompressed bytes: MaxRolloutBytes (less in fuzzing)

	zstdOnce sync.Once
	zenc     *zstd.Encoder // set by zstdOnce
	zdec     *zstd.Decoder // set by zstdOnce
	zerr     error         // set by zstdOnce

	raw sync.Pool // *[]byte scratch for uncompressed payloads
}

func newCodec(chunkData int) *codec {
	if chunkData <= 0 {
		chunkData = chunkDataBytes
	}
	return &codec{chunkData: chunkData, maxRaw: MaxRolloutBytes}
}

func (c *codec) zstd() (*zstd.Encoder, *zstd.Decoder, error) {
	c.zstdOnce.Do(func() {
		c.zenc, c.zerr = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if c.zerr != nil {
			return
		}
		c.zdec, c.zerr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(MaxRolloutBytes), zstd.WithDecodeAllCapLimit(true))
	})
	return c.zenc, c.zdec, c.zerr
}

// close releases the zstd coder, if one was made.
func (c *codec) close() {
	c.zstdOnce.Do(func() {}) // no coder after close
	if c.zenc != nil {
		c.zenc.Close()
	}
	if c.zdec != nil {
		c.zdec.Close()
	}
}

// checkHeader validates what encode would write.
func checkHeader(m *RolloutMsg) (rawLen int, err error) {
	if err := checkToken(m.BatcherID); err != nil {
		return 0, fmt.Errorf("remote: rollout batcher id %q: %w", m.BatcherID, err)
	}
	if len(m.EnvID) > maxEnvLen {
		return 0, fmt.Errorf("remote: rollout env id is %d bytes, at most %d", len(m.EnvID), maxEnvLen)
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"T", m.T}, {"N", m.N}, {"ObsDim", m.ObsDim}, {"ActDim", m.ActDim}} {
		if d.v < 0 || d.v > math.MaxUint32 {
			return 0, fmt.Errorf("remote: rollout %s = %d is out of [0, 2^32)", d.name, d.v)
		}
	}
	if len(m.Columns) > maxColumns {
		return 0, fmt.Errorf("remote: rollout has %d columns, at most %d", len(m.Columns), maxColumns)
	}
	seen := make(map[string]bool, len(m.Columns))
	for i := range m.Columns {
		col := &m.Columns[i]
		switch {
		case col.Name == "" || len(col.Name) > maxNameLen:
			return 0, fmt.Errorf("remote: rollout column %d: name of %d bytes, want 1 to %d", i, len(col.Name), maxNameLen)
		case seen[col.Name]:
			return 0, fmt.Errorf("remote: rollout column %q appears twice", col.Name)
		case (col.F32 != nil) && (col.I64 != nil || col.F64 != nil) || col.I64 != nil && col.F64 != nil:
			return 0, fmt.Errorf("remote: rollout column %q sets more than one of F32, I64 and F64; set one", col.Name)
		}
		seen[col.Name] = true
		size := col.DType().size()
		if col.Len() > (MaxRolloutBytes-rawLen)/size {
			return 0, fmt.Errorf("%w: columns up to %q exceed %d bytes", ErrTooLarge, col.Name, MaxRolloutBytes)
		}
		rawLen += size * col.Len()
	}
	return rawLen, nil
}

// encode returns the rollout's blob, compressed with kind (CodecDefault: S2). The blob
// shares no memory with m.
func (c *codec) encode(m *RolloutMsg, kind Codec) ([]byte, error) {
	rawLen, err := checkHeader(m)
	if err != nil {
		return nil, err
	}
	if kind == CodecDefault {
		kind = CodecS2
	}
	if kind != CodecNone && kind != CodecS2 && kind != CodecZstd {
		return nil, fmt.Errorf("remote: encoding a rollout with unknown codec %v", kind)
	}

	// Header.
	hdrLen := 4 + 4 + 8*3 + 4*4 + 2 + len(m.EnvID) + 2 + len(m.BatcherID) + 2 + 8 + 8
	for i := range m.Columns {
		hdrLen += 2 + len(m.Columns[i].Name) + 1 + 8
	}
	bound := rawLen
	if kind == CodecS2 {
		bound = s2.MaxEncodedLen(rawLen)
		if bound < 0 {
			return nil, fmt.Errorf("%w: %d bytes do not fit S2", ErrTooLarge, rawLen)
		}
	}
	blob := make([]byte, 0, hdrLen+bound+4)
	blob = append(blob, rolloutMagic[:]...)
	blob = binary.LittleEndian.AppendUint16(blob, FormatVersion)
	blob = append(blob, byte(kind), 0)
	blob = binary.LittleEndian.AppendUint64(blob, m.Session)
	blob = binary.LittleEndian.AppendUint64(blob, m.Seq)
	blob = binary.LittleEndian.AppendUint64(blob, uint64(m.PolicyVersion))
	for _, v := range []int{m.T, m.N, m.ObsDim, m.ActDim} {
		blob = binary.LittleEndian.AppendUint32(blob, uint32(v))
	}
	blob = appendString(blob, m.EnvID)
	blob = appendString(blob, m.BatcherID)
	blob = binary.LittleEndian.AppendUint16(blob, uint16(len(m.Columns)))
	for i := range m.Columns {
		col := &m.Columns[i]
		blob = appendString(blob, col.Name)
		blob = append(blob, byte(col.DType()))
		blob = binary.LittleEndian.AppendUint64(blob, uint64(col.Len()))
	}
	blob = binary.LittleEndian.AppendUint64(blob, uint64(rawLen))
	compAt := len(blob)
	blob = binary.LittleEndian.AppendUint64(blob, 0) // compressed length, set below

	// Payload.
	var raw []byte
	if kind == CodecNone {
		raw = blob[len(blob) : len(blob)+rawLen]
	} else {
		p, _ := c.raw.Get().(*[]byte)
		if p == nil {
			p = new([]byte)
		}
		if cap(*p) < rawLen {
			*p = make([]byte, rawLen)
		}
		raw = (*p)[:rawLen]
		defer c.raw.Put(p)
	}
	off := 0
	for i := range m.Columns {
		col := &m.Columns[i]
		off += putF32(raw[off:], col.F32)
		off += putI64(raw[off:], col.I64)
		off += putF64(raw[off:], col.F64)
	}
	payloadAt := len(blob)
	switch kind {
	case CodecNone:
		blob = blob[:payloadAt+rawLen]
	case CodecS2:
		enc := s2.Encode(blob[payloadAt:payloadAt+bound], raw)
		blob = blob[:payloadAt+len(enc)]
	case CodecZstd:
		zenc, _, err := c.zstd()
		if err != nil {
			return nil, fmt.Errorf("remote: making the zstd encoder: %w", err)
		}
		blob = zenc.EncodeAll(raw, blob)
	}
	binary.LittleEndian.PutUint64(blob[compAt:], uint64(len(blob)-payloadAt))
	blob = binary.LittleEndian.AppendUint32(blob, crc32.Checksum(blob, castagnoli))
	return blob, nil
}

// littleEndian reports whether this machine stores numbers as the wire does: columns are
// then copied as memory rather than element by element.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// putF32 and putI64 write src little-endian into dst (long enough) and return the bytes
// written; getF32 and getI64 read dst from src (long enough) and return the bytes read.
func putF32(dst []byte, src []float32) int {
	if littleEndian && len(src) > 0 {
		return copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
	}
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return 4 * len(src)
}

func putI64(dst []byte, src []int64) int {
	if littleEndian && len(src) > 0 {
		return copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 8*len(src)))
	}
	for i, v := range src {
		binary.LittleEndian.PutUint64(dst[8*i:], uint64(v))
	}
	return 8 * len(src)
}

func putF64(dst []byte, src []float64) int {
	if littleEndian && len(src) > 0 {
		return copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 8*len(src)))
	}
	for i, v := range src {
		binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(v))
	}
	return 8 * len(src)
}

func getF64(dst []float64, src []byte) int {
	if littleEndian && len(dst) > 0 {
		return copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst)), src)
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
	}
	return 8 * len(dst)
}

func getF32(dst []float32, src []byte) int {
	if littleEndian && len(dst) > 0 {
		return copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), src)
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return 4 * len(dst)
}

func getI64(dst []int64, src []byte) int {
	if littleEndian && len(dst) > 0 {
		return copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 8*len(dst)), src)
	}
	for i := range dst {
		dst[i] = int64(binary.LittleEndian.Uint64(src[8*i:]))
	}
	return 8 * len(dst)
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// reader reads little-endian fields; the first read past the end sets err and the rest
// return zeros.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = fmt.Errorf("%w: truncated at byte %d (want %d more, %d left)", ErrCorrupt, r.off, n, len(r.b)-r.off)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *reader) str() string {
	return string(r.take(int(r.u16())))
}

func (r *reader) magic(want [4]byte, what string) {
	p := r.take(4)
	if r.err == nil && [4]byte(p) != want {
		r.err = fmt.Errorf("%w: starts with %q, not a towerrl %s (%q)", ErrCorrupt, p, what, want[:])
	}
}

func (r *reader) version() {
	if v := r.u16(); r.err == nil && v != FormatVersion {
		r.err = fmt.Errorf("%w: version %d, this build reads version %d (upgrade the older of learner and batcher)",
			ErrFormat, v, FormatVersion)
	}
}

// decode reads a blob that encode wrote. The returned rollout owns its columns. A blob
// that is truncated, fails its checksum or does not decode is an error wrapping ErrCorrupt;
// one of another format version wraps ErrFormat. It never panics and never allocates more
// than the header claims (bounded by MaxRolloutBytes), and only after the checksum holds.
func (c *codec) decode(blob []byte) (RolloutMsg, error) { return c.decodeChecked(blob, nil) }

// colHeader is a column as a blob's header declares it.
type colHeader struct {
	name  string
	dtype DType
	n     int
}

// decodeChecked is decode with check, when not nil, called on the header (the rollout's
// fields, its columns as declared) before anything is decompressed or allocated for the
// payload: its error is returned as it is.
func (c *codec) decodeChecked(blob []byte, check func(m *RolloutMsg, cols []colHeader) error) (RolloutMsg, error) {
	var m RolloutMsg
	r := reader{b: blob}
	r.magic(rolloutMagic, "rollout")
	r.version()
	kind := Codec(r.u8())
	if flags := r.u8(); r.err == nil && flags != 0 {
		return m, fmt.Errorf("%w: flags %#x set, none are defined", ErrCorrupt, flags)
	}
	if r.err == nil && kind != CodecNone && kind != CodecS2 && kind != CodecZstd {
		return m, fmt.Errorf("%w: unknown codec %d", ErrCorrupt, uint8(kind))
	}
	m.Session = r.u64()
	m.Seq = r.u64()
	m.PolicyVersion = int64(r.u64())
	m.T, m.N, m.ObsDim, m.ActDim = int(r.u32()), int(r.u32()), int(r.u32()), int(r.u32())
	m.EnvID = r.str()
	m.BatcherID = r.str()
	ncols := int(r.u16())
	if r.err == nil && ncols > maxColumns {
		return m, fmt.Errorf("%w: %d columns, at most %d", ErrCorrupt, ncols, maxColumns)
	}
	cols := make([]colHeader, 0, ncols)
	sum := 0
	for i := 0; i < ncols && r.err == nil; i++ {
		h := colHeader{name: r.str(), dtype: DType(r.u8())}
		n := r.u64()
		if r.err != nil {
			break
		}
		switch h.dtype {
		case Float32, Int64, Float64:
		default:
			return m, fmt.Errorf("%w: column %q has unknown type %d", ErrCorrupt, h.name, uint8(h.dtype))
		}
		if h.name == "" {
			return m, fmt.Errorf("%w: column %d has no name", ErrCorrupt, i)
		}
		size := h.dtype.size()
		if n > uint64(c.maxRaw-sum)/uint64(size) {
			return m, fmt.Errorf("%w: columns up to %q claim more than %d bytes", ErrTooLarge, h.name, c.maxRaw)
		}
		h.n = int(n)
		sum += size * h.n
		cols = append(cols, h)
	}
	rawLen, compLen := r.u64(), r.u64()
	if r.err != nil {
		return m, r.err
	}
	if rawLen != uint64(sum) {
		return m, fmt.Errorf("%w: header claims %d payload bytes, its columns %d", ErrCorrupt, rawLen, sum)
	}
	if check != nil {
		if err := check(&m, cols); err != nil {
			return m, err
		}
	}
	if left := len(blob) - r.off; left < 4 || compLen != uint64(left-4) {
		return m, fmt.Errorf("%w: header claims %d compressed bytes, %d are there (truncated or padded)", ErrCorrupt, compLen, left-4)
	}
	payload := blob[r.off : len(blob)-4]
	if want, got := binary.LittleEndian.Uint32(blob[len(blob)-4:]), crc32.Checksum(blob[:len(blob)-4], castagnoli); want != got {
		return m, fmt.Errorf("%w: checksum %#08x, computed %#08x", ErrCorrupt, want, got)
	}

	var raw []byte
	switch kind {
	case CodecNone:
		if len(payload) != sum {
			return m, fmt.Errorf("%w: %d uncompressed bytes, want %d", ErrCorrupt, len(payload), sum)
		}
		raw = payload
	case CodecS2:
		n, err := s2.DecodedLen(payload)
		if err != nil || n != sum {
			return m, fmt.Errorf("%w: S2 payload decodes to %d bytes (%v), want %d", ErrCorrupt, n, err, sum)
		}
		raw, err = s2.Decode(make([]byte, sum), payload)
		if err != nil {
			return m, fmt.Errorf("%w: S2: %v", ErrCorrupt, err)
		}
	case CodecZstd:
		_, zdec, err := c.zstd()
		if err != nil {
			return m, fmt.Errorf("remote: making the zstd decoder: %w", err)
		}
		// Allocate only for a frame that declares the size the header claims (encode's
		// frames always declare it).
		var fh zstd.Header
		if err := fh.Decode(payload); err != nil || !fh.HasFCS || fh.FrameContentSize != uint64(sum) {
			return m, fmt.Errorf("%w: zstd frame declares %d bytes (%v), want %d", ErrCorrupt, fh.FrameContentSize, err, sum)
		}
		// Nor a history window larger than the content needs.
		if !fh.SingleSegment && fh.WindowSize > uint64(max(sum, 1<<20)) {
			return m, fmt.Errorf("%w: zstd window of %d bytes for %d bytes of content", ErrCorrupt, fh.WindowSize, sum)
		}
		raw, err = zdec.DecodeAll(payload, make([]byte, 0, sum))
		if err != nil {
			return m, fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
		}
	}
	if len(raw) != sum {
		return m, fmt.Errorf("%w: payload decodes to %d bytes, want %d", ErrCorrupt, len(raw), sum)
	}
	if err := checkToken(m.BatcherID); err != nil {
		return m, fmt.Errorf("%w: batcher id %q: %v", ErrCorrupt, m.BatcherID, err)
	}

	m.Columns = make([]Column, len(cols))
	seen := make(map[string]bool, len(cols))
	off := 0
	for i, h := range cols {
		if seen[h.name] {
			return m, fmt.Errorf("%w: column %q appears twice", ErrCorrupt, h.name)
		}
		seen[h.name] = true
		col := Column{Name: h.name}
		switch h.dtype {
		case Float32:
			col.F32 = make([]float32, h.n)
			off += getF32(col.F32, raw[off:])
		case Int64:
			col.I64 = make([]int64, h.n)
			off += getI64(col.I64, raw[off:])
		case Float64:
			col.F64 = make([]float64, h.n)
			off += getF64(col.F64, raw[off:])
		}
		m.Columns[i] = col
	}
	return m, nil
}

// chunkHeader identifies a chunk's rollout and its place in it.
type chunkHeader struct {
	batcher string
	session uint64
	seq     uint64
	index   int
	count   int
	blobLen int
}

// key is the rollout the chunk belongs to.
func (h *chunkHeader) key() rolloutKey {
	return rolloutKey{batcher: h.batcher, session: h.session, seq: h.seq}
}

// message encodes m and splits it into chunks: the NATS message payloads of the rollout.
func (c *codec) message(m *RolloutMsg, kind Codec) ([][]byte, error) {
	blob, err := c.encode(m, kind)
	if err != nil {
		return nil, err
	}
	return c.chunks(m, blob)
}

// chunks splits a blob into chunk payloads of at most chunkData blob bytes each.
func (c *codec) chunks(m *RolloutMsg, blob []byte) ([][]byte, error) {
	count := (len(blob) + c.chunkData - 1) / c.chunkData
	if count > maxChunks {
		return nil, fmt.Errorf("%w: %d bytes make %d chunks, at most %d", ErrTooLarge, len(blob), count, maxChunks)
	}
	out := make([][]byte, count)
	for i := range out {
		data := blob[i*c.chunkData : min((i+1)*c.chunkData, len(blob))]
		b := make([]byte, 0, 38+len(m.BatcherID)+len(data))
		b = append(b, chunkMagic[:]...)
		b = binary.LittleEndian.AppendUint16(b, FormatVersion)
		b = binary.LittleEndian.AppendUint16(b, uint16(i))
		b = binary.LittleEndian.AppendUint16(b, uint16(count))
		b = binary.LittleEndian.AppendUint16(b, 0)
		b = binary.LittleEndian.AppendUint64(b, m.Session)
		b = binary.LittleEndian.AppendUint64(b, m.Seq)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(blob)))
		b = appendString(b, m.BatcherID)
		out[i] = append(b, data...)
	}
	return out, nil
}

// parseChunk reads a chunk's header; data aliases b.
func parseChunk(b []byte) (h chunkHeader, data []byte, err error) {
	r := reader{b: b}
	r.magic(chunkMagic, "rollout chunk")
	r.version()
	h.index, h.count = int(r.u16()), int(r.u16())
	flags := r.u16()
	h.session, h.seq = r.u64(), r.u64()
	blobLen := r.u64()
	h.batcher = r.str()
	switch {
	case r.err != nil:
		return h, nil, r.err
	case flags != 0:
		return h, nil, fmt.Errorf("%w: chunk flags %#x set, none are defined", ErrCorrupt, flags)
	case h.count == 0 || h.index >= h.count:
		return h, nil, fmt.Errorf("%w: chunk %d of %d", ErrCorrupt, h.index, h.count)
	case blobLen > uint64(h.count)*MaxMessageBytes || blobLen < uint64(h.count):
		return h, nil, fmt.Errorf("%w: %d chunks cannot carry %d bytes", ErrCorrupt, h.count, blobLen)
	}
	if err := checkToken(h.batcher); err != nil {
		return h, nil, fmt.Errorf("%w: batcher id %q: %v", ErrCorrupt, h.batcher, err)
	}
	h.blobLen = int(blobLen)
	return h, b[r.off:], nil
}

// assembly gathers the chunks of one rollout; H is whatever must be kept per chunk (the
// JetStream message, to acknowledge it).
type assembly[H any] struct {
	count, blobLen int
	parts          [][]byte
	handles        []H
	got, bytes     int
}

// add stores chunk h; it returns the handle it replaced (a redelivered copy) and whether
// there was one. A chunk that disagrees with the first one on count or length, or would
// make the parts longer than the rollout, is an error and is not stored.
func (a *assembly[H]) add(h chunkHeader, data []byte, handle H) (old H, replaced bool, err error) {
	if a.parts == nil {
		a.count, a.blobLen = h.count, h.blobLen
		a.parts = make([][]byte, h.count)
		a.handles = make([]H, h.count)
	}
	if h.count != a.count || h.blobLen != a.blobLen {
		return old, false, fmt.Errorf("%w: chunk %d of rollout %v claims %d chunks of a %d-byte rollout, the first claimed %d and %d",
			ErrCorrupt, h.index, h.key(), h.count, h.blobLen, a.count, a.blobLen)
	}
	bytes := a.bytes + len(data) - len(a.parts[h.index])
	if bytes > a.blobLen {
		return old, false, fmt.Errorf("%w: chunks of rollout %v carry more than its %d bytes", ErrCorrupt, h.key(), a.blobLen)
	}
	if a.parts[h.index] != nil {
		old, replaced = a.handles[h.index], true
	} else {
		a.got++
	}
	a.parts[h.index], a.handles[h.index], a.bytes = data, handle, bytes
	return old, replaced, nil
}

func (a *assembly[H]) complete() bool { return a.parts != nil && a.got == a.count }

// blob joins the parts of a complete assembly.
func (a *assembly[H]) blob() ([]byte, error) {
	if a.bytes != a.blobLen {
		return nil, fmt.Errorf("%w: chunks carry %d bytes, the rollout has %d", ErrCorrupt, a.bytes, a.blobLen)
	}
	if len(a.parts) == 1 {
		return a.parts[0], nil
	}
	b := make([]byte, 0, a.blobLen)
	for _, p := range a.parts {
		b = append(b, p...)
	}
	return b, nil
}

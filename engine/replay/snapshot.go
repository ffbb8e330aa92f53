package replay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// ErrSnapshot is wrapped by ReadFrom's errors about a snapshot that is corrupt, truncated or
// of another buffer's shape.
var ErrSnapshot = errors.New("replay: bad snapshot")

// The snapshot format, version 1, all integers little-endian:
//
//	header   8 bytes  magic "TWRLRPLY"
//	         uint32   format version (1), uint32 flags (0)
//	         uint64 × 6  capacity, obs dim, act dim, position, stored rows, transitions added
//	body     the stored rows of obs, next obs, actions, rewards, terminated, truncated, in
//	         that order, each column's values as float32 bits, row-major
//	trailer  uint32   CRC-32C (Castagnoli) of header and body
const (
	snapMagic   = "TWRLRPLY"
	snapVersion = 1
	snapHeader  = 8 + 4 + 4 + 6*8
	stageBytes  = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotSize is the number of bytes WriteTo writes now.
func (b *Buffer) SnapshotSize() int64 {
	return snapHeader + int64(b.size)*b.cfg.rowBytes() + 4
}

// columns are the stored rows of each column, in snapshot order.
func (b *Buffer) columns() [][]float32 {
	n, od, ad := b.size, b.cfg.ObsDim, b.cfg.ActDim
	return [][]float32{b.obs[:n*od], b.next[:n*od], b.act[:n*ad], b.rew[:n], b.term[:n], b.trnc[:n]}
}

// WriteTo writes the buffer's snapshot (SnapshotSize bytes) to w.
func (b *Buffer) WriteTo(w io.Writer) (int64, error) {
	crc := crc32.New(castagnoli)
	out := &countWriter{w: io.MultiWriter(w, crc)}
	var h [snapHeader]byte
	copy(h[:], snapMagic)
	binary.LittleEndian.PutUint32(h[8:], snapVersion)
	for i, v := range []int64{int64(b.cfg.Capacity), int64(b.cfg.ObsDim), int64(b.cfg.ActDim), int64(b.pos), int64(b.size), b.added} {
		binary.LittleEndian.PutUint64(h[16+8*i:], uint64(v))
	}
	if _, err := out.Write(h[:]); err != nil {
		return out.n, fmt.Errorf("replay: writing the snapshot: %w", err)
	}
	stage := make([]byte, stageBytes)
	for _, col := range b.columns() {
		for len(col) > 0 {
			k := min(len(col), stageBytes/4)
			for i, v := range col[:k] {
				binary.LittleEndian.PutUint32(stage[4*i:], math.Float32bits(v))
			}
			if _, err := out.Write(stage[:4*k]); err != nil {
				return out.n, fmt.Errorf("replay: writing the snapshot: %w", err)
			}
			col = col[k:]
		}
	}
	binary.LittleEndian.PutUint32(stage, crc.Sum32())
	n, err := w.Write(stage[:4])
	if err != nil {
		return out.n + int64(n), fmt.Errorf("replay: writing the snapshot: %w", err)
	}
	return out.n + int64(n), nil
}

// ReadFrom restores a snapshot WriteTo wrote, into a buffer of the same capacity, observation
// and action sizes. It reads exactly the snapshot's bytes. On error the buffer is left empty.
func (b *Buffer) ReadFrom(r io.Reader) (int64, error) {
	crc := crc32.New(castagnoli)
	in := &countReader{r: r, h: crc}
	n, err := b.readFrom(in, crc)
	if err != nil {
		b.pos, b.size, b.added = 0, 0, 0
	}
	return n + in.n, err
}

func (b *Buffer) readFrom(in *countReader, crc hash.Hash32) (int64, error) {
	var h [snapHeader]byte
	if err := in.full(h[:], "header"); err != nil {
		return 0, err
	}
	if string(h[:8]) != snapMagic {
		return 0, fmt.Errorf("%w: not a replay snapshot (magic %q)", ErrSnapshot, h[:8])
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != snapVersion {
		return 0, fmt.Errorf("%w: format version %d, this build reads %d", ErrSnapshot, v, snapVersion)
	}
	var f [6]uint64
	for i := range f {
		f[i] = binary.LittleEndian.Uint64(h[16+8*i:])
	}
	c := b.cfg
	if f[0] != uint64(c.Capacity) || f[1] != uint64(c.ObsDim) || f[2] != uint64(c.ActDim) {
		return 0, fmt.Errorf("%w: a buffer of capacity %d with %d observation and %d action values, this one is %d, %d, %d",
			ErrSnapshot, f[0], f[1], f[2], c.Capacity, c.ObsDim, c.ActDim)
	}
	if f[4] > f[0] || f[3] >= f[0] || (f[4] < f[0] && f[3] != f[4]) || f[5] < f[4] || f[5] > math.MaxInt64 {
		return 0, fmt.Errorf("%w: position %d, %d rows stored and %d added in a buffer of %d", ErrSnapshot, f[3], f[4], f[5], f[0])
	}
	b.pos, b.size, b.added = int(f[3]), int(f[4]), int64(f[5])
	stage := make([]byte, stageBytes)
	for _, col := range b.columns() {
		for len(col) > 0 {
			k := min(len(col), stageBytes/4)
			if err := in.full(stage[:4*k], "body"); err != nil {
				return 0, err
			}
			for i := range col[:k] {
				col[i] = math.Float32frombits(binary.LittleEndian.Uint32(stage[4*i:]))
			}
			col = col[k:]
		}
	}
	want := crc.Sum32()
	in.h = nil
	if err := in.full(stage[:4], "checksum"); err != nil {
		return 0, err
	}
	if got := binary.LittleEndian.Uint32(stage); got != want {
		return 0, fmt.Errorf("%w: checksum %08x, the data's is %08x", ErrSnapshot, got, want)
	}
	return 0, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// countReader reads whole parts of a snapshot, counting and hashing them.
type countReader struct {
	r io.Reader
	h hash.Hash32 // nil once the hashed part is read
	n int64
}

func (c *countReader) full(p []byte, what string) error {
	n, err := io.ReadFull(c.r, p)
	c.n += int64(n)
	if c.h != nil {
		c.h.Write(p[:n])
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated in its %s", ErrSnapshot, what)
	}
	if err != nil {
		return fmt.Errorf("replay: reading the snapshot: %w", err)
	}
	return nil
}

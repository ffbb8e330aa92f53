package models

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"slices"

	"github.com/towerrl/towerrl/internal/atomicfile"
)

// CheckpointVersion is the format version SaveCheckpoint writes and the only one
// LoadCheckpoint reads.
const CheckpointVersion = 1

// checkpointMagic opens every checkpoint file.
const checkpointMagic = "TWRLCKPT"

const (
	ckHeaderLen  = 8 + 4 + 4 + 8 // magic, version, flags, body length
	ckTrailerLen = 4             // CRC-32C
	ckMaxRank    = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Tensor is one named float32 tensor of a Checkpoint, row-major.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Checkpoint is what survives a process restart: named float32 tensors (parameters and
// optimiser slots) and named scalars and byte strings (step counts, RNG states). See the
// package documentation for the file format and the naming conventions.
type Checkpoint struct {
	// Tensors keep their insertion order; names are unique (Put replaces).
	Tensors []Tensor
	// Ints, Floats and Bytes hold scalar metadata, e.g. Ints["step"], Ints["iteration"],
	// Bytes["rng/batcher"] (a math/rand/v2 PCG's MarshalBinary).
	Ints   map[string]int64
	Floats map[string]float64
	Bytes  map[string][]byte
}

// Put stores a copy of data under name with the given shape, replacing a tensor of the same
// name. It fails when the shape does not hold len(data) values.
func (c *Checkpoint) Put(name string, shape []int, data []float32) error {
	if product(shape) != len(data) || slices.ContainsFunc(shape, func(d int) bool { return d < 0 }) {
		return fmt.Errorf("%w: tensor %q: shape %v for %d values", ErrShape, name, shape, len(data))
	}
	t := Tensor{Name: name, Shape: slices.Clone(shape), Data: slices.Clone(data)}
	for i := range c.Tensors {
		if c.Tensors[i].Name == name {
			c.Tensors[i] = t
			return nil
		}
	}
	c.Tensors = append(c.Tensors, t)
	return nil
}

// Tensor finds the named tensor. Its Data is the checkpoint's, not a copy.
func (c *Checkpoint) Tensor(name string) (Tensor, bool) {
	for _, t := range c.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Store puts every parameter into c under its own name.
func (p *Params) Store(c *Checkpoint) {
	for i, name := range p.names {
		// Cannot fail: shapes and data come from p.
		_ = c.Put(name, p.shapes[i], p.data[p.offs[i]:p.offs[i+1]])
	}
}

// Load copies every parameter from c (by name) into p's memory, in place, so graphs built
// over p see the restored values. It fails, changing nothing, when a parameter is missing or
// has another shape.
func (p *Params) Load(c *Checkpoint) error {
	src := make([][]float32, len(p.names))
	for i, name := range p.names {
		t, ok := c.Tensor(name)
		if !ok {
			return fmt.Errorf("%w: no tensor for parameter %q", ErrCheckpoint, name)
		}
		if !slices.Equal(t.Shape, p.shapes[i]) || len(t.Data) != product(p.shapes[i]) {
			return fmt.Errorf("%w: parameter %q has shape %v in the checkpoint, %v in the model", ErrCheckpoint, name, t.Shape, p.shapes[i])
		}
		src[i] = t.Data
	}
	for i := range p.names {
		copy(p.data[p.offs[i]:p.offs[i+1]], src[i])
	}
	return nil
}

// MarshalBinary encodes c in the checkpoint format (see the package documentation).
func (c *Checkpoint) MarshalBinary() ([]byte, error) {
	size := ckHeaderLen + ckTrailerLen + 16
	seen := map[string]bool{}
	for _, t := range c.Tensors {
		if seen[t.Name] {
			return nil, fmt.Errorf("%w: two tensors named %q", ErrCheckpoint, t.Name)
		}
		seen[t.Name] = true
		if len(t.Shape) > ckMaxRank || product(t.Shape) != len(t.Data) || slices.ContainsFunc(t.Shape, func(d int) bool { return d < 0 }) {
			return nil, fmt.Errorf("%w: tensor %q: shape %v for %d values", ErrShape, t.Name, t.Shape, len(t.Data))
		}
		size += 8 + len(t.Name) + 8*len(t.Shape) + 4*len(t.Data)
	}
	for k, v := range c.Bytes {
		size += 12 + len(k) + len(v)
	}
	size += (12 + 16) * (len(c.Ints) + len(c.Floats))
	b := make([]byte, ckHeaderLen, size)
	copy(b, checkpointMagic)
	binary.LittleEndian.PutUint32(b[8:], CheckpointVersion)
	str := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Tensors)))
	for _, t := range c.Tensors {
		str(t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Shape)))
		for _, d := range t.Shape {
			b = binary.LittleEndian.AppendUint64(b, uint64(d))
		}
		for _, v := range t.Data {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Ints)))
	for _, k := range slices.Sorted(maps.Keys(c.Ints)) {
		str(k)
		b = binary.LittleEndian.AppendUint64(b, uint64(c.Ints[k]))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Floats)))
	for _, k := range slices.Sorted(maps.Keys(c.Floats)) {
		str(k)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.Floats[k]))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(c.Bytes)))
	for _, k := range slices.Sorted(maps.Keys(c.Bytes)) {
		str(k)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(c.Bytes[k])))
		b = append(b, c.Bytes[k]...)
	}
	binary.LittleEndian.PutUint64(b[16:], uint64(len(b)-ckHeaderLen))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// ckReader is a bounds-checked cursor over a checkpoint body.
type ckReader struct {
	b   []byte
	err error
}

func (r *ckReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrCheckpoint}, args...)...)
	}
}

func (r *ckReader) take(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("%s needs %d bytes, %d left", what, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *ckReader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *ckReader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *ckReader) str(what string) string { return string(r.take(uint64(r.u32(what)), what)) }

// count reads a record count, each record at least min bytes long.
func (r *ckReader) count(what string, min uint64) int {
	n := uint64(r.u32(what))
	if r.err == nil && n*min > uint64(len(r.b)) {
		r.fail("%d %s cannot fit in %d bytes", n, what, len(r.b))
		return 0
	}
	return int(n)
}

// UnmarshalBinary decodes a checkpoint. A wrong magic, an unknown version, a truncated file, a
// checksum mismatch or an inconsistent record is an error wrapping ErrCheckpoint.
func (c *Checkpoint) UnmarshalBinary(b []byte) error {
	if len(b) < ckHeaderLen+ckTrailerLen || string(b[:8]) != checkpointMagic {
		if len(b) >= 8 && string(b[:8]) == checkpointMagic {
			return fmt.Errorf("%w: truncated: %d bytes, shorter than the header", ErrCheckpoint, len(b))
		}
		return fmt.Errorf("%w: not a towerrl checkpoint (no %q magic)", ErrCheckpoint, checkpointMagic)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != CheckpointVersion {
		return fmt.Errorf("%w: format version %d; this build reads version %d", ErrCheckpoint, v, CheckpointVersion)
	}
	body := binary.LittleEndian.Uint64(b[16:])
	if have := uint64(len(b) - ckHeaderLen - ckTrailerLen); body != have {
		return fmt.Errorf("%w: truncated or padded: the header announces %d body bytes, the file holds %d", ErrCheckpoint, body, have)
	}
	end := len(b) - ckTrailerLen
	if want, got := binary.LittleEndian.Uint32(b[end:]), crc32.Checksum(b[:end], castagnoli); want != got {
		return fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x): the file is corrupt", ErrCheckpoint, want, got)
	}
	r := &ckReader{b: b[ckHeaderLen:end]}
	out := Checkpoint{}
	seen := map[string]bool{}
	n := r.count("tensors", 8)
	for range n {
		name := r.str("tensor name")
		rank := r.u32("tensor rank")
		if rank > ckMaxRank {
			r.fail("tensor %q has rank %d", name, rank)
		}
		shape := make([]int, 0, min(rank, ckMaxRank))
		elems := uint64(1)
		for range min(rank, ckMaxRank) {
			d := r.u64("tensor dimension")
			hi, lo := bits.Mul64(elems, d)
			if r.err == nil && (hi != 0 || lo > uint64(len(r.b)) || d > math.MaxInt32) {
				r.fail("tensor %q: dimension %d makes it larger than the file", name, d)
			}
			elems = lo
			shape = append(shape, int(d))
		}
		raw := r.take(4*elems, "tensor data")
		if r.err != nil {
			return r.err
		}
		if seen[name] {
			return fmt.Errorf("%w: two tensors named %q", ErrCheckpoint, name)
		}
		seen[name] = true
		data := make([]float32, elems)
		for i := range data {
			data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		out.Tensors = append(out.Tensors, Tensor{Name: name, Shape: shape, Data: data})
	}
	if n := r.count("ints", 12); n > 0 {
		out.Ints = make(map[string]int64, n)
		for range n {
			k := r.str("int name")
			out.Ints[k] = int64(r.u64("int value"))
		}
	}
	if n := r.count("floats", 12); n > 0 {
		out.Floats = make(map[string]float64, n)
		for range n {
			k := r.str("float name")
			out.Floats[k] = math.Float64frombits(r.u64("float value"))
		}
	}
	if n := r.count("byte strings", 12); n > 0 {
		out.Bytes = make(map[string][]byte, n)
		for range n {
			k := r.str("bytes name")
			out.Bytes[k] = slices.Clone(r.take(r.u64("bytes length"), "bytes value"))
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the last record", len(r.b))
	}
	if r.err != nil {
		return r.err
	}
	*c = out
	return nil
}

// SaveCheckpoint writes c to path atomically (internal/atomicfile): into a temporary file in
// the same directory, synced, then renamed over path, so a crash leaves either the old file or
// the new one. A ctx cancelled before the rename leaves the old file too.
func SaveCheckpoint(ctx context.Context, path string, c *Checkpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := c.MarshalBinary()
	if err != nil {
		return err
	}
	err = atomicfile.Write(path, 0o644, func(w io.Writer) error {
		if _, err := w.Write(b); err != nil {
			return err
		}
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("models: saving checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint reads a checkpoint written by SaveCheckpoint.
func LoadCheckpoint(ctx context.Context, path string) (*Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("models: loading checkpoint: %w", err)
	}
	c := &Checkpoint{}
	if err := c.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("loading checkpoint %q: %w", path, err)
	}
	return c, nil
}

package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleRollout is a CartPole-shaped rollout (obs dim obsDim, one discrete action) with
// the batcher's columns, filled from seed.
func sampleRollout(t, n, obsDim int, seed uint64) RolloutMsg {
	r := rand.New(rand.NewPCG(seed, 7))
	f := func(k int, gen func() float32) []float32 {
		s := make([]float32, k)
		for i := range s {
			s[i] = gen()
		}
		return s
	}
	normal := func() float32 { return float32(r.NormFloat64()) }
	bit := func() float32 {
		if r.IntN(40) == 0 {
			return 1
		}
		return 0
	}
	version := make([]int64, t*n)
	for i := range version {
		version[i] = 7 + int64(i/(t*n/2+1))
	}
	return RolloutMsg{
		EnvID: "CartPole-v1", PolicyVersion: 7, BatcherID: "b-1", Session: 0xfeedface12345678, Seq: seed + 1,
		T: t, N: n, ObsDim: obsDim, ActDim: 1,
		Columns: []Column{
			{Name: "obs", F32: f(t*n*obsDim, normal)},
			{Name: "actions", F32: f(t*n, func() float32 { return float32(r.IntN(2)) })},
			{Name: "rewards", F32: f(t*n, func() float32 { return 1 })},
			{Name: "terminated", F32: f(t*n, bit)},
			{Name: "truncated", F32: f(t*n, bit)},
			{Name: "final_obs", F32: f(t*n*obsDim, normal)},
			{Name: "logp", F32: f(t*n, normal)},
			{Name: "values", F32: f(t*n, normal)},
			{Name: "version", I64: version},
			{Name: "last_obs", F32: f(n*obsDim, normal)},
			{Name: "episode_returns", F32: []float32{}},
			{Name: "special", F32: []float32{float32(math.Inf(1)), float32(math.NaN()), -0, math.MaxFloat32}},
			{Name: "int_extremes", I64: []int64{math.MinInt64, -1, 0, math.MaxInt64}},
			{Name: "episode_return", F64: []float64{math.Inf(-1), math.NaN(), math.Copysign(0, -1), math.MaxFloat64, 500.25}},
		},
	}
}

// diffRollout compares rollouts, columns bit for bit (NaN, -0), fast on large columns.
func diffRollout(want, got RolloutMsg) string {
	wc, gc := want.Columns, got.Columns
	want.Columns, got.Columns = nil, nil
	if d := cmp.Diff(want, got); d != "" {
		return d
	}
	if len(wc) != len(gc) {
		return fmt.Sprintf("%d columns, want %d", len(gc), len(wc))
	}
	for i := range wc {
		w, g := &wc[i], &gc[i]
		if w.Name != g.Name || w.DType() != g.DType() || w.Len() != g.Len() {
			return fmt.Sprintf("column %d is %q %v[%d], want %q %v[%d]", i, g.Name, g.DType(), g.Len(), w.Name, w.DType(), w.Len())
		}
		for j := range w.F32 {
			if math.Float32bits(w.F32[j]) != math.Float32bits(g.F32[j]) {
				return fmt.Sprintf("column %q[%d] = %v, want %v", w.Name, j, g.F32[j], w.F32[j])
			}
		}
		for j := range w.F64 {
			if math.Float64bits(w.F64[j]) != math.Float64bits(g.F64[j]) {
				return fmt.Sprintf("column %q[%d] = %v, want %v", w.Name, j, g.F64[j], w.F64[j])
			}
		}
		for j := range w.I64 {
			if w.I64[j] != g.I64[j] {
				return fmt.Sprintf("column %q[%d] = %v, want %v", w.Name, j, g.I64[j], w.I64[j])
			}
		}
	}
	return ""
}

// roundTrip encodes m with kind, splits, reassembles from the chunks in the given order
// and decodes.
func roundTrip(t *testing.T, c *codec, m RolloutMsg, kind Codec, order func(n int) []int) (RolloutMsg, [][]byte) {
	t.Helper()
	chunks, err := c.message(&m, kind)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var a assembly[int]
	idx := make([]int, len(chunks))
	for i := range idx {
		idx[i] = i
	}
	if order != nil {
		idx = order(len(chunks))
	}
	for _, i := range idx {
		h, data, err := parseChunk(chunks[i])
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if h.key() != (rolloutKey{m.BatcherID, m.Session, m.Seq}) || h.index != i || h.count != len(chunks) {
			t.Fatalf("chunk %d header %+v", i, h)
		}
		if _, _, err := a.add(h, data, i); err != nil {
			t.Fatalf("add chunk %d: %v", i, err)
		}
	}
	if !a.complete() {
		t.Fatalf("assembly incomplete after %d chunks", len(chunks))
	}
	joined, err := a.blob()
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.decode(joined)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return got, chunks
}

func TestRoundTrip(t *testing.T) {
	c := newCodec(0)
	defer c.close()
	reverse := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = n - 1 - i
		}
		return s
	}
	for _, tc := range []struct {
		name       string
		m          RolloutMsg
		kind       Codec
		order      func(int) []int
		wantChunks int
	}{
		{"cartpole s2", sampleRollout(128, 64, 4, 1), CodecDefault, nil, 1},
		{"cartpole none", sampleRollout(128, 64, 4, 2), CodecNone, nil, 1},
		{"cartpole zstd", sampleRollout(128, 64, 4, 3), CodecZstd, nil, 1},
		// 128×512 envs × 8 floats, twice, of noise: 4 MiB (6 MiB in all) that compress little.
		{"4MiB none reversed", sampleRollout(128, 512, 8, 4), CodecNone, reverse, 7},
		{"4MiB s2", sampleRollout(128, 512, 8, 5), CodecS2, nil, 0},
		{"4MiB zstd reversed", sampleRollout(128, 512, 8, 6), CodecZstd, reverse, 0},
		{"no columns", RolloutMsg{BatcherID: "x", EnvID: "Pendulum-v1", PolicyVersion: -3}, CodecS2, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, chunks := roundTrip(t, c, tc.m, tc.kind, tc.order)
			if d := diffRollout(tc.m, got); d != "" {
				t.Errorf("decoded rollout differs (-sent +got):\n%s", d)
			}
			if tc.wantChunks > 0 && len(chunks) != tc.wantChunks {
				t.Errorf("%d chunks, want %d", len(chunks), tc.wantChunks)
			}
			for i, ch := range chunks {
				if len(ch) > MaxMessageBytes-512 {
					t.Errorf("chunk %d is %d bytes, leaves no room for NATS headers under %d", i, len(ch), MaxMessageBytes)
				}
			}
			if raw := rawBytes(&tc.m); raw > 2*MaxMessageBytes && len(chunks) < 2 {
				t.Errorf("%d raw bytes fit one chunk: test data compressed unexpectedly", raw)
			}
		})
	}
}

// TestRoundTripSmallChunks splits a CartPole rollout into many chunks and reassembles them
// with a copy of one chunk arriving twice (a redelivery).
func TestRoundTripSmallChunks(t *testing.T) {
	c := newCodec(4096)
	m := sampleRollout(16, 8, 4, 9)
	chunks, err := c.message(&m, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	var a assembly[int]
	for i := len(chunks) - 1; i >= 0; i-- {
		h, data, err := parseChunk(chunks[i])
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.add(h, data, i); err != nil {
			t.Fatal(err)
		}
		if i == 1 { // chunk 1 again
			old, replaced, err := a.add(h, data, 100)
			if err != nil || !replaced || old != 1 {
				t.Fatalf("re-adding chunk 1: old %d replaced %v err %v", old, replaced, err)
			}
		}
	}
	joined, err := a.blob()
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.decode(joined)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffRollout(m, got); d != "" {
		t.Errorf("(-sent +got):\n%s", d)
	}
}

// withCRC replaces a blob's trailing checksum with the right one, so that a test reaches
// the checks behind it.
func withCRC(b []byte) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
	return b
}

func TestDecodeCorrupt(t *testing.T) {
	c := newCodec(0)
	defer c.close()
	m := sampleRollout(4, 3, 4, 11)
	good, err := c.encode(&m, CodecS2)
	if err != nil {
		t.Fatal(err)
	}
	zgood, err := c.encode(&m, CodecZstd)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(b []byte, f func([]byte)) []byte {
		b = append([]byte(nil), b...)
		f(b)
		return b
	}
	// Offsets in the header (see wire.go).
	const (
		offVersion = 4
		offCodec   = 6
		offFlags   = 7
		offT       = 32
	)
	ncolsAt := 48 + 2 + len(m.EnvID) + 2 + len(m.BatcherID)
	for _, tc := range []struct {
		name string
		blob []byte
		want error
	}{
		{"empty", nil, ErrCorrupt},
		{"magic only", good[:4], ErrCorrupt},
		{"not a rollout", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n...................................."), ErrCorrupt},
		{"version 3", edit(good, func(b []byte) { b[offVersion] = 3 }), ErrFormat},
		{"unknown codec", withCRC(edit(good, func(b []byte) { b[offCodec] = 9 })), ErrCorrupt},
		{"flags", withCRC(edit(good, func(b []byte) { b[offFlags] = 1 })), ErrCorrupt},
		{"header bit flip", edit(good, func(b []byte) { b[offT] ^= 0x10 }), ErrCorrupt},
		{"payload bit flip", edit(good, func(b []byte) { b[len(b)-10] ^= 1 }), ErrCorrupt},
		{"checksum flip", edit(good, func(b []byte) { b[len(b)-1] ^= 0xff }), ErrCorrupt},
		{"padded", append(append([]byte(nil), good...), 0), ErrCorrupt},
		{"s2 payload garbage", withCRC(edit(good, func(b []byte) {
			for i := len(b) - 40; i < len(b)-4; i++ {
				b[i] = 0xff
			}
		})), ErrCorrupt},
		{"zstd payload garbage", withCRC(edit(zgood, func(b []byte) {
			for i := len(b) - 30; i < len(b)-4; i++ {
				b[i] ^= 0x5a
			}
		})), ErrCorrupt},
		{"too many columns", withCRC(edit(good, func(b []byte) { binary.LittleEndian.PutUint16(b[ncolsAt:], 60000) })), ErrCorrupt},
		{"huge column", withCRC(edit(good, func(b []byte) {
			at := ncolsAt + 2 + 2 + len("obs") + 1
			binary.LittleEndian.PutUint64(b[at:], 1<<40)
		})), ErrTooLarge},
		{"column length off by one", withCRC(edit(good, func(b []byte) {
			at := ncolsAt + 2 + 2 + len("obs") + 1
			binary.LittleEndian.PutUint64(b[at:], uint64(len(m.Columns[0].F32)+1))
		})), ErrCorrupt},
		{"unknown dtype", withCRC(edit(good, func(b []byte) { b[ncolsAt+2+2+len("obs")] = 7 })), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.decode(tc.blob)
			if !errors.Is(err, tc.want) {
				t.Fatalf("decode: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("every truncation", func(t *testing.T) {
		for n := range len(good) {
			if _, err := c.decode(good[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode of the first %d of %d bytes: %v, want ErrCorrupt", n, len(good), err)
			}
		}
	})
}

func TestParseChunkCorrupt(t *testing.T) {
	c := newCodec(64)
	m := sampleRollout(2, 2, 4, 3)
	chunks, err := c.message(&m, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func([]byte)) []byte {
		b := append([]byte(nil), chunks[1]...)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name  string
		chunk []byte
	}{
		{"empty", nil},
		{"short", chunks[0][:20]},
		{"magic", edit(func(b []byte) { b[0] = 'X' })},
		{"index past count", edit(func(b []byte) { binary.LittleEndian.PutUint16(b[6:], 60000) })},
		{"zero count", edit(func(b []byte) { binary.LittleEndian.PutUint16(b[8:], 0) })},
		{"flags", edit(func(b []byte) { b[10] = 1 })},
		{"blob longer than chunks carry", edit(func(b []byte) { binary.LittleEndian.PutUint64(b[28:], 1<<50) })},
		{"bad batcher id", edit(func(b []byte) { b[38] = '.' })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := parseChunk(tc.chunk); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("parseChunk: %v, want ErrCorrupt", err)
			}
		})
	}
	if _, _, err := parseChunk(edit(func(b []byte) { b[4] = 9 })); !errors.Is(err, ErrFormat) {
		t.Errorf("chunk of version 9: %v, want ErrFormat", err)
	}

	t.Run("disagreeing chunks", func(t *testing.T) {
		var a assembly[int]
		h0, d0, _ := parseChunk(chunks[0])
		if _, _, err := a.add(h0, d0, 0); err != nil {
			t.Fatal(err)
		}
		h1, d1, _ := parseChunk(chunks[1])
		h1.count++
		if _, _, err := a.add(h1, d1, 1); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("chunk claiming another count: %v, want ErrCorrupt", err)
		}
	})
	t.Run("short parts", func(t *testing.T) {
		var a assembly[int]
		for i, ch := range chunks {
			h, d, _ := parseChunk(ch)
			if i == 0 {
				d = d[:len(d)-1]
			}
			if _, _, err := a.add(h, d, i); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.blob(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("blob of short parts: %v, want ErrCorrupt", err)
		}
	})
}

func TestEncodeRefuses(t *testing.T) {
	c := newCodec(0)
	ok := func() RolloutMsg {
		return RolloutMsg{BatcherID: "b", Columns: []Column{{Name: "a", F32: []float32{1}}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*RolloutMsg)
		want error
	}{
		{"bad batcher id", func(m *RolloutMsg) { m.BatcherID = "a.b" }, ErrName},
		{"negative T", func(m *RolloutMsg) { m.T = -1 }, nil},
		{"duplicate column", func(m *RolloutMsg) { m.Columns = append(m.Columns, m.Columns[0]) }, nil},
		{"unnamed column", func(m *RolloutMsg) { m.Columns[0].Name = "" }, nil},
		{"both types", func(m *RolloutMsg) { m.Columns[0].I64 = []int64{1} }, nil},
		{"too large", func(m *RolloutMsg) {
			// 200 columns sharing one 5.4 MB array claim more than 1 GiB: encode refuses
			// them from their lengths, before allocating anything that size.
			shared := make([]float32, MaxRolloutBytes/4/200+1)
			for i := range 200 {
				m.Columns = append(m.Columns, Column{Name: fmt.Sprint("c", i), F32: shared})
			}
		}, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := ok()
			tc.edit(&m)
			_, err := c.encode(&m, CodecS2)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("encode: %v, want an error (%v)", err, tc.want)
			}
		})
	}
}

func TestColumns(t *testing.T) {
	m := sampleRollout(2, 2, 4, 1)
	if v, err := m.Int64("version"); err != nil || len(v) != 4 {
		t.Errorf("Int64(version) = %v, %v", v, err)
	}
	if _, err := m.Float32("version"); !errors.Is(err, ErrColumn) {
		t.Errorf("Float32(version): %v, want ErrColumn", err)
	}
	if _, err := m.Float32("nope"); !errors.Is(err, ErrColumn) {
		t.Errorf("Float32(nope): %v, want ErrColumn", err)
	}
	if _, err := m.Int64("obs"); !errors.Is(err, ErrColumn) {
		t.Errorf("Int64(obs): %v, want ErrColumn", err)
	}
}

func TestParseCodec(t *testing.T) {
	for _, c := range []Codec{CodecDefault, CodecNone, CodecS2, CodecZstd} {
		got, err := ParseCodec(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCodec(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := ParseCodec("lz4"); err == nil {
		t.Error("ParseCodec(lz4) accepted")
	}
}

// FuzzDecode feeds arbitrary bytes to the decoder, as they are and with a valid checksum
// (so that the parser and decompressors behind the checksum are reached): it must return
// a rollout or an error, never panic; a rollout it returns must survive a round trip.
func FuzzDecode(f *testing.F) {
	c := newCodec(0)
	for i, kind := range []Codec{CodecNone, CodecS2, CodecZstd} {
		m := sampleRollout(2, 3, 2, uint64(i))
		b, err := c.encode(&m, kind)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("TRRL"))
	// A 1 GiB bound would let the fuzzer spend its time allocating what headers claim.
	c.maxRaw = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range [][]byte{data, withCRCIfLong(data)} {
			m, err := c.decode(b)
			if err != nil {
				continue
			}
			again, err := c.encode(&m, CodecS2)
			if err != nil {
				t.Fatalf("a decoded rollout does not encode: %v", err)
			}
			m2, err := c.decode(again)
			if err != nil {
				t.Fatalf("re-encoded rollout does not decode: %v", err)
			}
			if d := diffRollout(m, m2); d != "" {
				t.Fatalf("round trip differs:\n%s", d)
			}
		}
	})
}

func withCRCIfLong(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	return withCRC(b)
}

// FuzzChunk feeds arbitrary bytes to the chunk parser and an assembly.
func FuzzChunk(f *testing.F) {
	c := newCodec(64)
	m := sampleRollout(2, 2, 4, 1)
	chunks, _ := c.message(&m, CodecNone)
	for _, ch := range chunks {
		f.Add(ch)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, d, err := parseChunk(data)
		if err != nil {
			return
		}
		var a assembly[int]
		if _, _, err := a.add(h, d, 0); err != nil {
			return
		}
		if a.complete() {
			_, _ = a.blob()
		}
	})
}

// TestColumnCopyPortable checks the memory-copy path of the column conversion against the
// element-by-element little-endian one.
func TestColumnCopyPortable(t *testing.T) {
	f := []float32{1.5, -0, float32(math.Inf(-1)), 3.25e-38}
	i := []int64{math.MinInt64, 1, -2, 1 << 40}
	d := []float64{math.Copysign(0, -1), math.Inf(1), 5e-324, -1.25}
	want := make([]byte, 0, 96)
	for _, v := range f {
		want = binary.LittleEndian.AppendUint32(want, math.Float32bits(v))
	}
	for _, v := range i {
		want = binary.LittleEndian.AppendUint64(want, uint64(v))
	}
	for _, v := range d {
		want = binary.LittleEndian.AppendUint64(want, math.Float64bits(v))
	}
	for _, le := range []bool{true, false} {
		saved := littleEndian
		littleEndian = le && saved
		got := make([]byte, len(want))
		n := putF32(got, f)
		n += putI64(got[n:], i)
		putF64(got[n:], d)
		f2, i2, d2 := make([]float32, len(f)), make([]int64, len(i)), make([]float64, len(d))
		n = getF32(f2, want)
		n += getI64(i2, want[n:])
		getF64(d2, want[n:])
		littleEndian = saved
		if string(got) != string(want) {
			t.Errorf("fast=%v: put wrote %x, want %x", le, got, want)
		}
		for k := range f {
			if math.Float32bits(f2[k]) != math.Float32bits(f[k]) || i2[k] != i[k] || math.Float64bits(d2[k]) != math.Float64bits(d[k]) {
				t.Errorf("fast=%v: get read %v %v %v, want %v %v %v", le, f2, i2, d2, f, i, d)
			}
		}
	}
}

// BenchmarkCodec encodes and decodes a CartPole-shaped rollout (T=128, N=64).
func BenchmarkCodec(b *testing.B) {
	for _, kind := range []Codec{CodecNone, CodecS2, CodecZstd} {
		c := newCodec(0)
		m := sampleRollout(128, 64, 4, 1)
		raw := float64(rawBytes(&m))
		b.Run("encode/"+kind.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.message(&m, kind); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(raw*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
		})
		blob, _ := c.encode(&m, kind)
		b.Run("decode/"+kind.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.decode(blob); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(raw*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
			b.ReportMetric(float64(len(blob))/raw, "ratio")
		})
		c.close()
	}
}

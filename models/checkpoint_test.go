package models

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleCheckpoint holds parameters, Adam slots and scalar metadata as the learner will.
func sampleCheckpoint(t testing.TB, p *Params, rng *rand.PCG) *Checkpoint {
	t.Helper()
	c := &Checkpoint{
		Ints:   map[string]int64{"step": 12345, "iteration": 67, "adam.step": -1},
		Floats: map[string]float64{"lr": 2.5e-4, "nan": math.NaN(), "negzero": math.Copysign(0, -1)},
		Bytes:  map[string][]byte{"empty": {}},
	}
	p.Store(c)
	for i, name := range p.Names() {
		m := make([]float32, p.Offset(i+1)-p.Offset(i))
		for j := range m {
			m[j] = float32(j) * 1e-3
		}
		if err := c.Put("adam.m/"+name, p.Shape(i), m); err != nil {
			t.Fatal(err)
		}
		if err := c.Put("adam.v/"+name, p.Shape(i), m); err != nil {
			t.Fatal(err)
		}
	}
	state, err := rng.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c.Bytes["rng/learner"] = state
	return c
}

// TestCheckpointRestart: parameters, optimiser slots, scalars and the RNG state come back
// bit-identical in a fresh Params, as after a process restart.
func TestCheckpointRestart(t *testing.T) {
	ctx := context.Background()
	p := newParams(t, arches[2].cfg, 1)
	perturb(p, rand.New(rand.NewPCG(1, 1)))
	src := rand.NewPCG(42, 43)
	rand.New(src).Uint64() // advance the stream
	c := sampleCheckpoint(t, p, src)
	path := filepath.Join(t.TempDir(), "ckpt.bin")
	if err := SaveCheckpoint(ctx, path, c); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCheckpoint(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	q := newParams(t, arches[2].cfg, 2)
	if err := q.Load(got); err != nil {
		t.Fatal(err)
	}
	for i, v := range p.Data() {
		if math.Float32bits(v) != math.Float32bits(q.Data()[i]) {
			t.Fatalf("parameter value %d: %v != %v", i, q.Data()[i], v)
		}
	}
	opts := cmp.Options{cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }),
		cmp.Comparer(func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) })}
	if d := cmp.Diff(c, got, opts); d != "" {
		t.Errorf("checkpoint changed in the round trip (-saved +loaded):\n%s", d)
	}
	restored := &rand.PCG{}
	if err := restored.UnmarshalBinary(got.Bytes["rng/learner"]); err != nil {
		t.Fatal(err)
	}
	if a, b := rand.New(src).Uint64(), rand.New(restored).Uint64(); a != b {
		t.Errorf("restored RNG draws %d, the original %d", b, a)
	}

	// Saving again replaces the file and leaves no temporary behind.
	c.Ints["step"]++
	if err := SaveCheckpoint(ctx, path, c); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after two saves", len(entries))
	}
	if got, err := LoadCheckpoint(ctx, path); err != nil || got.Ints["step"] != 12346 {
		t.Errorf("second save: %v, step %v", err, got)
	}
	if err := SaveCheckpoint(ctx, filepath.Join(t.TempDir(), "missing", "ckpt.bin"), c); err == nil {
		t.Error("saving into a missing directory succeeded")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := SaveCheckpoint(cancelled, path, c); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled save: %v", err)
	}
}

// cancelAfter is a context whose Err turns to context.Canceled after n calls: cancelled while
// SaveCheckpoint is writing.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestCheckpointFailedSave: a save that fails (cancelled while writing, a folder in the way,
// an unencodable checkpoint) keeps the previous checkpoint loadable as it was and leaves no
// temporary file.
func TestCheckpointFailedSave(t *testing.T) {
	p := newParams(t, Config{Spec: cartPole.Spec, Hidden: []int{3}}, 1)
	tests := []struct {
		name string
		ctx  context.Context
		// path is the file to save, given the folder and the previous checkpoint's path.
		path func(dir, previous string) string
		edit func(c *Checkpoint)
		want error
	}{
		{"cancelled while writing", &cancelAfter{context.Background(), 1},
			func(_, previous string) string { return previous }, nil, context.Canceled},
		{"a folder where the file goes", context.Background(),
			func(dir, _ string) string { return dir }, nil, nil},
		{"a tensor of the wrong size", context.Background(),
			func(_, previous string) string { return previous },
			func(c *Checkpoint) { c.Tensors[0].Data = c.Tensors[0].Data[1:] }, ErrShape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			previous := filepath.Join(dir, "state.ckpt")
			c := sampleCheckpoint(t, p, rand.NewPCG(1, 2))
			if err := SaveCheckpoint(context.Background(), previous, c); err != nil {
				t.Fatal(err)
			}
			c.Ints["step"]++
			if tt.edit != nil {
				tt.edit(c)
			}
			err := SaveCheckpoint(tt.ctx, tt.path(dir, previous), c)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("SaveCheckpoint: %v, want an error wrapping %v", err, tt.want)
			}
			got, err := LoadCheckpoint(context.Background(), previous)
			if err != nil || got.Ints["step"] != 12345 {
				t.Fatalf("previous checkpoint after the failed save: step %v, %v", got, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("folder holds %d entries, want the checkpoint alone", len(entries))
			}
		})
	}
}

// TestCheckpointCorrupt: every truncation and every flipped byte is a clear error, never a
// panic and never silently wrong data.
func TestCheckpointCorrupt(t *testing.T) {
	p := newParams(t, Config{Spec: cartPole.Spec, Hidden: []int{3}}, 1)
	b, err := sampleCheckpoint(t, p, rand.NewPCG(1, 2)).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		if err := new(Checkpoint).UnmarshalBinary(b[:n]); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(b), err)
		}
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if err := new(Checkpoint).UnmarshalBinary(c); !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	if err := new(Checkpoint).UnmarshalBinary(append(b, 0)); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("trailing byte: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCheckpoint(context.Background(), path); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("truncated file: %v", err)
	}
}

func TestParamsLoadErrors(t *testing.T) {
	p := newParams(t, cartPole, 1)
	before := append([]float32(nil), p.Data()...)
	c := &Checkpoint{}
	p.Store(c)
	c.Tensors = c.Tensors[:len(c.Tensors)-1]
	if err := p.Load(c); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("missing parameter: %v", err)
	}
	other := newParams(t, Config{Spec: cartPole.Spec, Hidden: []int{32, 32}}, 1)
	c = &Checkpoint{}
	other.Store(c)
	if err := p.Load(c); !errors.Is(err, ErrCheckpoint) {
		t.Errorf("other architecture: %v", err)
	}
	if !cmp.Equal(before, p.Data()) {
		t.Error("a failed Load changed the parameters")
	}
	if err := c.Put("x", []int{2, 2}, []float32{1}); !errors.Is(err, ErrShape) {
		t.Errorf("Put with a wrong shape: %v", err)
	}
}

// FuzzCheckpoint: arbitrary bytes never panic the decoder, and what it accepts re-encodes to
// the same bytes.
func FuzzCheckpoint(f *testing.F) {
	p, err := NewParams(Config{Spec: cartPole.Spec, Hidden: []int{2}}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		f.Fatal(err)
	}
	c := &Checkpoint{Ints: map[string]int64{"step": 1}, Bytes: map[string][]byte{"rng": {1, 2, 3}}}
	p.Store(c)
	b, err := c.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	empty, _ := (&Checkpoint{}).MarshalBinary()
	f.Add(b)
	f.Add(empty)
	f.Add([]byte("TWRLCKPT"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Checkpoint
		if err := c.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error %v does not wrap ErrCheckpoint", err)
			}
			return
		}
		again, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var d Checkpoint
		if err := d.UnmarshalBinary(again); err != nil {
			t.Fatal(err)
		}
	})
}

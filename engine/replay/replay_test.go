package replay

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// step adds one step of n envs whose values encode (step k, env i): obs [v, −v] with
// v = 10k + i, action v + 0.5, reward v/10, next obs [v + 100, 0], final obs [v + 200, 1].
func step(t *testing.T, b *Buffer, k int, term, trunc []float32) {
	t.Helper()
	n := len(term)
	var obs, next, final, act, rew []float32
	for i := range n {
		v := float32(10*k + i)
		obs = append(obs, v, -v)
		next = append(next, v+100, 0)
		final = append(final, v+200, 1)
		act = append(act, v+0.5)
		rew = append(rew, v/10)
	}
	if err := b.Add(obs, act, rew, term, trunc, next, final); err != nil {
		t.Fatal(err)
	}
}

// TestWrapAround: capacity 5, two envs, four steps: the eight transitions (k, i) go to rows
// 0..4, then 5, 6, 7 overwrite rows 0, 1, 2; position 3, all five rows filled.
func TestWrapAround(t *testing.T) {
	b, err := New(Config{Capacity: 5, ObsDim: 2, ActDim: 1})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 4 {
		step(t, b, k, []float32{0, 0}, []float32{0, 0})
	}
	if b.Len() != 5 || b.pos != 3 || b.Added() != 8 {
		t.Fatalf("len %d, pos %d, added %d; want 5, 3, 8", b.Len(), b.pos, b.Added())
	}
	// Rows hold transitions (k, i) = row 0: (2,1) v=21; row 1: (3,0) v=30; row 2: (3,1) v=31;
	// row 3: (1,1) v=11; row 4: (2,0) v=20.
	want := []float32{21, 30, 31, 11, 20}
	for r, v := range want {
		if got := b.obs[2*r]; got != v || b.obs[2*r+1] != -v || b.next[2*r] != v+100 || b.act[r] != v+0.5 || b.rew[r] != v/10 {
			t.Errorf("row %d: obs %v, next %v, action %v, reward %v; want transition %v", r, b.obs[2*r:2*r+2], b.next[2*r:2*r+2], b.act[r], b.rew[r], v)
		}
	}
}

// TestTimeLimit: env 0 truncated, env 1 terminated, env 2 both, env 3 neither. The next
// observation of 0, 1 and 2 is the final one; only 1 and 2 stop bootstrapping.
func TestTimeLimit(t *testing.T) {
	b, err := New(Config{Capacity: 8, ObsDim: 2, ActDim: 1})
	if err != nil {
		t.Fatal(err)
	}
	step(t, b, 0, []float32{0, 1, 1, 0}, []float32{1, 0, 1, 0})
	dst := NewBatch(4, 2, 1)
	copy(dst.Index, []int{0, 1, 2, 3})
	b.Gather(dst)
	wantNext := []float32{200, 1, 201, 1, 202, 1, 103, 0}
	if !slices.Equal(dst.NextObs, wantNext) {
		t.Errorf("next obs %v, want %v", dst.NextObs, wantNext)
	}
	if want := []float32{0, 1, 1, 0}; !slices.Equal(dst.Terminated, want) {
		t.Errorf("terminated %v, want %v", dst.Terminated, want)
	}
	if want := []float32{1, 0, 1, 0}; !slices.Equal(dst.Truncated, want) {
		t.Errorf("truncated %v, want %v", dst.Truncated, want)
	}
	// With no episode ended, finalObs may be nil; with one ended it may not.
	if err := b.Add([]float32{1, 2}, []float32{0}, []float32{0}, []float32{0}, []float32{0}, []float32{3, 4}, nil); err != nil {
		t.Errorf("no episode ended, nil finalObs: %v", err)
	}
	if err := b.Add([]float32{1, 2}, []float32{0}, []float32{0}, []float32{0}, []float32{1}, []float32{3, 4}, nil); !errors.Is(err, ErrInput) {
		t.Errorf("a truncated episode without finalObs: %v, want ErrInput", err)
	}
}

// TestSample: row i of a batch is transition rng.IntN(Len()) of the buffer, drawn in row
// order: the same seed draws the same rows, and every row is drawn about equally often.
func TestSample(t *testing.T) {
	b, err := New(Config{Capacity: 7, ObsDim: 2, ActDim: 1})
	if err != nil {
		t.Fatal(err)
	}
	dst := NewBatch(4, 2, 1)
	if err := b.Sample(rand.New(rand.NewPCG(1, 2)), dst); !errors.Is(err, ErrInput) {
		t.Errorf("sampling an empty buffer: %v, want ErrInput", err)
	}
	for k := range 3 {
		step(t, b, k, []float32{0, 0}, []float32{0, 0})
	}
	rng, ref := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 6)
	for range 3000 {
		if err := b.Sample(rng, dst); err != nil {
			t.Fatal(err)
		}
		for i, r := range dst.Index {
			if want := ref.IntN(6); r != want {
				t.Fatalf("row %d drawn from %d, the seeded stream says %d", i, r, want)
			}
			if dst.Obs[2*i] != b.obs[2*r] || dst.Actions[i] != b.act[r] {
				t.Fatalf("row %d holds %v, buffer row %d %v", i, dst.Obs[2*i:2*i+2], r, b.obs[2*r:2*r+2])
			}
			counts[r]++
		}
	}
	// 12000 draws of 6 rows: 2000 each, standard deviation about 41.
	for r, c := range counts {
		if c < 1800 || c > 2200 {
			t.Errorf("row %d drawn %d times of 12000, want about 2000", r, c)
		}
	}
	if err := b.Sample(rng, NewBatch(4, 3, 1)); !errors.Is(err, ErrInput) {
		t.Errorf("a batch of another shape: %v, want ErrInput", err)
	}
}

// TestSnapshot: a restored buffer holds the same bits (NaN payloads included) at the same
// position, and goes on exactly as the original: the same adds and seeded samples give the
// same batches.
func TestSnapshot(t *testing.T) {
	cfg := Config{Capacity: 5, ObsDim: 2, ActDim: 1}
	for _, steps := range []int{0, 1, 4} { // empty, part filled, wrapped
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for k := range steps {
			step(t, a, k, []float32{float32(k % 2), 0}, []float32{0, 1})
		}
		if a.Len() > 0 {
			a.rew[0] = math.Float32frombits(0x7fc00123) // a NaN with a payload
		}
		var buf bytes.Buffer
		n, err := a.WriteTo(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(64 + a.Len()*4*(2*2+1+3) + 4); n != want || a.SnapshotSize() != want || int64(buf.Len()) != want {
			t.Fatalf("%d steps: wrote %d bytes (buffer %d), SnapshotSize %d, want %d", steps, n, buf.Len(), a.SnapshotSize(), want)
		}
		data := buf.Bytes()
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if a.pos != b.pos || a.size != b.size || a.added != b.added {
			t.Fatalf("restored pos %d, len %d, added %d; want %d, %d, %d", b.pos, b.size, b.added, a.pos, a.size, a.added)
		}
		for c, col := range a.columns() {
			if !slices.Equal(bits(col), bits(b.columns()[c])) {
				t.Errorf("%d steps: column %d differs after restore", steps, c)
			}
		}
		step(t, a, 9, []float32{0, 1}, []float32{1, 0})
		step(t, b, 9, []float32{0, 1}, []float32{1, 0})
		ra, rb := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
		da, db := NewBatch(6, 2, 1), NewBatch(6, 2, 1)
		for range 5 {
			if err := errors.Join(a.Sample(ra, da), b.Sample(rb, db)); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(da.Index, db.Index) || !slices.Equal(bits(da.Obs), bits(db.Obs)) || !slices.Equal(bits(da.Rewards), bits(db.Rewards)) {
				t.Fatalf("%d steps: restored buffer samples %v, original %v", steps, db.Index, da.Index)
			}
		}
	}
}

func TestSnapshotRefused(t *testing.T) {
	cfg := Config{Capacity: 5, ObsDim: 2, ActDim: 1}
	a, _ := New(cfg)
	for k := range 3 {
		step(t, a, k, []float32{0, 0}, []float32{0, 0})
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	flipped := slices.Clone(good)
	flipped[100] ^= 1
	wrongPos := slices.Clone(good)
	wrongPos[40] = 9 // position 9 in a buffer of 5
	for name, c := range map[string]struct {
		cfg  Config
		data []byte
		want string
	}{
		"flipped bit":    {cfg, flipped, "checksum"},
		"truncated":      {cfg, good[:len(good)-3], "truncated"},
		"empty":          {cfg, nil, "truncated in its header"},
		"other capacity": {Config{Capacity: 6, ObsDim: 2, ActDim: 1}, good, "capacity 5"},
		"other obs":      {Config{Capacity: 5, ObsDim: 3, ActDim: 1}, good, "capacity 5"},
		"bad position":   {cfg, wrongPos, "position 9"},
		"not a snapshot": {cfg, append([]byte("TWRLCKPT"), good[8:]...), "magic"},
	} {
		b, _ := New(c.cfg)
		b.pos, b.size = 1, 1 // something to lose
		_, err := b.ReadFrom(bytes.NewReader(c.data))
		if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrSnapshot saying %q", name, err, c.want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d rows left after a failed restore", name, b.Len())
		}
	}
}

// TestMemory: New works out the bytes first and refuses what does not fit, naming it.
func TestMemory(t *testing.T) {
	// 17 observation and 6 action values: 4·(34 + 6 + 3) = 172 bytes per transition.
	if n, err := Bytes(Config{Capacity: 1_000_000, ObsDim: 17, ActDim: 6}); err != nil || n != 172_000_000 {
		t.Errorf("HalfCheetah's million transitions: %d bytes (%v), want 172000000", n, err)
	}
	_, err := New(Config{Capacity: 1000, ObsDim: 17, ActDim: 6, MaxBytes: 100_000})
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "Capacity 1000") || !strings.Contains(err.Error(), "MaxBytes") {
		t.Errorf("over MaxBytes: %v", err)
	}
	// A capacity no machine has memory for, with the default bound.
	_, err = New(Config{Capacity: 1 << 50, ObsDim: 17, ActDim: 6})
	if avail := availableMemory(); avail > 0 && (!errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "MemAvailable")) {
		t.Errorf("2⁵⁰ transitions: %v", err)
	}
	if _, err := Bytes(Config{Capacity: math.MaxInt / 8, ObsDim: 1 << 20, ActDim: 1}); !errors.Is(err, ErrMemory) {
		t.Errorf("an overflowing size: %v", err)
	}
	for _, c := range []Config{{ObsDim: 1, ActDim: 1}, {Capacity: 1, ActDim: 1}, {Capacity: 1, ObsDim: 1}, {Capacity: 1, ObsDim: 1, ActDim: 1, MaxBytes: -1}} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}

func TestAddRefuses(t *testing.T) {
	b, _ := New(Config{Capacity: 4, ObsDim: 2, ActDim: 1})
	one := []float32{0}
	for name, err := range map[string]error{
		"short obs":     b.Add([]float32{1}, one, one, one, one, []float32{1, 2}, nil),
		"short next":    b.Add([]float32{1, 2}, one, one, one, one, []float32{1}, nil),
		"two actions":   b.Add([]float32{1, 2}, []float32{1, 2}, one, one, one, []float32{1, 2}, nil),
		"no terminated": b.Add([]float32{1, 2}, one, one, nil, one, []float32{1, 2}, nil),
	} {
		if !errors.Is(err, ErrInput) {
			t.Errorf("%s: %v, want ErrInput", name, err)
		}
	}
	if b.Len() != 0 {
		t.Errorf("refused adds stored %d rows", b.Len())
	}
}

func TestAddSampleAllocs(t *testing.T) {
	b, _ := New(Config{Capacity: 64, ObsDim: 3, ActDim: 2})
	obs, act, one := make([]float32, 12), make([]float32, 8), make([]float32, 4)
	dst, rng := NewBatch(16, 3, 2), rand.New(rand.NewPCG(1, 1))
	if n := testing.AllocsPerRun(100, func() {
		if err := b.Add(obs, act, one, one, one, obs, obs); err != nil {
			t.Fatal(err)
		}
		if err := b.Sample(rng, dst); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Add and Sample allocate %v times per call", n)
	}
}

func bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

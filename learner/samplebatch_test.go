package learner

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// fillSequenceBatch writes sequences of lens into b: row j of sequence k holds k·100+j in
// every per-row column (NextValues and Version included), so a moved row shows where it came
// from.
func fillSequenceBatch(t *testing.T, b *SampleBatch, lens []int32) {
	t.Helper()
	b.Reset()
	row := 0
	for k, l := range lens {
		for j := range int(l) {
			v := float32(k*100 + j)
			b.Obs[row], b.Actions[row], b.Rewards[row], b.Terminated[row], b.Truncated[row] = v, v, v, v, v
			b.LogP[row], b.Values[row], b.Advantages[row], b.Returns[row], b.NextValues[row] = v, v, v, v, v
			b.Version[row] = int64(v)
			row++
		}
		b.SeqLens = append(b.SeqLens, l)
	}
	if err := b.SetLen(row); err != nil {
		t.Fatal(err)
	}
}

// checkSequences checks that b holds whole sequences of lens (in any order) with every column
// of a row moved together, and returns the order they are in.
func checkSequences(t *testing.T, b *SampleBatch, lens []int32) []int {
	t.Helper()
	var order []int
	row := 0
	for s, l := range b.SeqLens {
		k := int(b.Obs[row]) / 100
		if k >= len(lens) || lens[k] != l {
			t.Fatalf("sequence %d of length %d starts with row %v", s, l, b.Obs[row])
		}
		for j := range int(l) {
			want := float32(k*100 + j)
			r := row + j
			for _, c := range []struct {
				name string
				v    float32
			}{{"Obs", b.Obs[r]}, {"Actions", b.Actions[r]}, {"Rewards", b.Rewards[r]}, {"Terminated", b.Terminated[r]},
				{"Truncated", b.Truncated[r]}, {"LogP", b.LogP[r]}, {"Values", b.Values[r]}, {"Advantages", b.Advantages[r]},
				{"Returns", b.Returns[r]}, {"NextValues", b.NextValues[r]}, {"Version", float32(b.Version[r])}} {
				if c.v != want {
					t.Fatalf("sequence %d (was %d) step %d: %s = %v, want %v", s, k, j, c.name, c.v, want)
				}
			}
		}
		order = append(order, k)
		row += int(l)
	}
	if row != b.Len() {
		t.Fatalf("sequences hold %d rows, the batch %d", row, b.Len())
	}
	return order
}

// TestSampleBatchSequences: a feed-forward sequence batch (no state) is appended, copied by
// sequence ranges and shuffled by whole sequences, NextValues moving with its rows; a plain
// batch cannot take its rows.
func TestSampleBatchSequences(t *testing.T) {
	lens := []int32{4, 4, 4, 4, 4, 4}
	b := NewSequenceBatch(24, 1, 1, 0)
	if !b.Recurrent() || b.StateDim != 0 || len(b.NextValues) != 24 {
		t.Fatalf("NewSequenceBatch: Recurrent %t, StateDim %d, NextValues %d", b.Recurrent(), b.StateDim, len(b.NextValues))
	}
	fillSequenceBatch(t, b, lens)

	big := b.NewLike(48)
	if !big.Recurrent() || big.Cap() != 48 {
		t.Fatalf("NewLike: Recurrent %t, Cap %d", big.Recurrent(), big.Cap())
	}
	for range 2 {
		if err := big.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if len(big.SeqLens) != 12 || big.Len() != 48 {
		t.Fatalf("two appends: %d sequences, %d rows", len(big.SeqLens), big.Len())
	}
	checkSequences(t, big, lens)

	shuffled := false
	sh := NewShuffler(b)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		if err := sh.Shuffle(rng, b); err != nil {
			t.Fatal(err)
		}
		order := checkSequences(t, b, lens)
		for i, k := range order {
			shuffled = shuffled || i != k
		}
	}
	if !shuffled {
		t.Error("five shuffles left the sequences in order")
	}
	if n := testing.AllocsPerRun(20, func() { _ = sh.Shuffle(rng, b) }); n != 0 {
		t.Errorf("%v allocations per shuffle of a sequence batch", n)
	}

	slice := b.NewLike(24)
	if err := b.CopyRange(slice, 2, 5); err != nil {
		t.Fatal(err)
	}
	if len(slice.SeqLens) != 3 || slice.Len() != 12 {
		t.Fatalf("sequences [2, 5): %d sequences, %d rows", len(slice.SeqLens), slice.Len())
	}
	checkSequences(t, slice, lens)

	// Appending would lose the sequences, and is refused; a copy makes its destination hold
	// sequences (how the learner's tower slices take them) and back.
	plain := NewSampleBatch(24, 1, 1, 0)
	if err := plain.Append(b); !errors.Is(err, ErrBatch) {
		t.Errorf("a sequence batch appended to a plain one: %v, want ErrBatch", err)
	}
	if err := b.CopyRange(plain, 1, 3); err != nil || !plain.Recurrent() || len(plain.SeqLens) != 2 || plain.Len() != 8 {
		t.Fatalf("sequences [1, 3) into a plain batch: %v, Recurrent %t, %d sequences, %d rows", err, plain.Recurrent(), len(plain.SeqLens), plain.Len())
	}
	checkSequences(t, plain, lens)
	rows := NewSampleBatch(24, 1, 1, 0)
	fillSequenceBatch(t, rows, lens)
	rows.SeqLens = rows.SeqLens[:0]
	if err := rows.CopyRange(plain, 0, 5); err != nil || plain.Recurrent() || plain.Len() != 5 {
		t.Fatalf("rows [0, 5) of a plain batch: %v, Recurrent %t, %d rows", err, plain.Recurrent(), plain.Len())
	}
}

// TestSampleBatchNextValuesMove: the plain (row) paths carry NextValues too.
func TestSampleBatchNextValuesMove(t *testing.T) {
	b := NewSampleBatch(8, 1, 1, 0)
	if b.Recurrent() {
		t.Fatal("a plain batch holds sequences")
	}
	for r := range 8 {
		b.Obs[r], b.NextValues[r] = float32(r), float32(10*r)
	}
	if err := b.SetLen(8); err != nil {
		t.Fatal(err)
	}
	if err := NewShuffler(b).Shuffle(rand.New(rand.NewPCG(1, 2)), b); err != nil {
		t.Fatal(err)
	}
	c := b.NewLike(8)
	if err := b.CopyRange(c, 2, 7); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(c.NewLike(0)); err != nil {
		t.Fatal(err)
	}
	for r := range c.Len() {
		if c.NextValues[r] != 10*c.Obs[r] || c.Obs[r] != b.Obs[r+2] {
			t.Fatalf("row %d: obs %v next value %v (source row obs %v)", r, c.Obs[r], c.NextValues[r], b.Obs[r+2])
		}
	}
}

// TestFootprint: the bytes worked by hand for 2 workers × 4 envs × 8 steps (64 rows) of
// CartPole (4 observation values, 1 action) with a ring of 3 rollouts and 2 minibatches of a
// 64+64-unit network: 64·(8·5+64)·4 + 32·16·128 = 26,624 + 65,536; an overflowing product is
// −1, which Check refuses.
func TestFootprint(t *testing.T) {
	f := Footprint{Workers: 2, Envs: 4, Steps: 8, ObsDim: 4, ActDim: 1, Copies: 4, Minibatches: 2, HiddenUnits: 128}
	if got, want := f.Bytes(), int64(26_624+65_536); got != want {
		t.Fatalf("Bytes = %d, want %d", got, want)
	}
	if err := f.Check("small", "none"); err != nil {
		t.Fatal(err)
	}
	f.Envs = 1 << 62
	if got := f.Bytes(); got != -1 {
		t.Fatalf("overflowing Bytes = %d, want -1", got)
	}
	if err := f.Check("huge", "use fewer"); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Fatalf("Check of an overflow: %v", err)
	}
}

// TestView checks that a view is rows [lo, hi) of its batch in every column, sharing their
// memory (a write through the view is the batch's), that it cannot grow past them, and that
// rows outside the batch and batches of sequences are refused.
func TestView(t *testing.T) {
	b := NewSampleBatch(10, 3, 2, 0)
	for i := range 10 {
		for j := range 3 {
			b.Obs[i*3+j] = float32(i*10 + j)
		}
		for j := range 2 {
			b.Actions[i*2+j] = float32(i*10 + j)
		}
		for _, c := range [][]float32{b.Rewards, b.Terminated, b.Truncated, b.LogP, b.Values, b.Advantages, b.Returns, b.NextValues} {
			c[i] = float32(i)
		}
		b.Version[i] = int64(i)
	}
	if err := b.SetLen(8); err != nil {
		t.Fatal(err)
	}
	var v SampleBatch
	if err := b.View(&v, 3, 7); err != nil {
		t.Fatal(err)
	}
	if v.Len() != 4 || v.Cap() != 4 || v.ObsDim != 3 || v.ActDim != 2 || v.Recurrent() {
		t.Fatalf("view of rows [3, 7): len %d cap %d dims %d, %d", v.Len(), v.Cap(), v.ObsDim, v.ActDim)
	}
	for k := range 4 {
		i := 3 + k
		if v.Obs[k*3+2] != float32(i*10+2) || v.Actions[k*2+1] != float32(i*10+1) || v.Version[k] != int64(i) {
			t.Fatalf("view row %d: obs %v, actions %v, version %d; want batch row %d", k, v.Obs[k*3:k*3+3], v.Actions[k*2:k*2+2], v.Version[k], i)
		}
		for c, col := range [][]float32{v.Rewards, v.Terminated, v.Truncated, v.LogP, v.Values, v.Advantages, v.Returns, v.NextValues} {
			if col[k] != float32(i) {
				t.Fatalf("view row %d, column %d: %v, want %d", k, c, col[k], i)
			}
		}
	}
	if len(v.Obs) != 12 || cap(v.Obs) != 12 || cap(v.Returns) != 4 {
		t.Fatalf("view columns of length %d, capacity %d and %d: want them bounded by row 7", len(v.Obs), cap(v.Obs), cap(v.Returns))
	}
	v.Advantages[0] = -1
	if b.Advantages[3] != -1 {
		t.Fatal("a write through the view did not reach the batch")
	}
	for _, r := range [][2]int{{-1, 2}, {5, 9}, {6, 5}} {
		if err := b.View(&v, r[0], r[1]); !errors.Is(err, ErrBatch) {
			t.Errorf("view of rows [%d, %d) of 8: %v, want ErrBatch", r[0], r[1], err)
		}
	}
	seq := NewSequenceBatch(4, 1, 1, 0)
	if err := seq.View(&v, 0, 0); !errors.Is(err, ErrBatch) {
		t.Errorf("view into a batch of sequences: %v, want ErrBatch", err)
	}
}

// TestRowOrderComposes: RowOrder's passes give the order that composing the permutations
// Shuffler draws (row k of the shuffled batch is row perm[k] of the one before) gives, pass
// after pass, and the rows a Shuffler's in-place passes leave the batch in, for sizes from 0.
func TestRowOrderComposes(t *testing.T) {
	for _, rows := range []int{0, 1, 2, 3, 17, 1000, 65536} {
		ro := NewRowOrder(rows + 5)
		ro.Reset(rows)
		want := make([]int, rows)
		for i := range want {
			want[i] = i
		}
		b := NewSampleBatch(rows, 1, 1, 0)
		for i := range rows {
			b.Obs[i] = float32(i)
		}
		if err := b.SetLen(rows); err != nil {
			t.Fatal(err)
		}
		sh := NewShuffler(b)
		rng, ref, moved := rand.New(rand.NewPCG(3, uint64(rows))), rand.New(rand.NewPCG(3, uint64(rows))), rand.New(rand.NewPCG(3, uint64(rows)))
		var s Shuffler
		s.perm = make([]int, rows)
		for pass := range 4 {
			ro.Shuffle(rng)
			next := make([]int, rows)
			for i, p := range s.permutation(ref, rows) {
				next[i] = want[p]
			}
			want = next
			if err := sh.Shuffle(moved, b); err != nil {
				t.Fatal(err)
			}
			for k, r := range ro.Rows() {
				if r != want[k] || int(b.Obs[k]) != r {
					t.Fatalf("%d rows, pass %d: row %d is %d; composed permutations %d, shuffled batch %v", rows, pass, k, r, want[k], b.Obs[k])
				}
			}
		}
	}
}

// BenchmarkRowOrderShuffle is one pass's shuffle of issue 32's PPO batch (2 workers × 256
// envs × 128 steps), which the learner draws before each pass while the towers wait.
func BenchmarkRowOrderShuffle(b *testing.B) {
	ro := NewRowOrder(65536)
	ro.Reset(65536)
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		ro.Shuffle(rng)
	}
}

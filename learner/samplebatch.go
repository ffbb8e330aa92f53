package learner

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/internal/bounded"
	"github.com/towerrl/towerrl/internal/kernels"
)

// SampleBatch is a columnar batch of transitions in preallocated float32 (and int64) arrays.
// Rows 0..Len-1 are valid; capacity is fixed at construction. For recurrent policies, rows are
// grouped into whole sequences of lengths SeqLens (summing to Len), each with its initial state
// in State (StateDim per sequence). A batch made by [NewSequenceBatch] groups its rows into
// sequences without a state (StateDim 0): what V-trace (IMPALA, APPO) trains on, whole
// time-ordered stretches of one env's rollout.
type SampleBatch struct {
	ObsDim, ActDim, StateDim int

	Obs        []float32 // [cap×ObsDim]
	Actions    []float32 // [cap×ActDim]; a Discrete action is its index as a float32
	Rewards    []float32 // [cap]
	Terminated []float32 // [cap]
	Truncated  []float32 // [cap]
	LogP       []float32 // [cap] behaviour policy log-probability
	Values     []float32 // [cap] behaviour value estimate
	Advantages []float32 // [cap]
	Returns    []float32 // [cap] value targets
	// NextValues [cap] is the behaviour policy's value of the row's successor state, what
	// V-trace bootstraps from where a sequence ends: the final observation's value where the
	// episode was truncated, 0 where it terminated, the next step's value otherwise, and the
	// value of the observation after the rollout's last step at its end.
	NextValues []float32
	Version    []int64 // [cap] policy version that produced the row

	SeqLens []int32   // lengths of the sequences; empty for rows not grouped into sequences
	State   []float32 // [len(SeqLens)×StateDim] initial state of each sequence

	n, capacity int
	seqs        bool // rows are grouped into whole sequences (SeqLens)
}

// NewSampleBatch allocates a batch for capacity rows (and, when stateDim > 0, as many sequences).
func NewSampleBatch(capacity, obsDim, actDim, stateDim int) *SampleBatch {
	return newBatch(capacity, obsDim, actDim, stateDim, stateDim > 0)
}

// NewSequenceBatch allocates a batch for capacity rows grouped into whole sequences (up to
// capacity of them), each with stateDim values of initial state (0 for a feed-forward policy):
// copies, shuffles and the learner's towers move and split it by sequence, never inside one.
func NewSequenceBatch(capacity, obsDim, actDim, stateDim int) *SampleBatch {
	return newBatch(capacity, obsDim, actDim, stateDim, true)
}

// NewLike allocates an empty batch for capacity rows with b's layout: its dimensions, and
// sequences when b holds them. Buffers a batch is copied into (stacks, tower slices, scratch)
// are made so.
func (b *SampleBatch) NewLike(capacity int) *SampleBatch {
	return newBatch(capacity, b.ObsDim, b.ActDim, b.StateDim, b.seqs)
}

func newBatch(capacity, obsDim, actDim, stateDim int, seqs bool) *SampleBatch {
	b := &SampleBatch{ObsDim: obsDim, ActDim: actDim, StateDim: stateDim, capacity: capacity, seqs: seqs,
		Obs: make([]float32, capacity*obsDim), Actions: make([]float32, capacity*actDim),
		Rewards: make([]float32, capacity), Terminated: make([]float32, capacity), Truncated: make([]float32, capacity),
		LogP: make([]float32, capacity), Values: make([]float32, capacity), Advantages: make([]float32, capacity),
		Returns: make([]float32, capacity), NextValues: make([]float32, capacity), Version: make([]int64, capacity)}
	if seqs {
		b.SeqLens = make([]int32, 0, capacity)
		b.State = make([]float32, capacity*stateDim)
	}
	return b
}

// Len is the number of valid rows.
func (b *SampleBatch) Len() int { return b.n }

// Cap is the number of rows the batch can hold.
func (b *SampleBatch) Cap() int { return b.capacity }

// Recurrent reports whether the batch holds sequences: recurrent data (StateDim > 0), or a
// [NewSequenceBatch]'s.
func (b *SampleBatch) Recurrent() bool { return b.seqs }

// SetLen sets the number of valid rows (after writing the columns directly).
func (b *SampleBatch) SetLen(n int) error {
	if n < 0 || n > b.capacity {
		return fmt.Errorf("%w: %d rows in a batch of capacity %d", ErrBatch, n, b.capacity)
	}
	b.n = n
	return nil
}

// View makes v rows [lo, hi) of b, a batch of rows not grouped into sequences, without a copy:
// v's columns are b's from row lo (writing them writes b's), and v's length and capacity are
// hi − lo. It allocates nothing, so that a tower can run its slice in parts through graphs of
// fewer rows.
func (b *SampleBatch) View(v *SampleBatch, lo, hi int) error {
	if b.seqs {
		return fmt.Errorf("%w: a view into a batch of sequences", ErrBatch)
	}
	if lo < 0 || hi > b.n || lo > hi {
		return fmt.Errorf("%w: a view of rows [%d, %d) of a batch of %d", ErrBatch, lo, hi, b.n)
	}
	od, ad := b.ObsDim, b.ActDim
	*v = SampleBatch{ObsDim: od, ActDim: ad, StateDim: b.StateDim,
		Obs: b.Obs[lo*od : hi*od : hi*od], Actions: b.Actions[lo*ad : hi*ad : hi*ad],
		Rewards: b.Rewards[lo:hi:hi], Terminated: b.Terminated[lo:hi:hi], Truncated: b.Truncated[lo:hi:hi],
		LogP: b.LogP[lo:hi:hi], Values: b.Values[lo:hi:hi], Advantages: b.Advantages[lo:hi:hi],
		Returns: b.Returns[lo:hi:hi], NextValues: b.NextValues[lo:hi:hi], Version: b.Version[lo:hi:hi],
		n: hi - lo, capacity: hi - lo}
	return nil
}

// Reset empties the batch, keeping its memory.
func (b *SampleBatch) Reset() {
	b.n = 0
	if b.SeqLens != nil {
		b.SeqLens = b.SeqLens[:0]
	}
}

func (b *SampleBatch) sameLayout(o *SampleBatch) error {
	if b.ObsDim != o.ObsDim || b.ActDim != o.ActDim || b.StateDim != o.StateDim {
		return fmt.Errorf("%w: layouts differ (obs %d/%d, act %d/%d, state %d/%d)",
			ErrBatch, b.ObsDim, o.ObsDim, b.ActDim, o.ActDim, b.StateDim, o.StateDim)
	}
	return nil
}

// copyRows copies rows [lo, lo+n) of src to rows [at, at+n) of b.
func (b *SampleBatch) copyRows(at int, src *SampleBatch, lo, n int) {
	od, ad := b.ObsDim, b.ActDim
	copy(b.Obs[at*od:(at+n)*od], src.Obs[lo*od:(lo+n)*od])
	copy(b.Actions[at*ad:(at+n)*ad], src.Actions[lo*ad:(lo+n)*ad])
	for _, c := range [][2][]float32{{b.Rewards, src.Rewards}, {b.Terminated, src.Terminated}, {b.Truncated, src.Truncated},
		{b.LogP, src.LogP}, {b.Values, src.Values}, {b.Advantages, src.Advantages}, {b.Returns, src.Returns},
		{b.NextValues, src.NextValues}} {
		copy(c[0][at:at+n], c[1][lo:lo+n])
	}
	copy(b.Version[at:at+n], src.Version[lo:lo+n])
}

// Columns is a set of a SampleBatch's row columns.
type Columns uint16

// The columns of a SampleBatch, one bit each.
const (
	ColObs Columns = 1 << iota
	ColActions
	ColRewards
	ColTerminated
	ColTruncated
	ColLogP
	ColValues
	ColAdvantages
	ColReturns
	ColNextValues
	ColVersion

	AllColumns = ColVersion<<1 - 1
)

// gatherRows writes the columns cols of row perm[i] of src to row i of b, column by column
// (one tight loop per column, not a copy call per row and column); b's other columns keep
// what they held. The float32 columns go through kernels.Gather, which fetches the rows
// ahead (a tower's gathers in issue 32's run: 56–62 ms of its run against 81–90 in Go's
// loops).
func (b *SampleBatch) gatherRows(src *SampleBatch, perm []int, cols Columns) {
	if cols&ColObs != 0 {
		kernels.Gather(b.Obs, src.Obs, perm, b.ObsDim)
	}
	if cols&ColActions != 0 {
		kernels.Gather(b.Actions, src.Actions, perm, b.ActDim)
	}
	for _, c := range [...]struct {
		col      Columns
		dst, src []float32
	}{{ColRewards, b.Rewards, src.Rewards}, {ColTerminated, b.Terminated, src.Terminated}, {ColTruncated, b.Truncated, src.Truncated},
		{ColLogP, b.LogP, src.LogP}, {ColValues, b.Values, src.Values}, {ColAdvantages, b.Advantages, src.Advantages},
		{ColReturns, b.Returns, src.Returns}, {ColNextValues, b.NextValues, src.NextValues}} {
		if cols&c.col != 0 {
			kernels.Gather(c.dst, c.src, perm, 1)
		}
	}
	if cols&ColVersion != 0 {
		ver := b.Version[:len(perm)]
		for i, p := range perm {
			ver[i] = src.Version[p]
		}
	}
}

// gatherFrom makes b the rows rows of src (a feed-forward batch), in that order: row k of b
// is row rows[k] of src, in the columns cols (b's others keep what they held).
func (b *SampleBatch) gatherFrom(src *SampleBatch, rows []int, cols Columns) error {
	if err := b.sameLayout(src); err != nil {
		return err
	}
	if len(rows) > b.capacity {
		return fmt.Errorf("%w: %d rows into a batch of capacity %d", ErrBatch, len(rows), b.capacity)
	}
	b.Reset()
	b.seqs = false
	b.gatherRows(src, rows, cols)
	b.n = len(rows)
	return nil
}

// Append copies src's rows (and sequences) after b's. Both must hold rows, or both sequences
// (make b with src's NewLike). It allocates nothing.
func (b *SampleBatch) Append(src *SampleBatch) error {
	if err := b.sameLayout(src); err != nil {
		return err
	}
	if b.seqs != src.seqs {
		return fmt.Errorf("%w: appending a batch that holds sequences (%t) to one that does (%t); make the destination with the source's NewLike",
			ErrBatch, src.seqs, b.seqs)
	}
	if b.n+src.n > b.capacity {
		return fmt.Errorf("%w: appending %d rows to %d exceeds the capacity %d", ErrBatch, src.n, b.n, b.capacity)
	}
	b.copyRows(b.n, src, 0, src.n)
	if b.Recurrent() {
		s := len(b.SeqLens)
		copy(b.State[s*b.StateDim:], src.State[:len(src.SeqLens)*b.StateDim])
		b.SeqLens = append(b.SeqLens, src.SeqLens...)
	}
	b.n += src.n
	return nil
}

// CopyRange makes dst hold rows [lo, hi) of b (for recurrent data, sequences [lo, hi)); dst
// then holds sequences exactly when b does. It allocates nothing when dst has the capacity
// (and, for sequences, was made with b's NewLike or has held sequences before).
func (b *SampleBatch) CopyRange(dst *SampleBatch, lo, hi int) error {
	if err := b.sameLayout(dst); err != nil {
		return err
	}
	dst.Reset()
	dst.seqs = b.seqs
	if b.Recurrent() {
		if lo < 0 || hi > len(b.SeqLens) || lo > hi {
			return fmt.Errorf("%w: sequences [%d, %d) of %d", ErrBatch, lo, hi, len(b.SeqLens))
		}
		start := 0
		for _, l := range b.SeqLens[:lo] {
			start += int(l)
		}
		rows := 0
		for _, l := range b.SeqLens[lo:hi] {
			rows += int(l)
		}
		if rows > dst.capacity {
			return fmt.Errorf("%w: %d rows into a batch of capacity %d", ErrBatch, rows, dst.capacity)
		}
		dst.copyRows(0, b, start, rows)
		dst.SeqLens = append(dst.SeqLens, b.SeqLens[lo:hi]...)
		copy(dst.State, b.State[lo*b.StateDim:hi*b.StateDim])
		dst.n = rows
		return nil
	}
	if lo < 0 || hi > b.n || lo > hi {
		return fmt.Errorf("%w: rows [%d, %d) of %d", ErrBatch, lo, hi, b.n)
	}
	if hi-lo > dst.capacity {
		return fmt.Errorf("%w: %d rows into a batch of capacity %d", ErrBatch, hi-lo, dst.capacity)
	}
	dst.copyRows(0, b, lo, hi-lo)
	dst.n = hi - lo
	return nil
}

// Shuffler permutes batches in place with preallocated scratch space.
type Shuffler struct {
	perm    []int
	scratch *SampleBatch
	offsets []int
}

// NewShuffler makes a shuffler for batches shaped like b.
func NewShuffler(b *SampleBatch) *Shuffler {
	return &Shuffler{perm: make([]int, b.capacity), scratch: b.NewLike(b.capacity),
		offsets: make([]int, b.capacity+1)}
}

// Shuffle permutes b's rows uniformly at random (for recurrent data, its whole sequences),
// drawing from rng. It allocates nothing.
func (s *Shuffler) Shuffle(rng *rand.Rand, b *SampleBatch) error {
	if err := s.scratch.sameLayout(b); err != nil {
		return err
	}
	if b.capacity > s.scratch.capacity {
		return fmt.Errorf("%w: shuffler of capacity %d for a batch of %d", ErrBatch, s.scratch.capacity, b.capacity)
	}
	units := b.n
	if b.Recurrent() {
		units = len(b.SeqLens)
	}
	perm := s.permutation(rng, units)
	if !b.Recurrent() {
		s.scratch.gatherRows(b, perm, AllColumns)
		b.copyRows(0, s.scratch, 0, b.n)
		return nil
	}
	s.offsets[0] = 0
	for i, l := range b.SeqLens {
		s.offsets[i+1] = s.offsets[i] + int(l)
	}
	at := 0
	sd := b.StateDim
	s.scratch.SeqLens = s.scratch.SeqLens[:0]
	for i, p := range perm {
		l := int(b.SeqLens[p])
		s.scratch.copyRows(at, b, s.offsets[p], l)
		copy(s.scratch.State[i*sd:(i+1)*sd], b.State[p*sd:(p+1)*sd])
		s.scratch.SeqLens = append(s.scratch.SeqLens, int32(l))
		at += l
	}
	b.copyRows(0, s.scratch, 0, b.n)
	copy(b.SeqLens, s.scratch.SeqLens)
	copy(b.State, s.scratch.State[:units*sd])
	return nil
}

// RowOrder is the order a feed-forward batch's rows would be in after passes of
// Shuffler.Shuffle, kept as row indices instead of moving the rows: row k of the shuffled
// batch is the batch's row Rows()[k]. Towers.UpdateRows trains by it, to the bits of
// Towers.Update on the shuffled batch (the same draws from the same generator).
type RowOrder struct {
	order []int
}

// NewRowOrder makes an order for batches of up to capacity rows.
func NewRowOrder(capacity int) *RowOrder {
	return &RowOrder{order: make([]int, 0, capacity)}
}

// Reset puts rows rows in their own order (before any pass). It panics past the capacity.
func (o *RowOrder) Reset(rows int) {
	o.order = o.order[:rows]
	for i := range o.order {
		o.order[i] = i
	}
}

// Shuffle composes the permutation Shuffler.Shuffle would draw from rng into the order. It
// makes Shuffler's swaps (rand.Rand.Shuffle's: Uint64N(i+1) for i from the last row down)
// on the order itself: swapping the same positions of the identity permutation and of the
// order keeps order[k] = old order[perm[k]] at every step, so the result is the composition,
// with no permutation to fill or compose, and no call through a swap function.
func (o *RowOrder) Shuffle(rng *rand.Rand) {
	order := o.order
	for i := len(order) - 1; i > 0; i-- {
		j := int(rng.Uint64N(uint64(i + 1)))
		order[i], order[j] = order[j], order[i]
	}
}

// Rows is the order: row k of the shuffled batch is the batch's row Rows()[k].
func (o *RowOrder) Rows() []int { return o.order }

// permutation draws the order Shuffle puts units rows (or sequences) in: unit i of the
// shuffled batch is unit perm[i] of the batch before. It is valid until the next call.
func (s *Shuffler) permutation(rng *rand.Rand, units int) []int {
	perm := s.perm[:units]
	for i := range perm {
		perm[i] = i
	}
	rng.Shuffle(units, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	return perm
}

// Footprint is the least memory a training run's rollouts and learner take: Copies rollouts of
// Workers·Envs·Steps rows (the batchers' columns and the learner's batch, and an asynchronous
// ring's) at 8 bytes per observation and action value and 64 per row, and, for each row of
// one of the Minibatches, the hidden activations of actor and critic with their gradients
// (16 bytes per unit of HiddenUnits).
type Footprint struct {
	Workers, Envs, Steps int64
	ObsDim, ActDim       int64
	Copies               int64 // rollouts held at once: 1, plus a ring's
	Minibatches          int64
	HiddenUnits          int64 // the hidden layers' widths, summed
}

// Bytes is the footprint in bytes, −1 when it overflows an int64 (bounded.Check refuses it).
func (f Footprint) Bytes() int64 {
	rows := bounded.Product(f.Workers, f.Envs, f.Steps)
	need := bounded.Product(rows, 8*(f.ObsDim+f.ActDim)+64, f.Copies)
	act := bounded.Product(rows/max(f.Minibatches, 1), 16, f.HiddenUnits)
	if rows < 0 || need < 0 || act < 0 || need > math.MaxInt64-act {
		return -1
	}
	return need + act
}

// Check returns nil when the footprint fits in the memory available, else an error naming
// what (the sizes that make it) with advice (internal/bounded's Check).
func (f Footprint) Check(what, advice string) error {
	return bounded.Check(what, f.Bytes(), advice)
}

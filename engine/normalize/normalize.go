package normalize

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrInput is wrapped by errors about buffers of the wrong size and undecodable state.
var ErrInput = errors.New("normalize: invalid input")

const (
	// InitCount is the pseudo-count new Moments start with (at mean 0, variance 1), as SB3's
	// and Gymnasium's RunningMeanStd(epsilon=1e-4): the first merge is not a division by 0,
	// and its weight is negligible after one batch.
	InitCount = 1e-4
	// Epsilon is added to a variance before its square root is taken (SB3's and Gymnasium's
	// 1e-8).
	Epsilon = 1e-8
	// DefaultClip bounds normalised observations and scaled rewards to [−10, 10] (SB3's
	// clip_obs and clip_reward).
	DefaultClip = 10
)

// Moments are the running count, mean and (population) variance of each component of a
// stream of vectors.
type Moments struct {
	Count     float64
	Mean, Var []float64
}

// NewMoments returns Moments of dim components at the pseudo-count InitCount, mean 0 and
// variance 1.
func NewMoments(dim int) Moments {
	m := Moments{Count: InitCount, Mean: make([]float64, dim), Var: make([]float64, dim)}
	for i := range m.Var {
		m.Var[i] = 1
	}
	return m
}

// Merge adds a batch of count vectors whose components have means mean and population
// variances vr (Chan, Golub and LeVeque's parallel algorithm, SB3's update_from_moments). A
// count of 0 changes nothing.
func (m *Moments) Merge(count float64, mean, vr []float64) {
	if count <= 0 {
		return
	}
	tot := m.Count + count
	for i := range m.Mean {
		delta := mean[i] - m.Mean[i]
		m2 := m.Var[i]*m.Count + vr[i]*count + delta*delta*m.Count*count/tot
		m.Mean[i] += delta * count / tot
		m.Var[i] = m2 / tot
	}
	m.Count = tot
}

// mergeSums merges a batch given as sums relative to shift: n vectors, s1 = Σ(x − shift),
// s2 = Σ(x − shift)². mean and vr are scratch of the Moments' dimension.
func (m *Moments) mergeSums(n float64, s1, s2, shift, mean, vr []float64) {
	if n <= 0 {
		return
	}
	for i := range mean {
		d := s1[i] / n
		mean[i] = shift[i] + d
		vr[i] = max(s2[i]/n-d*d, 0)
	}
	m.Merge(n, mean, vr)
}

// Frozen is the observation normalisation in force: y = clip((x − Mean)·Scale, −Clip, Clip)
// per component, in float32 with each operation rounded (ONNX's Sub, Mul and Clip).
type Frozen struct {
	Mean, Scale []float32
	Clip        float32
}

// Apply normalises src, whole observations of len(f.Mean) values, into dst (the same length;
// it may be src).
func (f *Frozen) Apply(dst, src []float32) error {
	d := len(f.Mean)
	if d == 0 || len(src)%d != 0 || len(dst) != len(src) || len(f.Scale) != d {
		return fmt.Errorf("%w: normalising %d values into %d with a map of %d means and %d scales", ErrInput, len(src), len(dst), d, len(f.Scale))
	}
	lo, hi := -f.Clip, f.Clip
	for r := 0; r < len(src); r += d {
		x, y := src[r:r+d], dst[r:r+d]
		for i, m := range f.Mean {
			v := float32(float32(x[i]-m) * f.Scale[i]) // two roundings, never fused
			y[i] = min(max(v, lo), hi)
		}
	}
	return nil
}

// Equal reports whether f and g are the same map, bit for bit.
func (f *Frozen) Equal(g *Frozen) bool {
	if len(f.Mean) != len(g.Mean) || len(f.Scale) != len(g.Scale) || math.Float32bits(f.Clip) != math.Float32bits(g.Clip) {
		return false
	}
	for i := range f.Mean {
		if math.Float32bits(f.Mean[i]) != math.Float32bits(g.Mean[i]) {
			return false
		}
	}
	for i := range f.Scale {
		if math.Float32bits(f.Scale[i]) != math.Float32bits(g.Scale[i]) {
			return false
		}
	}
	return true
}

// Obs is observation normalisation's running statistics. A trainer adds a rollout's raw
// observations ([Obs.Add]), optionally sums the pending batch over processes (every process
// adds the others' [Obs.Pending] values into its own), commits it ([Obs.Commit]) and freezes
// the result into the map the next rollout is collected with ([Obs.Freeze]).
type Obs struct {
	Moments
	Clip float64 // |y| bound; DefaultClip unless set

	// The batch added since the last Commit: pending = [n, Σ(x−shift)…, Σ(x−shift)²…], shift
	// the mean at the first Add (the same in every process that sums its batches).
	pending     []float64
	shift       []float64
	scratchMean []float64
	scratchVar  []float64
	shiftSet    bool
}

// NewObs returns the statistics of observations of dim values, clipped at clip (0:
// DefaultClip).
func NewObs(dim int, clip float64) *Obs {
	if clip == 0 {
		clip = DefaultClip
	}
	return &Obs{Moments: NewMoments(dim), Clip: clip, pending: make([]float64, 1+2*dim), shift: make([]float64, dim),
		scratchMean: make([]float64, dim), scratchVar: make([]float64, dim)}
}

// Dim is the number of values in an observation.
func (o *Obs) Dim() int { return len(o.Mean) }

// Add adds rows, whole raw observations, to the pending batch.
func (o *Obs) Add(rows []float32) error {
	d := o.Dim()
	if len(rows)%d != 0 {
		return fmt.Errorf("%w: %d values are not whole observations of %d", ErrInput, len(rows), d)
	}
	if !o.shiftSet {
		copy(o.shift, o.Mean)
		o.shiftSet = true
	}
	s1, s2 := o.pending[1:1+d], o.pending[1+d:]
	for r := 0; r < len(rows); r += d {
		for i, x := range rows[r : r+d] {
			v := float64(x) - o.shift[i]
			s1[i] += v
			s2[i] += v * v
		}
	}
	o.pending[0] += float64(len(rows) / d)
	return nil
}

// Pending is the pending batch as sums, [count, Σ(x−m)…, Σ(x−m)²…] with m the mean before
// the batch: a buffer that several processes' batches are summed in place of (an all-reduce
// of sums) before each calls Commit. Every process must have called Add (with rows or none).
func (o *Obs) Pending() []float64 {
	if !o.shiftSet {
		copy(o.shift, o.Mean)
		o.shiftSet = true
	}
	return o.pending
}

// Commit merges the pending batch into the statistics and empties it.
func (o *Obs) Commit() {
	d := o.Dim()
	if o.shiftSet {
		o.mergeSums(o.pending[0], o.pending[1:1+d], o.pending[1+d:], o.shift, o.scratchMean, o.scratchVar)
	}
	clear(o.pending)
	o.shiftSet = false
}

// Freeze writes the current statistics as the map observations are normalised with into f
// (allocating its slices when they are too short).
func (o *Obs) Freeze(f *Frozen) {
	d := o.Dim()
	if len(f.Mean) != d {
		f.Mean = make([]float32, d)
	}
	if len(f.Scale) != d {
		f.Scale = make([]float32, d)
	}
	for i := range o.Mean {
		f.Mean[i] = float32(o.Mean[i])
		f.Scale[i] = float32(1 / math.Sqrt(o.Var[i]+Epsilon))
	}
	f.Clip = float32(o.Clip)
}

// MarshalBinary encodes the committed statistics (not a pending batch).
func (o *Obs) MarshalBinary() ([]byte, error) {
	return encode(o.Clip, o.Count, o.Mean, o.Var, nil), nil
}

// UnmarshalBinary restores statistics MarshalBinary encoded, of the same dimension; the
// pending batch is emptied.
func (o *Obs) UnmarshalBinary(b []byte) error {
	clip, count, mean, vr, extra, err := decode(b)
	if err != nil {
		return err
	}
	if len(mean) != o.Dim() || len(extra) != 0 {
		return fmt.Errorf("%w: observation statistics of %d values, these observations have %d", ErrInput, len(mean), o.Dim())
	}
	o.Clip, o.Count = clip, count
	copy(o.Mean, mean)
	copy(o.Var, vr)
	clear(o.pending)
	o.shiftSet = false
	return nil
}

// Reward scales rewards by the running standard deviation of the discounted returns of the
// envs it is given, one value per env per step.
type Reward struct {
	Moments         // of the discounted returns, one component
	Gamma   float64 // the run's discount
	Clip    float64 // |scaled reward| bound; DefaultClip unless set
	// Returns is each env's discounted return so far in its episode.
	Returns []float64

	steps                   []float64 // per step: n, Σ(G−m), Σ(G−m)²
	s1, s2, shift, mean, vr []float64 // one-value scratch
}

// NewReward returns a reward scaler for envs envs discounting by gamma, clipping at clip (0:
// DefaultClip).
func NewReward(envs int, gamma, clip float64) *Reward {
	if clip == 0 {
		clip = DefaultClip
	}
	return &Reward{Moments: NewMoments(1), Gamma: gamma, Clip: clip, Returns: make([]float64, envs),
		s1: make([]float64, 1), s2: make([]float64, 1), shift: make([]float64, 1), mean: make([]float64, 1), vr: make([]float64, 1)}
}

// Scale writes the scaled rewards of a time-major rollout of T steps of len(r.Returns) envs
// (row t·N+i) into dst: for each step t, every env's return G ← γ·G + r is merged into the
// statistics as one batch, then each reward of the step becomes clip(r/√(var+ε)), and G is
// reset to 0 where the step ended an episode (terminated or truncated non-zero).
//
// steps ≥ T is the number of steps the statistics take: reduce, when not nil, is given the
// per-step sums [n, Σ(G−m), Σ(G−m)²] × steps (m the mean before the rollout) and must replace
// them with their sum over every process that scales its rollout with the same statistics
// (DD-PPO's ranks; a rank that collected fewer steps contributes nothing to the later ones).
// The statistics then stay the same in every process. dst may be rewards.
func (r *Reward) Scale(dst, rewards, terminated, truncated []float32, T, steps int, reduce func([]float64) error) error {
	n := len(r.Returns)
	rows := T * n
	if n == 0 || T < 0 || steps < T || len(rewards) < rows || len(terminated) < rows || len(truncated) < rows || len(dst) < rows {
		return fmt.Errorf("%w: scaling %d steps (statistics over %d) of %d envs from %d rewards, %d terminated, %d truncated into %d",
			ErrInput, T, steps, n, len(rewards), len(terminated), len(truncated), len(dst))
	}
	if cap(r.steps) < 3*steps {
		r.steps = make([]float64, 3*steps)
	}
	acc := r.steps[:3*steps]
	clear(acc)
	shift := r.Mean[0]
	for t := range T {
		a := acc[3*t : 3*t+3]
		for i := range n {
			row := t*n + i
			g := r.Returns[i]*r.Gamma + float64(rewards[row])
			v := g - shift
			a[0]++
			a[1] += v
			a[2] += v * v
			if terminated[row] != 0 || truncated[row] != 0 {
				g = 0
			}
			r.Returns[i] = g
		}
	}
	if reduce != nil {
		if err := reduce(acc); err != nil {
			return err
		}
	}
	r.shift[0] = shift
	for t := range steps {
		a := acc[3*t : 3*t+3]
		r.s1[0], r.s2[0] = a[1], a[2]
		r.mergeSums(a[0], r.s1, r.s2, r.shift, r.mean, r.vr)
		if t >= T {
			continue
		}
		div := math.Sqrt(r.Var[0] + Epsilon)
		for row := t * n; row < (t+1)*n; row++ {
			dst[row] = float32(min(max(float64(rewards[row])/div, -r.Clip), r.Clip))
		}
	}
	return nil
}

// MarshalBinary encodes the statistics and the envs' returns.
func (r *Reward) MarshalBinary() ([]byte, error) {
	return encode(r.Clip, r.Count, r.Mean, r.Var, r.Returns), nil
}

// UnmarshalBinary restores what MarshalBinary encoded, for as many envs.
func (r *Reward) UnmarshalBinary(b []byte) error {
	clip, count, mean, vr, returns, err := decode(b)
	if err != nil {
		return err
	}
	if len(mean) != 1 || len(returns) != len(r.Returns) {
		return fmt.Errorf("%w: reward statistics of %d values for %d envs, want 1 for %d", ErrInput, len(mean), len(returns), len(r.Returns))
	}
	r.Clip, r.Count = clip, count
	r.Mean[0], r.Var[0] = mean[0], vr[0]
	copy(r.Returns, returns)
	return nil
}

// encode writes the version byte 1, the dimension and the extra values' count (uint32 each),
// then clip, count, mean…, var…, extra… as little-endian float64s.
func encode(clip, count float64, mean, vr, extra []float64) []byte {
	b := make([]byte, 0, 9+8*(2+2*len(mean)+len(extra)))
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(mean)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(extra)))
	for _, v := range append([]float64{clip, count}, append(append(append([]float64(nil), mean...), vr...), extra...)...) {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

func decode(b []byte) (clip, count float64, mean, vr, extra []float64, err error) {
	if len(b) < 9 || b[0] != 1 {
		return 0, 0, nil, nil, nil, fmt.Errorf("%w: not normalisation statistics (%d bytes)", ErrInput, len(b))
	}
	d, e := int(binary.LittleEndian.Uint32(b[1:])), int(binary.LittleEndian.Uint32(b[5:]))
	if d > 1<<28 || e > 1<<28 || len(b) != 9+8*(2+2*d+e) {
		return 0, 0, nil, nil, nil, fmt.Errorf("%w: normalisation statistics of %d bytes for %d values and %d more", ErrInput, len(b), d, e)
	}
	vals := make([]float64, 2+2*d+e)
	for i := range vals {
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[9+8*i:]))
	}
	return vals[0], vals[1], vals[2 : 2+d], vals[2+d : 2+2*d], vals[2+2*d:], nil
}

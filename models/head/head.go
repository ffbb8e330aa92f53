package head

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/internal/kernels"
)

// Categorical is a categorical distribution over N actions, parameterised by logits laid out
// row-major as [batch×N].
//
// Its rows are worked in float32 as the logits come: one pass finds the row's maximum m and
// sums e_k = exp(l_k − m) (in float64); sampling then walks the same e_k to the first whose
// running sum exceeds u·Σe for one uniform u, and the log-probability is l_a − m − log Σe.
// Each e_k is within 2⁻²² of exact and each log-probability within 1e-6 of the float64
// log-softmax; the action is drawn exactly from the distribution those e_k give.
type Categorical struct{ N int }

func (c Categorical) check(logits []float32, actions []int32, logp []float32) error {
	if c.N < 1 {
		return fmt.Errorf("%w: categorical head over %d actions", ErrSpec, c.N)
	}
	if len(logits) < len(actions)*c.N {
		return fmt.Errorf("head: %d logits for a batch of %d rows of %d", len(logits), len(actions), c.N)
	}
	if logp != nil && len(logp) < len(actions) {
		return fmt.Errorf("head: logp holds %d values for a batch of %d", len(logp), len(actions))
	}
	return nil
}

// rowScratch is the number of e_k a categorical row keeps on the stack at a time: a wider row
// is worked in chunks, and sampling works its e_k out again in its second pass.
const rowScratch = 64

// normalise returns the index km of row i's first maximum m and Σ_k exp(l_k − m) (at least 1:
// e_km is 1), worked in chunks of buf, which keeps the e_k of a row up to rowScratch wide. A
// row holding NaN or whose maximum is ±Inf is an error.
func normalise(row []float32, i int, buf *[rowScratch]float32) (km int, m float32, sum float64, err error) {
	m = row[0]
	for k, l := range row {
		if l > m {
			km, m = k, l
		}
	}
	if m-m == 0 { // not NaN nor ±Inf; a NaN elsewhere makes the sum NaN
		for c := 0; c < len(row); c += rowScratch {
			sum += expShifted(buf[:], row[c:min(c+rowScratch, len(row))], m)
		}
	}
	if !(sum >= 1) {
		return 0, 0, 0, fmt.Errorf("head: logits of row %d are not finite (%v)", i, row)
	}
	return km, m, sum, nil
}

// rowLogp is log softmax(row)[a] from the row's maximum m and Σ_k exp(l_k − m) ≥ 1.
func rowLogp(row []float32, a int, m float32, sum float64) float32 {
	return float32(float64(row[a]) - float64(m) - logAtLeast1(sum))
}

// Sample draws one action per row of logits, len(actions) rows, all from rng. logp, when not
// nil, receives log softmax(logits)[action].
func (c Categorical) Sample(rng *rand.Rand, logits []float32, actions []int32, logp []float32) error {
	if rng == nil {
		return fmt.Errorf("head: Sample needs a random source")
	}
	return c.sample([]*rand.Rand{rng}, false, logits, actions, logp)
}

// SampleRows is Sample with a random stream per row: row i draws from rngs[i] (one uniform
// number), so that a row's action does not depend on the batch it is sampled in.
func (c Categorical) SampleRows(rngs []*rand.Rand, logits []float32, actions []int32, logp []float32) error {
	if err := checkStreams(rngs, len(actions)); err != nil {
		return err
	}
	return c.sample(rngs, true, logits, actions, logp)
}

// SampleUniform is SampleRows with each row's uniform number given: row i draws with u[i] in
// [0, 1) what SampleRows draws with rngs[i].Float64(). A caller that owns the streams'
// sources (a batcher's *rand.PCG per env) fills u without a call through the rand.Source
// interface per row.
func (c Categorical) SampleUniform(u []float64, logits []float32, actions []int32, logp []float32) error {
	if len(u) < len(actions) {
		return fmt.Errorf("head: %d uniform numbers for a batch of %d", len(u), len(actions))
	}
	if err := c.check(logits, actions, logp); err != nil || len(actions) == 0 {
		return err
	}
	if c.N == 2 {
		return sampleBinary(nil, false, u, logits, actions, logp)
	}
	return c.sampleRows(nil, false, u, logits, actions, logp)
}

// checkStreams checks that rngs holds a stream for each of rows rows.
func checkStreams(rngs []*rand.Rand, rows int) error {
	if len(rngs) < rows {
		return fmt.Errorf("head: %d random streams for a batch of %d", len(rngs), rows)
	}
	for i, r := range rngs[:rows] {
		if r == nil {
			return fmt.Errorf("head: the random stream of row %d is nil", i)
		}
	}
	return nil
}

func (c Categorical) sample(rngs []*rand.Rand, perRow bool, logits []float32, actions []int32, logp []float32) error {
	if err := c.check(logits, actions, logp); err != nil || len(actions) == 0 {
		return err
	}
	if c.N == 2 {
		return sampleBinary(rngs, perRow, nil, logits, actions, logp)
	}
	return c.sampleRows(rngs, perRow, nil, logits, actions, logp)
}

// sampleRows is sample over rows of any width (checked), row i's uniform number u[i] when u
// is not nil, else drawn from rngs (rngs[i] when perRow, else rngs[0]).
func (c Categorical) sampleRows(rngs []*rand.Rand, perRow bool, u []float64, logits []float32, actions []int32, logp []float32) error {
	n := c.N
	var buf [rowScratch]float32
	for i := range actions {
		row := logits[i*n : (i+1)*n]
		km, m, sum, err := normalise(row, i, &buf) // buf keeps the e_k of a row up to rowScratch wide
		if err != nil {
			return err
		}
		var x float64
		switch {
		case u != nil:
			x = u[i]
		case perRow:
			x = rngs[i].Float64()
		default:
			x = rngs[0].Float64()
		}
		actions[i] = int32(draw(row, m, sum, x*sum, km, &buf))
		if logp != nil {
			logp[i] = rowLogp(row, int(actions[i]), m, sum)
		}
	}
	return nil
}

// sampleBinary is sample over two logits (row i's uniform number us[i] when us is not nil),
// rowScratch rows at a time, in passes over the rows that each do one thing: each row's one exp, e = exp(−|l₁ − l₀|) (the larger logit's
// e_k is 1); each row's uniform number; the logs of the sums 1 + e; then each row's draw.
// It is the general inverse CDF written out for two actions: the same sums in the same
// order, so the same actions from the same numbers (binaryRows). Passes without calls
// inside let the rows' divisions and multiplications overlap, which a loop calling the
// stream, the log and the draw for each row in turn did not (it took 30–40% longer).
//
// With the uniform numbers given, a CPU with AVX-512 draws the rows eight at a time
// (kernels.Categorical2Sample: the same bits) up to the first chunk of rowScratch rows that
// holds a logit ±Inf or NaN; the loop here draws the rest from that chunk on, as it would have.
func sampleBinary(rngs []*rand.Rand, perRow bool, us []float64, logits []float32, actions []int32, logp []float32) error {
	start := 0
	if us != nil {
		start, _ = kernels.Categorical2Sample(rowScratch, logits, us, actions, logp)
	}
	return binaryFrom(start, rngs, perRow, us, logits, actions, logp)
}

// binaryFrom is sampleBinary's loop over the rows from start (a multiple of rowScratch) on.
func binaryFrom(start int, rngs []*rand.Rand, perRow bool, us []float64, logits []float32, actions []int32, logp []float32) error {
	if logp != nil {
		logp = logp[start:]
	}
	var neg, e [rowScratch]float32
	var u, lg [rowScratch]float64
	for r0 := start; r0 < len(actions); r0 += rowScratch {
		k := min(rowScratch, len(actions)-r0)
		for i := range k {
			l0, l1 := logits[2*(r0+i)], logits[2*(r0+i)+1]
			if m := max(l0, l1); m-m != 0 { // NaN or ±Inf: normalise words the error
				_, _, _, err := normalise(logits[2*(r0+i):2*(r0+i)+2], r0+i, &e)
				return err
			}
			neg[i] = -max(l1-l0, l0-l1)
		}
		expShifted(e[:k], neg[:k], 0)
		switch {
		case us != nil:
			copy(u[:k], us[r0:r0+k])
		case perRow:
			for i, r := range rngs[r0 : r0+k] {
				u[i] = r.Float64()
			}
		default:
			for i := range k {
				u[i] = rngs[0].Float64()
			}
		}
		logsOnePlus(lg[:k], e[:k])
		binaryRows(logits[2*r0:2*(r0+k)], e[:k], u[:k], lg[:k], actions[r0:r0+k], logp)
		if logp != nil {
			logp = logp[k:]
		}
	}
	return nil
}

// logsOnePlus writes lg[i] = logAtLeast1(1 + e[i]) for each e[i] in [0, 1]: the same
// bits, inline in one loop so that the rows' divisions overlap.
func logsOnePlus(lg []float64, e []float32) {
	lg = lg[:len(e)]
	for i, x := range e {
		lg[i] = logSeries(logReduce(1 + float64(x)))
	}
}

// binaryRows draws each row i of two logits l₀, l₁ (logits[2i], logits[2i+1]) with
// e[i] = exp(−|l₁ − l₀|) from the uniform number u[i], given lg[i] = log(1 + e[i]), into
// actions[i], and its log-probability into logp[i] when logp is not nil. The first maximum's
// e_k is 1 and the other's e[i]; action 1 is drawn when u·(1 + e) ≥ e₀ and e₁ > 0. Every
// choice is made on bits, not by branching: which logit is larger and which action is drawn
// are coin tosses, and a mispredicted branch costs more than the row's arithmetic.
func binaryRows(logits, e []float32, u, lg []float64, actions []int32, logp []float32) {
	n := len(e)
	logits, u, lg, actions = logits[:2*n], u[:n], lg[:n], actions[:n]
	if logp != nil {
		logp = logp[:n]
	}
	one := math.Float32bits(1)
	for i, x := range e {
		l0, l1 := logits[2*i], logits[2*i+1]
		sum := 1 + float64(x)
		km := math.Float32bits(l0-l1) >> 31 // 1 when l₁ > l₀: equal logits give +0, l₀ the maximum
		sel := -km                          // all ones when l₁ is the maximum
		xb := math.Float32bits(x)
		e0 := math.Float32frombits(one ^ (one^xb)&sel)                       // x when l₁ > l₀, else 1
		e1b := xb ^ (xb^one)&sel                                             // 1 when l₁ > l₀, else x
		tb, e0b := math.Float64bits(u[i]*sum), math.Float64bits(float64(e0)) // both ≥ 0: bits order as values
		a := uint32((e0b-tb-1)>>63) & (uint32(-int32(e1b)) >> 31)            // t ≥ e₀, and e₁ > 0
		actions[i] = int32(a)
		if logp != nil {
			// l_a − max(l₀, l₁): 0 for the maximum, −|l₁ − l₀| for the other; +0 as before.
			off := math.Float64frombits(math.Float64bits(-math.Abs(float64(l1)-float64(l0))) & -uint64(a^km))
			logp[i] = float32(off - lg[i])
		}
	}
}

// draw is the inverse CDF over a row's unnormalised e_k: the first action whose running sum
// exceeds t = u·Σe. buf holds the e_k of a row up to rowScratch wide; a wider row's are worked
// out again chunk by chunk. The running sum adds the same float64 terms in the same order as
// Σe did, so it ends at Σe > t; last (the last action of nonzero e_k) stands in for the
// one-in-2⁵³ rounding of u·Σe to Σe.
func draw(row []float32, m float32, sum, t float64, last int, buf *[rowScratch]float32) int {
	var cum float64
	for c := 0; c < len(row); c += rowScratch {
		e := buf[:min(rowScratch, len(row)-c)]
		if len(row) > rowScratch {
			expShifted(e, row[c:c+len(e)], m)
		}
		for k, x := range e {
			if x > 0 {
				last = c + k
			}
			if cum += float64(x); t < cum {
				return c + k
			}
		}
	}
	return last
}

// Mode picks the most probable action of each row (the first one on ties), as argmax does.
func (c Categorical) Mode(logits []float32, actions []int32, logp []float32) error {
	if err := c.check(logits, actions, logp); err != nil {
		return err
	}
	var buf [rowScratch]float32
	for i := range actions {
		row := logits[i*c.N : (i+1)*c.N]
		km, m, sum, err := normalise(row, i, &buf)
		if err != nil {
			return err
		}
		actions[i] = int32(km)
		if logp != nil {
			logp[i] = rowLogp(row, km, m, sum)
		}
	}
	return nil
}

// LogProb writes log softmax(logits)[actions[i]] for each row into logp.
func (c Categorical) LogProb(logits []float32, actions []int32, logp []float32) error {
	if logp == nil {
		return fmt.Errorf("head: LogProb needs a logp buffer")
	}
	if err := c.check(logits, actions, logp); err != nil {
		return err
	}
	var buf [rowScratch]float32
	for i, a := range actions {
		if a < 0 || int(a) >= c.N {
			return fmt.Errorf("head: action %d of row %d is outside 0..%d", a, i, c.N-1)
		}
		row := logits[i*c.N : (i+1)*c.N]
		_, m, sum, err := normalise(row, i, &buf)
		if err != nil {
			return err
		}
		logp[i] = rowLogp(row, int(a), m, sum)
	}
	return nil
}

// Gaussian is a diagonal Gaussian over len(Low) action dimensions. Its mean is laid out
// [batch×D]; its log standard deviation is either shared, [D], or per row, [batch×D].
// Actions are clipped to [Low, High] for the environment, as SB3 and CleanRL clip: the
// log-probability is that of the unclipped action, which is the one a learner trains on.
type Gaussian struct{ Low, High []float32 }

func (g Gaussian) check(mean, logStd, raw, clipped, logp []float32) (batch int, shared bool, err error) {
	d := len(g.Low)
	if d == 0 || len(g.High) != d {
		return 0, false, fmt.Errorf("%w: gaussian head with %d low and %d high bounds", ErrSpec, d, len(g.High))
	}
	if len(raw)%d != 0 {
		return 0, false, fmt.Errorf("head: action buffer of %d is not a multiple of the action size %d", len(raw), d)
	}
	batch = len(raw) / d
	shared = len(logStd) == d
	switch {
	case len(mean) < batch*d:
		return 0, false, fmt.Errorf("head: %d means for a batch of %d rows of %d", len(mean), batch, d)
	case !shared && len(logStd) < batch*d:
		return 0, false, fmt.Errorf("head: %d log_std values: want %d (shared) or %d (per row)", len(logStd), d, batch*d)
	case clipped != nil && len(clipped) < batch*d:
		return 0, false, fmt.Errorf("head: clipped buffer holds %d values, want %d", len(clipped), batch*d)
	case logp != nil && len(logp) < batch:
		return 0, false, fmt.Errorf("head: logp holds %d values for a batch of %d", len(logp), batch)
	}
	return batch, shared, nil
}

// Sample draws raw = mean + exp(logStd)·ε, ε ~ N(0, I), for len(raw)/D rows, all from rng.
// clipped, when not nil, receives raw clipped to the bounds; logp, when not nil, the
// log-density of raw.
func (g Gaussian) Sample(rng *rand.Rand, mean, logStd, raw, clipped, logp []float32) error {
	if rng == nil {
		return fmt.Errorf("head: Sample needs a random source")
	}
	return g.act([]*rand.Rand{rng}, false, mean, logStd, raw, clipped, logp)
}

// SampleRows is Sample with a random stream per row: row i draws its D normal numbers from
// rngs[i], so that a row's action does not depend on the batch it is sampled in.
func (g Gaussian) SampleRows(rngs []*rand.Rand, mean, logStd, raw, clipped, logp []float32) error {
	if d := len(g.Low); d > 0 {
		if err := checkStreams(rngs, len(raw)/d); err != nil {
			return err
		}
	}
	return g.act(rngs, true, mean, logStd, raw, clipped, logp)
}

// Mode sets raw to the mean (the deterministic action), with clipping and logp as in Sample.
func (g Gaussian) Mode(mean, logStd, raw, clipped, logp []float32) error {
	return g.act(nil, false, mean, logStd, raw, clipped, logp)
}

// scales holds the standard deviations σ_j = exp(logStd_j) of one log_std row and their
// inverses, so that a sampler works each out once per call (a shared log_std) or once per
// row (a per-row one) rather than per element. Rows wider than rowScratch are not cached:
// their samplers work σ out per element.
type scales struct {
	std, inv [rowScratch]float64
	sumLs    float64 // Σ_j logStd_j
}

// set caches logStd's row; it returns the first dimension whose log_std is NaN, or -1.
func (s *scales) set(logStd []float32) int {
	s.sumLs = 0
	for j, l := range logStd {
		ls := float64(l)
		if ls != ls {
			return j
		}
		s.std[j] = math.Exp(ls)
		s.inv[j] = 1 / s.std[j]
		s.sumLs += ls
	}
	return -1
}

// logStdRow is row i's log_std (D values): the shared row, or the row's own.
func logStdRow(logStd []float32, shared bool, i, d int) []float32 {
	if shared {
		return logStd[:d]
	}
	return logStd[i*d : (i+1)*d]
}

func badParams(i, j int, mu, ls float32) error {
	return fmt.Errorf("head: row %d dimension %d has mean %v, log_std %v", i, j, mu, ls)
}

// act samples (rngs not nil: row i from rngs[i] when perRow, else all from rngs[0]) or takes
// the mean.
func (g Gaussian) act(rngs []*rand.Rand, perRow bool, mean, logStd, raw, clipped, logp []float32) error {
	batch, shared, err := g.check(mean, logStd, raw, clipped, logp)
	if err != nil {
		return err
	}
	if batch == 0 {
		return nil
	}
	d := len(g.Low)
	cached := d <= rowScratch
	var sc scales
	if shared && cached {
		if j := sc.set(logStd[:d]); j >= 0 {
			return badParams(0, j, mean[j], logStd[j])
		}
	}
	var rng *rand.Rand
	if rngs != nil {
		rng = rngs[0]
	}
	for i := range batch {
		if perRow {
			rng = rngs[i]
		}
		ls := logStdRow(logStd, shared, i, d)
		if !shared && cached {
			if j := sc.set(ls); j >= 0 {
				return badParams(i, j, mean[i*d+j], ls[j])
			}
		}
		mu, out := mean[i*d:(i+1)*d], raw[i*d:(i+1)*d]
		sumLs, zz := sc.sumLs, 0.0
		if !cached {
			sumLs = 0
		}
		for j, m32 := range mu {
			m := float64(m32)
			var std, inv float64
			if cached {
				std, inv = sc.std[j], sc.inv[j]
			} else {
				l := float64(ls[j])
				std, inv = math.Exp(l), math.Exp(-l)
				sumLs += l
			}
			if m != m || std != std {
				return badParams(i, j, m32, ls[j])
			}
			a := m32
			if rng != nil {
				a = float32(m + std*rng.NormFloat64())
			}
			out[j] = a
			// z from the float32 action stored, the one a learner recomputes logp from.
			z := (float64(a) - m) * inv
			zz += z * z
		}
		if clipped != nil {
			clip(out, clipped[i*d:(i+1)*d], g.Low, g.High)
		}
		if logp != nil {
			logp[i] = float32(-0.5*zz - sumLs - float64(d)*halfLog2Pi)
		}
	}
	return nil
}

// clip writes x clipped to [lo, hi] element by element into dst.
func clip(x, dst, lo, hi []float32) {
	dst, lo, hi = dst[:len(x)], lo[:len(x)], hi[:len(x)]
	for j, v := range x {
		dst[j] = min(max(v, lo[j]), hi[j])
	}
}

package head

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
)

// binaryCase is one row of two logits and its uniform number for the sampling kernel's tests.
type binaryCase struct {
	l0, l1 float32
	u      float64
}

// binaryCases is rows rows of two finite logits with their uniform numbers, drawn to cover
// what the two-logit draw decides on: equal logits (±0 among them), differences from one ulp to
// beyond float32's range (e = exp(−|l₁ − l₀|) from 1 down to the last subnormal-free value and
// 0, where the action depends on e₁ > 0, around expShifted's cut at log 2⁻¹²⁶), logits of every
// scale, and uniform numbers at 0, just below 1, on the draw's threshold u·(1 + e) = e₀ and a
// few ulps either side, as the batcher's streams give them (multiples of 2⁻⁵³) and any double
// in [0, 1); a few rows take u outside [0, 1) (negative, NaN, 1 and above), where the kernel
// must still do the Go loop's integer arithmetic.
func binaryCases(rng *rand.Rand, rows int) []binaryCase {
	nz := float32(math.Copysign(0, -1))
	cut := float32(-expMinX)
	out := make([]binaryCase, rows)
	for i := range out {
		scale := math.Pow(10, float64(rng.IntN(13)-6))
		l0 := float32(scale * rng.NormFloat64())
		var l1 float32
		switch rng.IntN(12) {
		case 0: // equal logits
			l1 = l0
		case 1: // signed zeros, both ways round
			z := [][2]float32{{0, nz}, {nz, 0}, {0, 0}, {nz, nz}}[rng.IntN(4)]
			l0, l1 = z[0], z[1]
		case 2: // a few ulps apart
			l1 = l0
			for range 1 + rng.IntN(4) {
				l1 = math.Nextafter32(l1, float32(math.Copysign(math.Inf(1), rng.NormFloat64())))
			}
		case 3: // far apart: e underflows to 0, or is just above the cut
			l1 = l0 + float32(math.Copysign(60+200*rng.Float64(), rng.NormFloat64()))
		case 4: // a difference within a few ulps of expShifted's cut, log 2⁻¹²⁶
			d := cut
			for range rng.IntN(9) {
				d = math.Nextafter32(d, float32(math.Copysign(math.Inf(1), rng.NormFloat64())))
			}
			l0 = float32(rng.IntN(3) - 1)
			l1 = l0 + float32(math.Copysign(float64(d), rng.NormFloat64()))
		case 5: // huge logits: the difference overflows float32 to ±Inf
			l0 = float32(math.Copysign(1e38*(1+2*rng.Float64()), rng.NormFloat64()))
			l1 = -l0
		case 6: // subnormal logits
			l0 = float32(1e-40 * rng.NormFloat64())
			l1 = float32(1e-40 * rng.NormFloat64())
		default:
			l1 = float32(scale * rng.NormFloat64())
		}
		var u float64
		switch rng.IntN(10) {
		case 0:
			u = 0
		case 1:
			u = math.Nextafter(1, 0)
		case 2, 3: // on the threshold u·(1 + e) = e₀ and around it
			var e [1]float32
			expShifted(e[:], []float32{-max(l1-l0, l0-l1)}, 0)
			e0 := float64(1)
			if math.Float32bits(l0-l1)>>31 == 1 {
				e0 = float64(e[0])
			}
			u = e0 / (1 + float64(e[0]))
			for range rng.IntN(4) {
				u = math.Nextafter(u, math.Copysign(math.Inf(1), rng.NormFloat64()))
			}
		case 4:
			u = rng.Float64()
		case 5:
			if rng.IntN(50) == 0 { // outside the contract
				u = []float64{-0.25, math.Copysign(0, -1), 1, 1.5, math.NaN(), math.Inf(1)}[rng.IntN(6)]
				break
			}
			u = math.Float64frombits(rng.Uint64()&(1<<52-1) | 0x3fe0000000000000) // in [0.5, 1), any bits
		default:
			u = float64(rng.Uint64()<<11>>11) / (1 << 53) // a batcher's number
		}
		out[i] = binaryCase{l0, l1, u}
	}
	return out
}

// sameDraws fails t unless the two draws (actions and log-probabilities, nil or not) agree bit
// for bit.
func sameDraws(t *testing.T, what string, logits []float32, u []float64, acts, wantActs []int32, logp, wantLogp []float32) {
	t.Helper()
	for i := range acts {
		if acts[i] != wantActs[i] || (logp != nil && math.Float32bits(logp[i]) != math.Float32bits(wantLogp[i])) {
			var lp, wlp float32
			if logp != nil {
				lp, wlp = logp[i], wantLogp[i]
			}
			t.Fatalf("%s: row %d, logits %v %v (%#x %#x), u %v (%#x): action %d logp %v (%#x), Go loop %d logp %v (%#x)", what, i,
				logits[2*i], logits[2*i+1], math.Float32bits(logits[2*i]), math.Float32bits(logits[2*i+1]), u[i], math.Float64bits(u[i]),
				acts[i], lp, math.Float32bits(lp), wantActs[i], wlp, math.Float32bits(wlp))
		}
	}
}

// TestSampleUniformBinaryBits: over two logits a row, SampleUniform (on an AVX-512 CPU,
// kernels.Categorical2Sample, eight rows at a time) draws the Go loop's actions and
// log-probabilities bit for bit: 2²⁰ + 13 rows of binaryCases, with and without
// log-probabilities, and every batch size up to 3 chunks.
func TestSampleUniformBinaryBits(t *testing.T) {
	rows := 1<<20 + 13
	if testing.Short() {
		rows = 1<<16 + 13
	}
	cases := binaryCases(rand.New(rand.NewPCG(21, 22)), rows)
	logits, u := make([]float32, 2*rows), make([]float64, rows)
	for i, c := range cases {
		logits[2*i], logits[2*i+1], u[i] = c.l0, c.l1, c.u
	}
	if done, ok := kernels.Categorical2Sample(rowScratch, logits, u, make([]int32, rows), nil); !ok {
		if kernels.Level() == "avx512" {
			t.Fatal("no Categorical2Sample kernel on an AVX-512 CPU")
		}
		t.Logf("no kernel at level %s: the Go loop against itself", kernels.Level())
	} else if done != rows {
		t.Fatalf("Categorical2Sample drew %d of %d rows of finite logits", done, rows)
	}
	c := Categorical{N: 2}
	for _, withLogp := range []bool{true, false} {
		acts, wantActs := make([]int32, rows), make([]int32, rows)
		var logp, wantLogp []float32
		if withLogp {
			logp, wantLogp = make([]float32, rows), make([]float32, rows)
		}
		if err := c.SampleUniform(u, logits, acts, logp); err != nil {
			t.Fatal(err)
		}
		if err := binaryFrom(0, nil, false, u, logits, wantActs, wantLogp); err != nil {
			t.Fatal(err)
		}
		sameDraws(t, fmt.Sprintf("logp %v", withLogp), logits, u, acts, wantActs, logp, wantLogp)
	}
	for n := range 3*rowScratch + 1 {
		acts, wantActs := make([]int32, n), make([]int32, n)
		logp, wantLogp := make([]float32, n), make([]float32, n)
		if err := c.SampleUniform(u[:n], logits[:2*n], acts, logp); err != nil {
			t.Fatal(err)
		}
		if err := binaryFrom(0, nil, false, u[:n], logits[:2*n], wantActs, wantLogp); err != nil {
			t.Fatal(err)
		}
		sameDraws(t, fmt.Sprintf("%d rows", n), logits, u, acts, wantActs, logp, wantLogp)
	}
}

// TestSampleUniformBinaryNotFinite: a row with a logit ±Inf or NaN among finite ones, at the
// edges of the chunks and inside them. −Inf beside a finite logit is a row like any other
// (e = 0), drawn by the Go loop from its chunk on with the same bits; NaN, +Inf or both −Inf is
// the Go loop's error, word for word, with the same rows written before it and none after.
func TestSampleUniformBinaryNotFinite(t *testing.T) {
	const rows = 1000
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := binaryCases(rand.New(rand.NewPCG(23, 24)), rows)
	for _, bad := range [][2]float32{{-inf, 0.5}, {3, -inf}, {inf, 0}, {0, inf}, {nan, 1}, {1, nan}, {-inf, -inf}, {-inf, inf}, {nan, nan}} {
		for _, at := range []int{0, 7, 8, rowScratch - 1, rowScratch, rowScratch + 1, 500, rows - 1} {
			logits, u := make([]float32, 2*rows), make([]float64, rows)
			for i, c := range cases {
				logits[2*i], logits[2*i+1], u[i] = c.l0, c.l1, c.u
			}
			logits[2*at], logits[2*at+1] = bad[0], bad[1]
			acts, wantActs := make([]int32, rows), make([]int32, rows)
			logp, wantLogp := make([]float32, rows), make([]float32, rows)
			for i := range rows { // a row left unwritten keeps these
				acts[i], wantActs[i], logp[i], wantLogp[i] = -7, -7, -7, -7
			}
			err := Categorical{N: 2}.SampleUniform(u, logits, acts, logp)
			wantErr := binaryFrom(0, nil, false, u, logits, wantActs, wantLogp)
			what := fmt.Sprintf("logits %v at row %d", bad, at)
			if fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("%s: error %v, Go loop %v", what, err, wantErr)
			}
			finite := func(x float32) bool { return x-x == 0 }
			if bad[0] == -inf && finite(bad[1]) || bad[1] == -inf && finite(bad[0]) {
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			} else if err == nil {
				t.Fatalf("%s: no error", what)
			}
			sameDraws(t, what, logits, u, acts, wantActs, logp, wantLogp)
			if done, ok := kernels.Categorical2Sample(rowScratch, logits, u, acts, logp); ok && done != at-at%rowScratch {
				t.Fatalf("%s: Categorical2Sample drew %d rows, want the %d before its chunk", what, done, at-at%rowScratch)
			}
		}
	}
}

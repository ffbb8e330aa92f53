package head

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// softmax64 is the float64 reference: softmax and log-softmax of a float32 row.
func softmax64(row []float32) (p, logp []float64) {
	m := math.Inf(-1)
	for _, l := range row {
		m = math.Max(m, float64(l))
	}
	var z float64
	for _, l := range row {
		z += math.Exp(float64(l) - m)
	}
	for _, l := range row {
		lp := float64(l) - m - math.Log(z)
		p, logp = append(p, math.Exp(lp)), append(logp, lp)
	}
	return p, logp
}

// chiSquareCritical is the 1−α quantile of χ² with k degrees of freedom for α = 10⁻³, by the
// Wilson–Hilferty approximation (within 1% for k ≥ 1 at this α).
func chiSquareCritical(k int) float64 {
	const z = 3.090232 // standard normal quantile 0.999
	f := float64(k)
	c := 1 - 2/(9*f) + z*math.Sqrt(2/(9*f))
	return f * c * c * c
}

// chiSquare is Pearson's statistic of counts against probabilities p over n draws and its
// degrees of freedom, with the actions expected fewer than 5 times pooled into one cell. An
// action of probability 0 that was drawn gives +Inf.
func chiSquare(counts []int, p []float64, n int) (stat float64, df int) {
	var poolE float64
	var poolO int
	cells := 0
	for k, pk := range p {
		e := pk * float64(n)
		switch {
		case pk == 0 && counts[k] > 0:
			return math.Inf(1), 0
		case e < 5:
			poolE += e
			poolO += counts[k]
		default:
			d := float64(counts[k]) - e
			stat += d * d / e
			cells++
		}
	}
	if poolE > 0 {
		d := float64(poolO) - poolE
		stat += d * d / math.Max(poolE, 1e-300)
		cells++
	}
	return stat, cells - 1
}

// categoricalCases are logit rows worth a frequency test: two actions (the special path),
// ties, a masked action, logits far apart and shifted far from 0, and rows wider than
// rowScratch (sampled in chunks).
func categoricalCases() map[string][]float32 {
	rng := rand.New(rand.NewPCG(11, 12))
	randRow := func(n int, sigma float64) []float32 {
		r := make([]float32, n)
		for j := range r {
			r[j] = float32(sigma * rng.NormFloat64())
		}
		return r
	}
	ninf := float32(math.Inf(-1))
	return map[string][]float32{
		"N=2":             {0.3, -1.1},
		"N=2 tie":         {2, 2},
		"N=2 far":         {6, -4},
		"N=2 masked":      {ninf, 0.5},
		"N=2 shifted":     {-1e4, -1e4 + 1},
		"N=3 0.1/0.2/0.7": {0, float32(math.Log(2)), float32(math.Log(7))},
		"N=5 masked":      {0.2, ninf, -0.7, 1.5, ninf},
		"N=18":            randRow(18, 2),
		"N=100":           randRow(100, 1),
		"N=130 far":       randRow(130, 4),
	}
}

// TestCategoricalDistribution: the frequencies of 200000 draws pass Pearson's χ² test against
// the float64 softmax at α = 10⁻³ (masked actions never drawn), through Sample (one stream)
// and SampleRows (one stream per row); every log-probability written is within 1e-6 of the
// float64 log-softmax of the action drawn, as are Mode's and LogProb's.
func TestCategoricalDistribution(t *testing.T) {
	const n = 200000
	rngs := rowStreams(n)
	for name, row := range categoricalCases() {
		k := len(row)
		p, ref := softmax64(row)
		c := Categorical{N: k}
		logits := make([]float32, 0, n*k)
		for range n {
			logits = append(logits, row...)
		}
		for _, path := range []string{"Sample", "SampleRows"} {
			acts, logp := make([]int32, n), make([]float32, n)
			var err error
			if path == "Sample" {
				err = c.Sample(rand.New(rand.NewPCG(13, uint64(k))), logits, acts, logp)
			} else {
				err = c.SampleRows(rngs, logits, acts, logp)
			}
			if err != nil {
				t.Fatalf("%s %s: %v", name, path, err)
			}
			counts := make([]int, k)
			for i, a := range acts {
				counts[a]++
				if d := math.Abs(float64(logp[i]) - ref[a]); d > 1e-6 {
					t.Fatalf("%s %s draw %d: action %d logp %v, float64 %v (off %.2g)", name, path, i, a, logp[i], ref[a], d)
				}
			}
			stat, df := chiSquare(counts, p, n)
			if df == 0 && !math.IsInf(stat, 1) {
				continue // one action of probability ~1: nothing to test but the masked ones
			}
			if crit := chiSquareCritical(max(df, 1)); !(stat <= crit) {
				t.Errorf("%s %s: χ² = %.2f with %d degrees of freedom, critical %.2f at α = 1e-3; counts %v, probabilities %v",
					name, path, stat, df, crit, counts, p)
			}
		}
		acts, logp := make([]int32, 1), make([]float32, 1)
		if err := c.Mode(row, acts, logp); err != nil {
			t.Fatal(err)
		}
		if want := slices.Index(p, slices.Max(p)); int(acts[0]) != want || math.Abs(float64(logp[0])-ref[want]) > 1e-6 {
			t.Errorf("%s: Mode %d logp %v, want %d and %v", name, acts[0], logp[0], want, ref[want])
		}
		for a := range k {
			if math.IsInf(ref[a], -1) {
				continue
			}
			if err := c.LogProb(row, []int32{int32(a)}, logp); err != nil || math.Abs(float64(logp[0])-ref[a]) > 1e-6 {
				t.Errorf("%s: LogProb of %d is %v (%v), float64 %v", name, a, logp[0], err, ref[a])
			}
		}
	}
}

// A row's draw depends on its stream only: sampling it alone, from a fresh copy of its stream,
// gives the action it got in the batch.
func TestSampleRowsIndependentOfBatch(t *testing.T) {
	const rows = 300
	for _, k := range []int{2, 7, 70} {
		logits := normals(rows*k, 1.5)
		acts, logp := make([]int32, rows), make([]float32, rows)
		if err := (Categorical{N: k}).SampleRows(rowStreams(rows), logits, acts, logp); err != nil {
			t.Fatal(err)
		}
		fresh := rowStreams(rows)
		for i := range rows {
			a, lp := make([]int32, 1), make([]float32, 1)
			if err := (Categorical{N: k}).SampleRows(fresh[i:i+1], logits[i*k:(i+1)*k], a, lp); err != nil {
				t.Fatal(err)
			}
			if a[0] != acts[i] || lp[0] != logp[i] {
				t.Fatalf("N=%d row %d: %d (%v) in the batch, %d (%v) alone", k, i, acts[i], logp[i], a[0], lp[0])
			}
		}
	}
	const d = 3
	g := Gaussian{Low: []float32{-1, -1, -1}, High: []float32{1, 1, 1}}
	mean, logStd := normals(rows*d, 1), normals(rows*d, 0.5)
	raw, logp := make([]float32, rows*d), make([]float32, rows)
	if err := g.SampleRows(rowStreams(rows), mean, logStd, raw, nil, logp); err != nil {
		t.Fatal(err)
	}
	fresh := rowStreams(rows)
	for i := range rows {
		r, lp := make([]float32, d), make([]float32, 1)
		if err := g.SampleRows(fresh[i:i+1], mean[i*d:(i+1)*d], logStd[i*d:(i+1)*d], r, nil, lp); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r, raw[i*d:(i+1)*d]) || lp[0] != logp[i] {
			t.Fatalf("gaussian row %d: %v (%v) in the batch, %v (%v) alone", i, raw[i*d:(i+1)*d], logp[i], r, lp[0])
		}
	}
}

// ksStatistic is the Kolmogorov–Smirnov distance between the sample x (sorted here) and the
// standard normal CDF.
func ksStatistic(x []float64) float64 {
	sort.Float64s(x)
	n := float64(len(x))
	var d float64
	for i, v := range x {
		f := 0.5 * math.Erfc(-v/math.Sqrt2)
		d = max(d, math.Abs(f-float64(i)/n), math.Abs(float64(i+1)/n-f))
	}
	return d
}

// TestGaussianDistribution: 100000 rows of three dimensions, each with its own mean and
// standard deviation, drawn through Sample and SampleRows with the log_std shared and per row;
// each dimension's standardised draws (a − μ)/σ pass the Kolmogorov–Smirnov test against the
// standard normal CDF at α = 10⁻³ (critical distance 1.95/√n), and every log-density is within
// 1e-6 (relative, for magnitudes above 1) of the float64 density of the action stored.
func TestGaussianDistribution(t *testing.T) {
	const n, d = 100000, 3
	g := Gaussian{Low: []float32{-5, -5, -5}, High: []float32{5, 5, 5}}
	sharedLs := []float32{float32(math.Log(0.3)), 0, float32(math.Log(2.5))}
	mu := []float32{-1.5, 0.25, 3}
	mean := make([]float32, 0, n*d)
	perRow := make([]float32, 0, n*d)
	for range n {
		mean = append(mean, mu...)
		perRow = append(perRow, sharedLs...)
	}
	crit := 1.95 / math.Sqrt(n)
	for _, tc := range []struct {
		name   string
		logStd []float32
		rows   bool
	}{{"shared/Sample", sharedLs, false}, {"shared/SampleRows", sharedLs, true}, {"per row/SampleRows", perRow, true}, {"per row/Sample", perRow, false}} {
		raw, clipped, logp := make([]float32, n*d), make([]float32, n*d), make([]float32, n)
		var err error
		if tc.rows {
			err = g.SampleRows(rowStreams(n), mean, tc.logStd, raw, clipped, logp)
		} else {
			err = g.Sample(rand.New(rand.NewPCG(17, 18)), mean, tc.logStd, raw, clipped, logp)
		}
		if err != nil {
			t.Fatal(err)
		}
		for j := range d {
			sigma := math.Exp(float64(sharedLs[j]))
			z := make([]float64, n)
			for i := range n {
				z[i] = (float64(raw[i*d+j]) - float64(mu[j])) / sigma
				if c := clipped[i*d+j]; c != min(max(raw[i*d+j], -5), 5) {
					t.Fatalf("%s row %d: %v clipped to %v", tc.name, i, raw[i*d+j], c)
				}
			}
			if ks := ksStatistic(z); ks > crit {
				t.Errorf("%s dimension %d: Kolmogorov–Smirnov distance %.4f, critical %.4f", tc.name, j, ks, crit)
			}
		}
		for i := range n {
			var want float64
			for j := range d {
				s := float64(sharedLs[j])
				z := (float64(raw[i*d+j]) - float64(mu[j])) / math.Exp(s)
				want += -0.5*z*z - s - 0.5*math.Log(2*math.Pi)
			}
			if diff := math.Abs(float64(logp[i]) - want); diff > 1e-6*math.Max(1, math.Abs(want)) {
				t.Fatalf("%s row %d: logp %v, float64 %v", tc.name, i, logp[i], want)
			}
		}
	}
}

// expShifted is within 2⁻²² relative of math.Exp over float32's whole normal range below 0,
// exactly 1 at the maximum, 0 below it and for −Inf, NaN for NaN; its sum is the float64 sum
// of what it wrote.
func TestExpShifted(t *testing.T) {
	var x []float32
	for v := float32(0); v > -87.5; v -= 0.00377 {
		x = append(x, v)
	}
	x = append(x, 0, -0x1p-30, expMinX, float32(math.Nextafter32(expMinX, 0)), -87.4, -200, float32(math.Inf(-1)))
	e := make([]float32, len(x))
	sum := expShifted(e, x, 0)
	var want float64
	for k, v := range x {
		want += float64(e[k])
		ref := math.Exp(float64(v))
		switch {
		case v < expMinX:
			if e[k] != 0 {
				t.Errorf("exp(%v) = %v, want 0 below %v", v, e[k], expMinX)
			}
		case math.Abs(float64(e[k])-ref) > 0x1p-22*ref:
			t.Errorf("exp(%v) = %v, want %v (relative error %.3g)", v, e[k], ref, math.Abs(float64(e[k])-ref)/ref)
		}
	}
	if sum != want {
		t.Errorf("sum %v, want %v", sum, want)
	}
	if expShifted(e[:1], []float32{3.5}, 3.5); e[0] != 1 {
		t.Errorf("exp(0) = %v, want exactly 1", e[0])
	}
	if s := expShifted(e[:2], []float32{0, float32(math.NaN())}, 0); !math.IsNaN(s) || !math.IsNaN(float64(e[1])) {
		t.Errorf("exp(NaN) = %v, sum %v; want NaN", e[1], s)
	}
}

// logAtLeast1 is within 1e-9 of math.Log from 1 to 2¹⁷, around √2's mantissa boundary and at
// powers of two.
func TestLogAtLeast1(t *testing.T) {
	xs := []float64{1, math.Sqrt2, math.Nextafter(math.Sqrt2, 2), math.Nextafter(math.Sqrt2, 0), 2, 2 * math.Sqrt2, 65536, 1 + 0x1p-52}
	for x := 1.0; x < 1<<17; x *= 1.0007 {
		xs = append(xs, x)
	}
	for _, x := range xs {
		if got, want := logAtLeast1(x), math.Log(x); math.Abs(got-want) > 1e-9 {
			t.Errorf("log %v = %v, want %v", x, got, want)
		}
	}
}

// Each bad row is refused with its index, through both categorical paths (two actions, more).
func TestCategoricalNotFinite(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, row := range [][]float32{{nan, 0}, {0, nan}, {inf, 0}, {-inf, -inf}, {0, 1, nan}, {nan, 1, 0}, {0, inf, 1}, {-inf, -inf, -inf}} {
		k := len(row)
		logits := append(make([]float32, k), row...) // row 1 is bad
		for name, err := range map[string]error{
			"Sample":     Categorical{N: k}.Sample(rand.New(rand.NewPCG(1, 1)), logits, make([]int32, 2), nil),
			"SampleRows": Categorical{N: k}.SampleRows(rowStreams(2), logits, make([]int32, 2), make([]float32, 2)),
			"Mode":       Categorical{N: k}.Mode(logits, make([]int32, 2), nil),
			"LogProb":    Categorical{N: k}.LogProb(logits, make([]int32, 2), make([]float32, 2)),
		} {
			if want := "row 1 are not finite"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v %s: error %v, want one saying %q", row, name, err, want)
			}
		}
	}
}

// An empty batch is no error and draws nothing, with or without streams.
func TestEmptyBatch(t *testing.T) {
	g := Gaussian{Low: []float32{-1}, High: []float32{1}}
	for name, err := range map[string]error{
		"Categorical.SampleRows": Categorical{N: 2}.SampleRows(nil, nil, nil, nil),
		"Categorical.Sample":     Categorical{N: 7}.Sample(rand.New(rand.NewPCG(1, 1)), nil, nil, nil),
		"Gaussian.SampleRows":    g.SampleRows(nil, nil, []float32{0}, nil, nil, nil),
		"Gaussian.Sample":        g.Sample(rand.New(rand.NewPCG(1, 1)), nil, []float32{0}, nil, nil, nil),
	} {
		if err != nil {
			t.Errorf("%s of no rows: %v", name, err)
		}
	}
}

// The two-action path is the general inverse CDF written out: from the same uniform numbers
// it draws the same actions with the same log-probabilities as normalise and draw, ties,
// masked and far-apart logits included.
func TestBinaryMatchesGeneral(t *testing.T) {
	const rows = 5000
	logits := normals(2*rows, 3)
	ninf := float32(math.Inf(-1))
	copy(logits, []float32{1, 1, ninf, 0, 0, ninf, 40, -40, -1e4, -1e4 + 0.5, 0, 200, 200, 0, -3, -3})
	acts, logp := make([]int32, rows), make([]float32, rows)
	if err := (Categorical{N: 2}).SampleRows(rowStreams(rows), logits, acts, logp); err != nil {
		t.Fatal(err)
	}
	fresh := rowStreams(rows)
	var buf [rowScratch]float32
	for i := range rows {
		row := logits[2*i : 2*i+2]
		km, m, sum, err := normalise(row, i, &buf)
		if err != nil {
			t.Fatal(err)
		}
		a := draw(row, m, sum, fresh[i].Float64()*sum, km, &buf)
		if lp := rowLogp(row, a, m, sum); int32(a) != acts[i] || lp != logp[i] {
			t.Fatalf("row %d %v: two-action path %d (%v), general %d (%v)", i, row, acts[i], logp[i], a, lp)
		}
	}
}

// SampleUniform draws from given uniform numbers what SampleRows draws from the streams that
// give them, two actions and more, with and without log-probabilities; too few numbers is an
// error.
func TestSampleUniformMatchesSampleRows(t *testing.T) {
	const rows = 3000
	for _, n := range []int{2, 5} {
		logits := normals(n*rows, 2)
		acts, logp := make([]int32, rows), make([]float32, rows)
		if err := (Categorical{N: n}).SampleRows(rowStreams(rows), logits, acts, logp); err != nil {
			t.Fatal(err)
		}
		u := make([]float64, rows)
		for i, r := range rowStreams(rows) {
			u[i] = r.Float64()
		}
		for _, withLogp := range []bool{true, false} {
			got, gotLogp := make([]int32, rows), []float32(nil)
			if withLogp {
				gotLogp = make([]float32, rows)
			}
			if err := (Categorical{N: n}).SampleUniform(u, logits, got, gotLogp); err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				if got[i] != acts[i] || (withLogp && gotLogp[i] != logp[i]) {
					t.Fatalf("N=%d row %d: SampleUniform %d, SampleRows %d (logp %v)", n, i, got[i], acts[i], withLogp)
				}
			}
		}
		if err := (Categorical{N: n}).SampleUniform(u[:rows-1], logits, acts, nil); err == nil || !strings.Contains(err.Error(), "uniform numbers") {
			t.Errorf("N=%d: %d numbers for %d rows gave %v, want an error", n, rows-1, rows, err)
		}
	}
}

package head

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
)

// Hand-worked: log(e + e² + e³) = log(30.19287485) = 3.407605964; a shift of every logit by c
// shifts it by c; the edge cases follow the limits.
func TestLogSumExp(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		x    []float32
		want float64
	}{
		{"1,2,3", []float32{1, 2, 3}, 3.407605964},
		{"shifted by 1000", []float32{1001, 1002, 1003}, 1003.407605964},
		{"shifted by -1000", []float32{-999, -998, -997}, -996.592394036},
		{"one", []float32{-2.5}, -2.5},
		{"two equal", []float32{7, 7}, 7 + math.Ln2},
		{"masked", []float32{0, -inf}, 0},
		{"empty", nil, math.Inf(-1)},
		{"all -Inf", []float32{-inf, -inf}, math.Inf(-1)},
		{"+Inf", []float32{0, inf}, math.Inf(1)},
		{"NaN", []float32{0, float32(math.NaN())}, math.NaN()},
	} {
		got := LogSumExp(tc.x)
		if !(near(got, tc.want, 1e-9) || got == tc.want || (math.IsNaN(got) && math.IsNaN(tc.want))) {
			t.Errorf("%s: LogSumExp %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLogSumExpSkipsTheMaximum: LogSumExp, which takes the maximum's term as 1 without an
// exp, has every bit of the formula worked out in full (exp(0) is exactly 1), over random rows
// with ties, wide and narrow ranges and ±0.
func TestLogSumExpSkipsTheMaximum(t *testing.T) {
	full := func(x []float32) float64 { // every term through exp, as LogSumExp was written
		m := float64(slices.Max(x))
		terms := make([]float64, len(x))
		for j, v := range x {
			terms[j] = math.Exp(float64(v) - m)
		}
		sum := 0.0
		for _, e := range terms {
			sum += e
		}
		return m + math.Log(sum)
	}
	rng := rand.New(rand.NewPCG(8, 9))
	for i := range 20000 {
		x := make([]float32, 1+i%7)
		for j := range x {
			switch rng.IntN(6) {
			case 0:
				x[j] = x[rng.IntN(len(x))] // a tie (or 0)
			case 1:
				x[j] = float32(math.Copysign(0, rng.NormFloat64()))
			default:
				x[j] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(5)-2)))
			}
		}
		if got, want := LogSumExp(x), full(x); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("LogSumExp(%v) = %v, the full formula %v", x, got, want)
		}
	}
}

// TestCategoricalForwardRows: the two-pass rows give CategoricalForward's bits row by row.
func TestCategoricalForwardRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for _, n := range []int{1, 2, 3, 18} {
		const rows = 67
		logits := make([]float32, rows*n)
		for i := range logits {
			logits[i] = float32(3 * rng.NormFloat64())
		}
		acts := make([]int32, rows)
		for i := range acts {
			acts[i] = int32(rng.IntN(n))
		}
		ls, ps := make([]float64, rows*n), make([]float64, rows*n)
		logp, ent := make([]float64, rows), make([]float64, rows)
		CategoricalForwardRows(n, logits, acts, ls, ps, logp, ent)
		wls, wps := make([]float64, n), make([]float64, n)
		for i, a := range acts {
			wlp, went := CategoricalForward(logits[i*n:(i+1)*n], int(a), wls, wps)
			same := math.Float64bits(logp[i]) == math.Float64bits(wlp) && math.Float64bits(ent[i]) == math.Float64bits(went)
			for j := range n {
				same = same && math.Float64bits(ls[i*n+j]) == math.Float64bits(wls[j]) && math.Float64bits(ps[i*n+j]) == math.Float64bits(wps[j])
			}
			if !same {
				t.Fatalf("n %d row %d: logp %v entropy %v log-softmax %v probs %v; by row %v %v %v %v",
					n, i, logp[i], ent[i], ls[i*n:(i+1)*n], ps[i*n:(i+1)*n], wlp, went, wls, wps)
			}
		}
	}
}

// TestCategoricalForward2: the two-logit path against the general row's formulas in float64,
// for logits from equal to 200 apart and around ±1e4; non-finite logits take the general row.
// The reference shifts the logits by their maximum m first (exact for float32 logits), so its
// probabilities are exact to rounding; the log-softmax l_j − lse, of either, carries lse's
// rounding, an ulp of m, and so does the entropy: each value is compared to within 4 ulp of
// 1 + |m| + |value|.
func TestCategoricalForward2(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	cases := [][2]float32{{0, 0}, {1, 1}, {-3, 2}, {2, -3}, {0, 200}, {200, 0}, {-1e4, -1e4 + 0.5}, {1e4, 1e4 - 30}, {0, 1e-7}}
	for range 2000 {
		cases = append(cases, [2]float32{float32(5 * rng.NormFloat64()), float32(5 * rng.NormFloat64())})
	}
	for _, c := range cases {
		x0, x1 := float64(c[0]), float64(c[1])
		m := max(x0, x1)
		close := func(got, want float64) bool {
			return math.Abs(got-want) <= 4*0x1p-52*(max(1, math.Abs(m))+math.Abs(want))
		}
		d0, d1 := x0-m, x1-m
		lse0 := math.Log(math.Exp(d0) + math.Exp(d1))
		wls := []float64{d0 - lse0, d1 - lse0}
		wp := []float64{math.Exp(wls[0]), math.Exp(wls[1])}
		wh := -(wp[0]*wls[0] + wp[1]*wls[1])
		for a := range 2 {
			ls, p := make([]float64, 2), make([]float64, 2)
			lp, h, ok := categoricalForward2(c[0], c[1], a, ls, p)
			if !ok || !close(lp, wls[a]) || !close(h, wh) || !close(ls[0], wls[0]) || !close(ls[1], wls[1]) || !close(p[0], wp[0]) || !close(p[1], wp[1]) {
				t.Fatalf("logits %v action %d: logp %v entropy %v log-softmax %v probs %v (ok %v); want %v %v %v %v",
					c, a, lp, h, ls, p, ok, wls[a], wh, wls, wp)
			}
		}
	}
	inf := float32(math.Inf(1))
	for _, c := range [][2]float32{{-inf, 0}, {0, inf}, {float32(math.NaN()), 0}} {
		if _, _, ok := categoricalForward2(c[0], c[1], 0, make([]float64, 2), make([]float64, 2)); ok {
			t.Errorf("logits %v: the two-logit path took a non-finite row", c)
		}
	}
}

// LogSoftmax of (0, log 2, log 7) is log(0.1, 0.2, 0.7); its backward matches central
// differences of L = Σ_j w_j·y_j.
func TestLogSoftmax(t *testing.T) {
	x := []float32{0, float32(math.Log(2)), float32(math.Log(7))}
	y := make([]float32, 3)
	LogSoftmax(y, x)
	for j, p := range []float64{0.1, 0.2, 0.7} {
		if !near(float64(y[j]), math.Log(p), 1e-6) {
			t.Errorf("y[%d] = %v, want log %v", j, y[j], p)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	x = gridRow(rng, 7)
	w := gridRow(rng, 7)
	y, dx := make([]float32, 7), make([]float32, 7)
	LogSoftmax(y, x)
	LogSoftmaxBackward(dx, y, w)
	loss := func(x []float32) float64 {
		var l float64
		lse := LogSumExp(x)
		for j, v := range x {
			l += float64(w[j]) * (float64(v) - lse)
		}
		return l
	}
	checkGrad(t, "LogSoftmax", x, dx, loss)
}

// Hand-worked for logits (0, log 2, log 7) = log(0.1, 0.2, 0.7) and action 2:
// logp = log 0.7 = -0.356674944, H = -Σ p log p = 0.801818553,
// ∂logp/∂z = (-0.1, -0.2, 0.3), ∂H/∂z_j = -p_j(log p_j + H) = (0.150077, 0.161524, -0.311601).
func TestCategoricalForwardBackwardByHand(t *testing.T) {
	logits := []float32{0, float32(math.Log(2)), float32(math.Log(7))}
	ls, p := make([]float64, 3), make([]float64, 3)
	logp, h := CategoricalForward(logits, 2, ls, p)
	if !near(logp, -0.356674944, 1e-7) || !near(h, 0.801818553, 1e-7) {
		t.Errorf("logp %v H %v, want -0.356674944 and 0.801818553", logp, h)
	}
	d := make([]float32, 3)
	for _, tc := range []struct {
		dLogp, dH float64
		want      []float64
	}{
		{1, 0, []float64{-0.1, -0.2, 0.3}},
		{0, 1, []float64{0.1500767, 0.1615239, -0.3116006}},
		{2, -0.5, []float64{-0.2 - 0.5*0.1500767, -0.4 - 0.5*0.1615239, 0.6 + 0.5*0.3116006}},
	} {
		CategoricalBackward(ls, p, 2, h, tc.dLogp, tc.dH, d)
		for j, w := range tc.want {
			if !near(float64(d[j]), w, 1e-6) {
				t.Errorf("dLogp %v dH %v: ∂/∂z_%d = %v, want %v", tc.dLogp, tc.dH, j, d[j], w)
			}
		}
	}
}

// CategoricalBackward matches central differences of L = α·logp + β·H, for several widths
// and actions.
func TestCategoricalBackwardFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 5, 18} {
		logits := gridRow(rng, n)
		a := rng.IntN(n)
		const alpha, beta = 0.7, -1.3
		ls, p := make([]float64, n), make([]float64, n)
		_, h := CategoricalForward(logits, a, ls, p)
		d := make([]float32, n)
		CategoricalBackward(ls, p, a, h, alpha, beta, d)
		checkGrad(t, "categorical", logits, d, func(x []float32) float64 {
			lp, h := CategoricalForward(x, a, make([]float64, n), make([]float64, n))
			return alpha*lp + beta*h
		})
	}
}

// Hand-worked: action (1, -0.5), mean (0, 0.5), log_std (0, log 2): z = (1, -0.5),
// logp = -½(1 + 0.25) - log 2 - 2·½log 2π = -3.156024247, H = log 2 + 2·(½ + ½log 2π) =
// 3.531024247; ∂logp/∂mean = z/σ = (1, -0.25), ∂logp/∂log_std = z² - 1 = (0, -0.75).
func TestGaussianForwardBackwardByHand(t *testing.T) {
	a, mean, logStd := []float32{1, -0.5}, []float32{0, 0.5}, []float32{0, float32(math.Log(2))}
	z, inv := make([]float64, 2), make([]float64, 2)
	logp, h := GaussianForward(a, mean, logStd, z, inv)
	if !near(logp, -3.156024247, 1e-7) || !near(h, 3.531024247, 1e-7) {
		t.Errorf("logp %v H %v, want -3.156024247 and 3.531024247", logp, h)
	}
	if lp := GaussianLogProb(a, mean, logStd); lp != logp {
		t.Errorf("GaussianLogProb %v, GaussianForward %v", lp, logp)
	}
	if e := GaussianEntropy(logStd); e != h {
		t.Errorf("GaussianEntropy %v, GaussianForward %v", e, h)
	}
	dMean, dLogStd := make([]float32, 2), make([]float32, 2)
	GaussianBackward(z, inv, 1, 0.5, dMean, dLogStd)
	for j, w := range []float64{1, -0.25} {
		if !near(float64(dMean[j]), w, 1e-7) {
			t.Errorf("∂/∂mean_%d = %v, want %v", j, dMean[j], w)
		}
	}
	for j, w := range []float64{0 + 0.5, -0.75 + 0.5} {
		if !near(float64(dLogStd[j]), w, 1e-7) {
			t.Errorf("∂/∂log_std_%d = %v, want %v", j, dLogStd[j], w)
		}
	}
}

// GaussianBackward matches central differences of L = α·logp + β·H in the mean and log_std.
func TestGaussianBackwardFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, d := range []int{1, 3, 6} {
		a, mean, logStd := gridRow(rng, d), gridRow(rng, d), gridRow(rng, d)
		for j := range logStd {
			logStd[j] *= 0.25
		}
		const alpha, beta = 1.1, 0.4
		z, inv := make([]float64, d), make([]float64, d)
		GaussianForward(a, mean, logStd, z, inv)
		dMean, dLogStd := make([]float32, d), make([]float32, d)
		GaussianBackward(z, inv, alpha, beta, dMean, dLogStd)
		loss := func(mean, logStd []float32) float64 {
			lp, h := GaussianForward(a, mean, logStd, make([]float64, d), make([]float64, d))
			return alpha*lp + beta*h
		}
		checkGrad(t, "gaussian mean", mean, dMean, func(x []float32) float64 { return loss(x, logStd) })
		checkGrad(t, "gaussian log_std", logStd, dLogStd, func(x []float32) float64 { return loss(mean, x) })
	}
}

// gridRow is n values drawn from N(0, 1.5²) and rounded to multiples of 2⁻¹⁰, so that the
// finite-difference steps of checkGrad move them exactly.
func gridRow(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for j := range x {
		x[j] = float32(math.Round(1.5*rng.NormFloat64()*1024) / 1024)
	}
	return x
}

// checkGrad compares grad with central differences of loss at x, step 2⁻⁸ (exact in float32
// for x on gridRow's grid), to 2e-4 absolute plus 2e-4 relative.
func checkGrad(t *testing.T, what string, x, grad []float32, loss func([]float32) float64) {
	t.Helper()
	const h = 1.0 / 256
	for j := range x {
		xp, xm := append([]float32(nil), x...), append([]float32(nil), x...)
		xp[j] += h
		xm[j] -= h
		fd := (loss(xp) - loss(xm)) / (2 * h)
		if !near(float64(grad[j]), fd, 2e-4+2e-4*math.Abs(fd)) {
			t.Errorf("%s (%d values): gradient %d is %v, central difference %v", what, len(x), j, grad[j], fd)
		}
	}
}

// TestCategoricalRows2Bits: over two logits a row, CategoricalForwardRows (eight rows at a time
// on an AVX-512 CPU, kernels.Categorical2) gives categoricalForward2's bits row by row, rows of
// non-finite logits the general row's; and kernels.Categorical2Backward gives
// CategoricalBackward's. Logits from equal (±0) to 1e4 apart, 10,003 rows.
func TestCategoricalRows2Bits(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 15))
	const rows = 10003
	logits, acts := make([]float32, 2*rows), make([]int32, rows)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for i := range rows {
		scale := math.Pow(10, float64(rng.IntN(9)-4))
		l0, l1 := float32(scale*rng.NormFloat64()), float32(scale*rng.NormFloat64())
		switch rng.IntN(40) {
		case 0:
			l1 = l0
		case 1:
			l0, l1 = 0, float32(math.Copysign(0, -1))
		case 2:
			l0 = inf
		case 3:
			l1 = -inf
		case 4:
			l0 = nan
		}
		logits[2*i], logits[2*i+1], acts[i] = l0, l1, int32(rng.IntN(2))
	}
	ls, ps := make([]float64, 2*rows), make([]float64, 2*rows)
	logp, ent := make([]float64, rows), make([]float64, rows)
	CategoricalForwardRows(2, logits, acts, ls, ps, logp, ent)
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) || (a != a && b != b) }
	wls, wps := make([]float64, 2), make([]float64, 2)
	for i, a := range acts {
		wlp, went, ok := categoricalForward2(logits[2*i], logits[2*i+1], int(a), wls, wps)
		if !ok {
			wlp, went = CategoricalForward(logits[2*i:2*i+2], int(a), wls, wps)
		}
		if !same(logp[i], wlp) || !same(ent[i], went) || !same(ls[2*i], wls[0]) || !same(ls[2*i+1], wls[1]) || !same(ps[2*i], wps[0]) || !same(ps[2*i+1], wps[1]) {
			t.Fatalf("row %d, logits %v action %d: logp %v entropy %v log-softmax %v probs %v; by row %v %v %v %v",
				i, logits[2*i:2*i+2], a, logp[i], ent[i], ls[2*i:2*i+2], ps[2*i:2*i+2], wlp, went, wls, wps)
		}
	}
	dLogp := make([]float32, rows)
	for i := range dLogp {
		dLogp[i] = float32(rng.NormFloat64())
	}
	got, want := make([]float32, 2*rows), make([]float32, 2*rows)
	if !kernels.Categorical2Backward(ls, ps, acts, ent, dLogp, -0.01/rows, got) {
		if kernels.Level() == "avx512" {
			t.Fatal("no Categorical2Backward kernel on an AVX-512 CPU")
		}
		return
	}
	for i, a := range acts {
		CategoricalBackward(ls[2*i:2*i+2], ps[2*i:2*i+2], int(a), ent[i], float64(dLogp[i]), -0.01/rows, want[2*i:2*i+2])
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("dLogits[%d] = %v, CategoricalBackward gives %v", i, got[i], want[i])
		}
	}
}

package head

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// naiveLogProb is an independent float64 reference: u from the textbook atanh,
// ½·log((1+a)/(1−a)), and the Gaussian density written out; the correction is SB3's, of the
// action a itself.
func naiveLogProb(a, mu, sigma float64) float64 {
	c := math.Max(math.Min(a, 1-math.Pow(2, -23)), -1+math.Pow(2, -23))
	u := 0.5 * math.Log((1+c)/(1-c))
	dens := math.Exp(-(u-mu)*(u-mu)/(2*sigma*sigma)) / (sigma * math.Sqrt(2*math.Pi))
	return math.Log(dens) - math.Log(1-a*a+1e-6)
}

// Hand-worked, two dimensions:
//
//	a = 0.8, mean 0.5, σ = 0.5: u = atanh(0.8) = ½·ln 9 = ln 3 = 1.098612289,
//	  z = (1.098612289 − 0.5)/0.5 = 1.197224577, log N = −½z² − ln 0.5 − ½ln 2π
//	  = −0.716673 + 0.693147 − 0.918939 = −0.942465; correction −ln(1 − 0.64 + 1e-6)
//	  = −ln 0.360001 = 1.021648; sum 0.079184 (0.07918377 to 8 places).
//	a = 0, mean 0, σ = 1: log N = −0.918939, correction −ln(1 + 1e-6) ≈ −1e-6; sum −0.9189395.
//
// Row total −0.83975576 (PyTorch, as SB3's SquashedDiagGaussianDistribution computes it in
// float32: −0.8397557). At a = ±1 the clamp gives u = atanh(1 − 2⁻²³) = 8.317766137 and the
// correction −ln(1e-6) = 13.815511: −½·8.317766² − 0.918939 + 13.815511 = −21.696045 per
// dimension (PyTorch: −43.39209 for both).
func TestTanhGaussianLogProbByHand(t *testing.T) {
	g := TanhGaussian{Low: []float32{-1, -1}, High: []float32{1, 1}}
	mean := []float32{0.5, 0, 0, 0}
	logStd := []float32{float32(math.Log(0.5)), 0, 0, 0}
	acts := []float32{0.8, 0, 1, -1}
	logp := make([]float32, 2)
	if err := g.LogProb(mean, logStd, acts, logp); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{0.07918377 - 0.9189395, 2 * -21.696045} {
		if !near(float64(logp[i]), want, 2e-5) {
			t.Errorf("row %d: logp %.7f, want %.7f", i, logp[i], want)
		}
	}
	// The same against the independent computation.
	for i := range 2 {
		var want float64
		for j := range 2 {
			k := i*2 + j
			want += naiveLogProb(float64(acts[k]), float64(mean[k]), math.Exp(float64(logStd[k])))
		}
		if !near(float64(logp[i]), want, 1e-5) {
			t.Errorf("row %d: logp %.7f, naive %.7f", i, logp[i], want)
		}
	}
}

// Env actions: [0, 10] maps a = 0.8 to 9 and back; EnvLogProb of 9 is LogProb of 0.8.
// Pendulum's [-2, 2] maps tanh(mean) = tanh(0.5) = 0.462117157 to 0.924234315.
func TestTanhGaussianScale(t *testing.T) {
	g := TanhGaussian{Low: []float32{0}, High: []float32{10}}
	env := make([]float32, 1)
	if err := g.ToEnv([]float32{0.8}, env); err != nil || !near(float64(env[0]), 9, 1e-6) {
		t.Fatalf("ToEnv(0.8) on [0,10] = %v %v, want 9", env, err)
	}
	unit := make([]float32, 1)
	if err := g.FromEnv(env, unit); err != nil || !near(float64(unit[0]), 0.8, 1e-6) {
		t.Fatalf("FromEnv(9) = %v %v, want 0.8", unit, err)
	}
	lp, lpEnv := make([]float32, 1), make([]float32, 1)
	if err := g.LogProb([]float32{0.5}, []float32{-0.7}, []float32{0.8}, lp); err != nil {
		t.Fatal(err)
	}
	if err := g.EnvLogProb([]float32{0.5}, []float32{-0.7}, []float32{9}, lpEnv); err != nil {
		t.Fatal(err)
	}
	if !near(float64(lp[0]), float64(lpEnv[0]), 1e-5) {
		t.Errorf("EnvLogProb(9) %v, LogProb(0.8) %v", lpEnv[0], lp[0])
	}
	if err := g.EnvLogProb([]float32{0}, []float32{0}, []float32{11}, lpEnv); err == nil {
		t.Error("EnvLogProb of an action above the bounds: no error")
	}

	pend := TanhGaussian{Low: []float32{-2}, High: []float32{2}}
	acts, envs, logp := make([]float32, 2), make([]float32, 2), make([]float32, 2)
	if err := pend.Mode([]float32{0.5, -30}, []float32{0}, acts, envs, logp); err != nil {
		t.Fatal(err)
	}
	want := []float32{float32(math.Tanh(0.5)), -1}
	if d := cmp.Diff(want, acts, cmpopts.EquateApprox(0, 1e-7)); d != "" {
		t.Errorf("mode actions: %s", d)
	}
	if d := cmp.Diff([]float32{2 * want[0], -2}, envs, cmpopts.EquateApprox(0, 1e-6)); d != "" {
		t.Errorf("mode env actions: %s", d)
	}
	if !near(float64(logp[0]), naiveLogProb(float64(acts[0]), 0.5, 1), 1e-5) || math.IsInf(float64(logp[1]), 0) || math.IsNaN(float64(logp[1])) {
		t.Errorf("mode logp %v", logp)
	}
	// A deterministic policy without a log_std: Mode with no logStd and no logp.
	if err := pend.Mode([]float32{0.5, -30}, nil, acts, envs, nil); err != nil || envs[0] != 2*want[0] {
		t.Errorf("Mode without log_std: %v %v", envs, err)
	}
	none := TanhGaussian{Low: []float32{-0.5}, High: []float32{2}, Scale: ScaleNone}
	if err := none.ToEnv([]float32{0.8, -0.9}, envs); err != nil || envs[0] != 0.8 || envs[1] != -0.5 {
		t.Errorf("ScaleNone ToEnv = %v %v, want [0.8 -0.5]", envs, err)
	}
}

// Draws of u = atanh(a) have the Gaussian's mean and standard deviation (5 standard errors),
// every a lies in [-1, 1], its env action is the affine map of it, and each logp matches the
// independent computation from the stored action. Per-row log_std: row i uses its own.
func TestTanhGaussianSampleStatistics(t *testing.T) {
	const n = 100000
	g := TanhGaussian{Low: []float32{-2, 0}, High: []float32{2, 1}}
	mean := make([]float32, 2*n)
	logStd := make([]float32, 2*n)
	for i := range n {
		mean[2*i], mean[2*i+1] = 0.3, -1
		logStd[2*i], logStd[2*i+1] = float32(math.Log(0.4)), float32(math.Log(0.8))
	}
	acts, env, logp := make([]float32, 2*n), make([]float32, 2*n), make([]float32, n)
	if err := g.Sample(rand.New(rand.NewPCG(5, 6)), mean, logStd, acts, env, logp); err != nil {
		t.Fatal(err)
	}
	var s, ss [2]float64
	for i := range n {
		var want float64
		for j := range 2 {
			k := 2*i + j
			a := float64(acts[k])
			if a < -1 || a > 1 {
				t.Fatalf("draw %d: action %v outside [-1, 1]", i, a)
			}
			lo, hi := float64(g.Low[j]), float64(g.High[j])
			if x := lo + (a+1)/2*(hi-lo); !near(float64(env[k]), x, 1e-6) {
				t.Fatalf("draw %d: env action %v, want %v", i, env[k], x)
			}
			u := math.Atanh(a)
			s[j] += u
			ss[j] += u * u
			want += naiveLogProb(a, float64(mean[k]), math.Exp(float64(logStd[k])))
		}
		if !near(float64(logp[i]), want, 1e-4) {
			t.Fatalf("draw %d: logp %v, want %v", i, logp[i], want)
		}
	}
	for j, w := range []struct{ mu, sd float64 }{{0.3, 0.4}, {-1, 0.8}} {
		m := s[j] / n
		sd := math.Sqrt(ss[j]/n - m*m)
		if !near(m, w.mu, 5*w.sd/math.Sqrt(n)) || !near(sd, w.sd, 5*w.sd/math.Sqrt(2*n)) {
			t.Errorf("dimension %d: atanh of the draws has mean %.4f sd %.4f, want %v and %v", j, m, sd, w.mu, w.sd)
		}
	}
}

func TestTanhGaussianAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	g := TanhGaussian{Low: []float32{-2}, High: []float32{2}}
	mean, acts, env, logp := make([]float32, 1024), make([]float32, 1024), make([]float32, 1024), make([]float32, 1024)
	ls := []float32{0}
	if a := testing.AllocsPerRun(20, func() {
		_ = g.Sample(rng, mean, ls, acts, env, logp)
		_ = g.Mode(mean, ls, acts, env, logp)
		_ = g.LogProb(mean, ls, acts, logp)
		_ = g.EnvLogProb(mean, ls, env, logp)
		_ = g.ToEnv(acts, env)
	}); a != 0 {
		t.Errorf("%v allocations per call", a)
	}
}

func TestTanhGaussianBadInput(t *testing.T) {
	g := TanhGaussian{Low: []float32{-1, -1}, High: []float32{1, 1}}
	for name, err := range map[string]error{
		"logp without log_std": g.Mode(make([]float32, 2), nil, make([]float32, 2), nil, make([]float32, 1)),
		"short mean":           g.Mode(make([]float32, 2), nil, make([]float32, 4), nil, nil),
		"short env":            g.Mode(make([]float32, 4), nil, make([]float32, 4), make([]float32, 2), nil),
		"nan mean":             g.Mode([]float32{0, float32(math.NaN())}, nil, make([]float32, 2), nil, nil),
		"bad scale":            TanhGaussian{Low: []float32{-1}, High: []float32{1}, Scale: "half"}.Mode([]float32{0}, nil, make([]float32, 1), nil, nil),
		"logprob nil":          g.LogProb(make([]float32, 2), nil, make([]float32, 2), make([]float32, 1)),
		"nan action":           g.LogProb(make([]float32, 2), make([]float32, 2), []float32{0, float32(math.NaN())}, make([]float32, 1)),
		"toenv short":          g.ToEnv(make([]float32, 3), make([]float32, 3)),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

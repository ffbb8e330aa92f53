package models

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/models/head"
)

var cartPole = Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}, EnvID: "CartPole-v1"}}

func newParams(t testing.TB, cfg Config, seed uint64) *Params {
	t.Helper()
	p, err := NewParams(cfg, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// orthoError is max |M·Mᵀ - gain²·I| over the rows of the rows×cols row-major matrix m (or of
// its columns when columns is true).
func orthoError(m []float32, rows, cols int, gain float64, columns bool) float64 {
	at := func(i, j int) float64 { return float64(m[i*cols+j]) }
	n, k := rows, cols
	if columns {
		at = func(i, j int) float64 { return float64(m[j*cols+i]) }
		n, k = cols, rows
	}
	worst := 0.0
	for a := range n {
		for b := range n {
			s := 0.0
			for j := range k {
				s += at(a, j) * at(b, j)
			}
			if a == b {
				s -= gain * gain
			}
			worst = math.Max(worst, math.Abs(s))
		}
	}
	return worst
}

func TestOrthogonal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		rows, cols int
		gain       float64
	}{{2, 64, 0.01}, {64, 4, math.Sqrt2}, {64, 64, math.Sqrt2}, {1, 64, 1}, {32, 256, math.Sqrt2}, {7, 3, 2}} {
		m := make([]float32, c.rows*c.cols)
		orthogonal(m, c.rows, c.cols, c.gain, rng, false)
		// rows ≤ cols: W·Wᵀ = gain²·I; rows ≥ cols: Wᵀ·W = gain²·I.
		if e := orthoError(m, c.rows, c.cols, c.gain, c.rows > c.cols); e > 1e-5*max(1, c.gain*c.gain) {
			t.Errorf("%d×%d gain %g: orthogonality error %.3g", c.rows, c.cols, c.gain, e)
		}
		tr := make([]float32, len(m))
		orthogonal(tr, c.rows, c.cols, c.gain, rand.New(rand.NewPCG(9, 9)), true)
		again := make([]float32, len(m))
		orthogonal(again, c.rows, c.cols, c.gain, rand.New(rand.NewPCG(9, 9)), false)
		for i := range c.rows {
			for j := range c.cols {
				if tr[j*c.rows+i] != again[i*c.cols+j] {
					t.Fatalf("%d×%d: transposed layout differs at (%d,%d)", c.rows, c.cols, i, j)
				}
			}
		}
	}
}

func TestParamsLayout(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		names []string
	}{
		{cartPole, []string{"critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.2.bias", "critic.4.weight", "critic.4.bias",
			"actor.0.weight", "actor.0.bias", "actor.2.weight", "actor.2.bias", "actor.4.weight", "actor.4.bias"}},
		{arches[3].cfg, []string{"network.1.weight", "network.1.bias", "critic.weight", "critic.bias",
			"actor_mean.weight", "actor_mean.bias", "actor_logstd"}},
		{arches[5].cfg, []string{"network.0.weight", "network.0.bias", "network.2.weight", "network.2.bias", "network.4.weight",
			"network.4.bias", "network.7.weight", "network.7.bias", "actor_mean.weight", "actor_mean.bias", "critic.weight", "critic.bias", "actor_logstd"}},
	} {
		p := newParams(t, c.cfg, 1)
		if d := cmp.Diff(c.names, p.Names()); d != "" {
			t.Errorf("%v names (-want +got):\n%s", c.cfg.Spec.ObsShape, d)
		}
		if p.Offset(p.Len()) != p.Size() {
			t.Errorf("offsets end at %d, size %d", p.Offset(p.Len()), p.Size())
		}
	}
	p := newParams(t, arches[5].cfg, 1)
	for name, want := range map[string][]int{"network.0.weight": {32, 1, 8, 8}, "network.7.weight": {3136, 64}, "actor_mean.weight": {64, 2},
		"critic.bias": {1}, "actor_logstd": {1, 2}} {
		if _, got, _ := p.Tensor(name); !cmp.Equal(got, want) {
			t.Errorf("%s shape %v, want %v", name, got, want)
		}
	}
}

// TestInitGains: CleanRL's layer_init: orthogonal weights with gain √2 (hidden), 0.01 (policy
// output), 1 (value output); zero biases; log_std at LogStdInit.
func TestInitGains(t *testing.T) {
	p := newParams(t, arches[2].cfg, 3) // Gaussian, separate tanh trunks, LogStdInit -0.5
	for _, c := range []struct {
		name string
		gain float64
	}{{"actor_mean.0.weight", math.Sqrt2}, {"actor_mean.2.weight", math.Sqrt2}, {"actor_mean.4.weight", 0.01},
		{"critic.0.weight", math.Sqrt2}, {"critic.4.weight", 1}} {
		w, shape, _ := p.Tensor(c.name)
		in, out := shape[0], shape[1]
		// torch's [out, in] weight is the transpose of ours: its rows are our columns.
		if e := orthoError(w, in, out, c.gain, in >= out); e > 1e-5 {
			t.Errorf("%s: orthogonality error %.3g at gain %g", c.name, e, c.gain)
		}
	}
	for _, name := range p.Names() {
		data, _, _ := p.Tensor(name)
		switch {
		case strings.HasSuffix(name, ".bias"):
			for _, v := range data {
				if v != 0 {
					t.Fatalf("%s is not zero", name)
				}
			}
		case name == "actor_logstd":
			if data[0] != -0.5 {
				t.Errorf("actor_logstd %v, want -0.5", data)
			}
		}
	}
	q := newParams(t, arches[2].cfg, 3)
	if !cmp.Equal(p.Data(), q.Data()) {
		t.Error("the same seed gave different parameters")
	}
}

func TestConfigErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	cat := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Spec"},
		{Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2}}, "Spec.ObsShape"},
		{Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4, 0}}}, "Spec.ObsShape[1]"},
		{Config{Spec: cat, Arch: "transformer"}, "Arch"},
		{Config{Spec: cat, Hidden: []int{64, -1}}, "Hidden[1]"},
		{Config{Spec: cat, Activation: "gelu"}, "Activation"},
		{Config{Spec: cat, LogStdInit: float32(math.NaN())}, "LogStdInit"},
		{Config{Spec: cat, Arch: NatureCNN}, "Spec.ObsShape"},
		{Config{Spec: head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4, 30, 84}}, Arch: NatureCNN}, "Spec.ObsShape"},
	} {
		_, err := NewParams(c.cfg, rng)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: error %v, want ErrConfig naming %s", c.cfg, err, c.field)
		}
	}
	if _, err := NewParams(cartPole, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil rng: %v", err)
	}
	p := newParams(t, cartPole, 1)
	if _, err := Build(G.NewGraph(), p, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("batch 0: %v", err)
	}
	if _, err := Build(nil, p, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("nil graph: %v", err)
	}
	if _, err := ExportModel(nil, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("nil params: %v", err)
	}
}

func TestLifecycleErrors(t *testing.T) {
	p := newParams(t, cartPole, 1)
	pol, err := Build(G.NewGraph(), p, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.Run(); !errors.Is(err, ErrState) {
		t.Errorf("Run before Compile: %v", err)
	}
	if err := pol.SetActions([]int32{0, 1, 0, 1}); !errors.Is(err, ErrState) {
		t.Errorf("SetActions before LogProb: %v", err)
	}
	if err := pol.Backward(pol.Logits); !errors.Is(err, ErrShape) {
		t.Errorf("Backward of a matrix: %v", err)
	}
	if err := pol.Grads(make([]float32, p.Size())); !errors.Is(err, ErrState) {
		t.Errorf("Grads without Backward: %v", err)
	}
	if _, err := pol.LogProb(); err != nil {
		t.Fatal(err)
	}
	if err := pol.SetActions([]int32{0, 1, 2, 1}); !errors.Is(err, ErrShape) {
		t.Errorf("action out of range: %v", err)
	}
	if err := pol.SetActions([]int32{0}); !errors.Is(err, ErrShape) {
		t.Errorf("short actions: %v", err)
	}
	if err := pol.SetBoxActions([]float32{0}); !errors.Is(err, ErrState) {
		t.Errorf("box actions on a categorical head: %v", err)
	}
	if err := pol.Compile(); err != nil {
		t.Fatal(err)
	}
	if err := pol.Compile(); !errors.Is(err, ErrState) {
		t.Errorf("Compile twice: %v", err)
	}
	if _, err := pol.Entropy(); !errors.Is(err, ErrState) {
		t.Errorf("Entropy after Compile: %v", err)
	}
	if _, _, err := pol.Input("adv", 4); !errors.Is(err, ErrState) {
		t.Errorf("Input after Compile: %v", err)
	}
	if err := pol.Forward(make([]float32, 3)); !errors.Is(err, ErrShape) {
		t.Errorf("short observations: %v", err)
	}
	if err := pol.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pol.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := pol.Run(); !errors.Is(err, ErrState) {
		t.Errorf("Run after Close: %v", err)
	}
}

// ppoLoss builds -mean(logp·adv) + 0.5·mean((v-ret)²) - 0.01·mean(entropy) on pol and returns
// the loss with the advantage and return buffers.
func ppoLoss(t testing.TB, pol *Policy) (loss *G.Node, adv, ret []float32) {
	t.Helper()
	logp, err := pol.LogProb()
	if err != nil {
		t.Fatal(err)
	}
	ent, err := pol.Entropy()
	if err != nil {
		t.Fatal(err)
	}
	b := pol.Batch()
	advN, adv, err := pol.Input("adv", b)
	if err != nil {
		t.Fatal(err)
	}
	retN, ret, err := pol.Input("ret", b, 1)
	if err != nil {
		t.Fatal(err)
	}
	pg := G.Must(G.Neg(G.Must(G.Mean(G.Must(G.HadamardProd(logp, advN))))))
	vl := G.Must(G.HadamardProd(G.Must(G.Mean(G.Must(G.Square(G.Must(G.Sub(pol.Value, retN)))))), G.NewConstant(float32(0.5))))
	el := G.Must(G.HadamardProd(G.Must(G.Mean(ent)), G.NewConstant(float32(0.01))))
	return G.Must(G.Sub(G.Must(G.Add(pg, vl)), el)), adv, ret
}

// trainer is a policy with the PPO-like loss, its gradients, and random data.
type trainer struct {
	pol      *Policy
	loss     *G.Node
	adv, ret []float32
}

func newTrainer(t testing.TB, params *Params, batch int) *trainer {
	t.Helper()
	return newTrainerWith(t, params, batch, false)
}

// newTrainerWith is newTrainer, with the layers of gorgonia's own ops when reference is set.
func newTrainerWith(t testing.TB, params *Params, batch int, reference bool) *trainer {
	t.Helper()
	pol, err := build(G.NewGraph(), params, batch, reference)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	loss, adv, ret := ppoLoss(t, pol)
	if err := pol.Watch(loss); err != nil {
		t.Fatal(err)
	}
	if err := pol.Backward(loss); err != nil {
		t.Fatal(err)
	}
	if err := pol.Compile(); err != nil {
		t.Fatal(err)
	}
	return &trainer{pol: pol, loss: loss, adv: adv, ret: ret}
}

// fill writes rows [from, from+batch) of a deterministic data set (seeded by seed) into tr.
func (tr *trainer) fill(t testing.TB, seed uint64, from int) {
	t.Helper()
	pol := tr.pol
	spec := pol.Spec()
	row := product(spec.ObsShape)
	d := spec.ActionDim()
	image := pol.params.arch.cfg.Arch == NatureCNN
	acts := make([]int32, pol.Batch())
	box := make([]float32, pol.Batch()*d)
	for i := range pol.Batch() {
		rng := rand.New(rand.NewPCG(seed, uint64(from+i)))
		randomObs(rng, pol.ObsData()[i*row:(i+1)*row], image)
		acts[i] = int32(rng.IntN(max(spec.N, 1)))
		for j := range d {
			box[i*d+j] = float32(rng.NormFloat64())
		}
		tr.adv[i] = float32(rng.NormFloat64())
		tr.ret[i] = float32(rng.NormFloat64())
	}
	var err error
	if spec.Head == head.CategoricalKind {
		err = pol.SetActions(acts)
	} else {
		err = pol.SetBoxActions(box)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (tr *trainer) lossValue(t testing.TB) float64 {
	t.Helper()
	if err := tr.pol.Run(); err != nil {
		t.Fatal(err)
	}
	v, err := tr.pol.Read(tr.loss)
	if err != nil {
		t.Fatal(err)
	}
	return float64(v[0])
}

// TestGradientsFiniteDifference checks the symbolic gradients of the PPO-like loss against
// central differences on a sample of coordinates of every parameter, for every architecture.
func TestGradientsFiniteDifference(t *testing.T) {
	for ai, a := range arches {
		// One CNN suffices (the heads are covered by the MLPs): the one with the narrower
		// linear layer, which keeps the test fast under the race detector.
		if a.heavy && (testing.Short() || a.name == "nature_cnn_categorical") {
			continue
		}
		t.Run(a.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(ai), 11))
			params, err := NewParams(a.cfg, rng)
			if err != nil {
				t.Fatal(err)
			}
			perturb(params, rng)
			tr := newTrainer(t, params, 3)
			if err := tape.Check(); err == nil && !tr.pol.vm.Fast() {
				// Slower, still correct: but the graphs are meant to run on the caller's goroutine.
				t.Error("the policy's tape machine runs through RunAll, not on the calling goroutine")
			}
			tr.fill(t, 5, 0)
			tr.lossValue(t)
			grad := make([]float32, params.Size())
			if err := tr.pol.Grads(grad); err != nil {
				t.Fatal(err)
			}
			const eps = 1e-3
			// A bias of the first convolution moves thousands of ReLU inputs: some cross their
			// kink within ±eps, so the CNN's differences are only good to several percent (they
			// converge on the gradient as eps shrinks, until float32 rounding takes over).
			rel := 0.02
			if a.cfg.Arch == NatureCNN {
				rel = 0.15
			}
			data := params.Data()
			for i := range params.Len() {
				for range 3 {
					k := params.Offset(i) + rng.IntN(params.Offset(i+1)-params.Offset(i))
					orig := data[k]
					data[k] = orig + eps
					up := tr.lossValue(t)
					data[k] = orig - eps
					down := tr.lossValue(t)
					data[k] = orig
					fd := (up - down) / (2 * eps)
					if g := float64(grad[k]); math.Abs(g-fd) > 2e-3+rel*math.Abs(fd) {
						t.Errorf("%s[%d]: gradient %.6g, finite difference %.6g", params.names[i], k-params.Offset(i), g, fd)
					}
				}
			}
		})
	}
}

// TestTowersShareParams: two graphs over one Params see an in-place update (by hand and by
// gorgonia's Adam through one of them) on their next run, and their per-graph gradients
// average to the gradient of one graph over the whole batch.
func TestTowersShareParams(t *testing.T) {
	params := newParams(t, arches[2].cfg, 4)
	a, b, whole := newTrainer(t, params, 4), newTrainer(t, params, 4), newTrainer(t, params, 8)
	a.fill(t, 1, 0)
	b.fill(t, 1, 4)
	whole.fill(t, 1, 0)
	before := whole.lossValue(t)

	// The towers run concurrently: parameters are only read during runs.
	var wg sync.WaitGroup
	for _, tr := range []*trainer{a, b} {
		wg.Go(func() {
			if err := tr.pol.Run(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	ga, gb, gw := make([]float32, params.Size()), make([]float32, params.Size()), make([]float32, params.Size())
	for _, c := range []struct {
		tr  *trainer
		dst []float32
	}{{a, ga}, {b, gb}, {whole, gw}} {
		if err := c.tr.pol.Grads(c.dst); err != nil {
			t.Fatal(err)
		}
	}
	worst := 0.0
	for i := range gw {
		worst = math.Max(worst, math.Abs(float64((ga[i]+gb[i])/2-gw[i])))
	}
	if worst > 1e-6 {
		t.Errorf("averaged tower gradients differ from the whole batch's by %.3g", worst)
	}

	// A hand-made in-place update through Params.
	w, _, _ := params.Tensor("critic.4.bias")
	w[0] += 1
	if err := a.pol.Run(); err != nil {
		t.Fatal(err)
	}
	if after := whole.lossValue(t); after == before {
		t.Error("an in-place parameter update did not change the loss")
	}
	va, _ := a.pol.Read(a.pol.Value)
	vw, _ := whole.pol.Read(whole.pol.Value)
	if d := maxAbs(va, vw[:4]); d > 1e-6 {
		t.Errorf("towers disagree on the value after the update by %.3g", d)
	}

	// gorgonia's Adam through tower a writes into the shared memory.
	snapshot := append([]float32(nil), params.Data()...)
	if err := G.NewAdamSolver(G.WithLearnRate(1e-2)).Step(G.NodesToValueGrads(a.pol.Params)); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i, v := range params.Data() {
		if v != snapshot[i] {
			changed++
		}
	}
	if changed < params.Size()/2 {
		t.Errorf("Adam changed %d of %d shared parameter values", changed, params.Size())
	}
}

// TestLogProbMatchesHead: the graph's log-probabilities equal models/head's (what the batchers
// record), so the PPO ratio starts at 1.
func TestLogProbMatchesHead(t *testing.T) {
	for _, a := range arches[:4] {
		params := newParams(t, a.cfg, 8)
		perturb(params, rand.New(rand.NewPCG(8, 8)))
		tr := newTrainer(t, params, 16)
		tr.fill(t, 2, 0)
		rng := rand.New(rand.NewPCG(3, 3))
		spec := a.cfg.Spec
		want := make([]float32, 16)
		if err := tr.pol.Run(); err != nil { // forward outputs for the head's sampler
			t.Fatal(err)
		}
		var wantEnt []float64
		if spec.Head == head.CategoricalKind {
			logits, _ := tr.pol.Read(tr.pol.Logits)
			acts := make([]int32, 16)
			if err := (head.Categorical{N: spec.N}).Sample(rng, logits, acts, want); err != nil {
				t.Fatal(err)
			}
			for i := range 16 {
				h := 0.0
				for _, l := range logits[i*spec.N : (i+1)*spec.N] {
					lp := float64(l) - logSumExp(logits[i*spec.N:(i+1)*spec.N])
					h -= math.Exp(lp) * lp
				}
				wantEnt = append(wantEnt, h)
			}
			if err := tr.pol.SetActions(acts); err != nil {
				t.Fatal(err)
			}
		} else {
			d := spec.ActionDim()
			mean, _ := tr.pol.Read(tr.pol.Mean)
			logStd, _, _ := params.Tensor("actor_logstd")
			raw := make([]float32, 16*d)
			if err := (head.Gaussian{Low: spec.Low, High: spec.High}).Sample(rng, mean, logStd, raw, nil, want); err != nil {
				t.Fatal(err)
			}
			h := 0.0
			for _, ls := range logStd {
				h += float64(ls) + 0.5 + halfLog2Pi
			}
			for range 16 {
				wantEnt = append(wantEnt, h)
			}
			if err := tr.pol.SetBoxActions(raw); err != nil {
				t.Fatal(err)
			}
		}
		if err := tr.pol.Run(); err != nil {
			t.Fatal(err)
		}
		got, _ := tr.pol.Read(tr.pol.logp)
		if d := maxAbs(got, want); d > 1e-5 {
			t.Errorf("%s: log-probabilities differ from head's by %.3g", a.name, d)
		}
		ent, _ := tr.pol.Read(tr.pol.entropy)
		for i, h := range wantEnt {
			if math.Abs(float64(ent[i])-h) > 1e-5 {
				t.Errorf("%s row %d: entropy %g, want %g", a.name, i, ent[i], h)
				break
			}
		}
	}
}

func logSumExp(row []float32) float64 {
	m := math.Inf(-1)
	for _, l := range row {
		m = math.Max(m, float64(l))
	}
	s := 0.0
	for _, l := range row {
		s += math.Exp(float64(l) - m)
	}
	return m + math.Log(s)
}

// TestConcurrentTowers: towers built, compiled and run from their own goroutines over one
// Params (run it with -race).
func TestConcurrentTowers(t *testing.T) {
	params := newParams(t, cartPole, 1)
	var wg sync.WaitGroup
	losses := make([]float64, 4)
	for i := range losses {
		wg.Go(func() {
			tr := newTrainer(t, params, 8)
			tr.fill(t, 1, 0)
			losses[i] = tr.lossValue(t)
		})
	}
	wg.Wait()
	for _, l := range losses[1:] {
		if l != losses[0] {
			t.Errorf("towers on the same data computed losses %v", losses)
		}
	}
}

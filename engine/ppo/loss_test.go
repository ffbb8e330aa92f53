package ppo_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

var update = flag.Bool("update", false, "rewrite testdata/loss_golden.json from the current code")

// goldenFile holds, per case, the loss of each run and a SHA-256 of every bit the loss
// produces (loss, statistics, log-probabilities and gradients, over two runs), recorded from
// the ops before they moved onto package engine/internal/fused: the fused ops must stay
// bit-identical. Their maths is checked against references elsewhere (engine's
// TestPPOLossAndGradient: float64 graph, finite differences, ONNX Runtime).
const goldenFile = "testdata/loss_golden.json"

// exactFloats: the golden bits can be compared on this architecture (amd64: no fused
// multiply-add unless written with math.FMA).
var exactFloats = runtime.GOARCH == "amd64"

// goldenStats is how many of StatNames the golden bits hold: those the ops reported when the
// bits were recorded (old_approx_kl came later; TestOldApproxKL checks it by hand).
const goldenStats = 6

type golden struct {
	Losses []float32 `json:"losses"`
	SHA256 string    `json:"sha256"`
}

// lossCase is a fused PPO loss over rows of random head outputs, values and targets.
type lossCase struct {
	name     string
	spec     head.Spec
	width    int  // head outputs per row: the categorical's n, the Gaussian's d
	valueCol bool // a [rows, 1] value rather than [rows]
	c        ppo.Coefs
}

// run builds the loss over the case's graph, runs it on two minibatches (the second reusing
// the first's scratch) and returns each run's loss and the bits of everything it produced.
func (lc lossCase) run(t *testing.T, rows int) ([]float32, []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(14, uint64(rows)))
	g := G.NewGraph()
	gaussian := lc.spec.Head != head.CategoricalKind
	mat := func(name string, scale, shift float64) (*G.Node, *tensor.Dense) {
		v := tensor.New(tensor.WithShape(rows, lc.width), tensor.WithBacking(normals(rng, rows*lc.width, scale, shift)))
		return G.NewMatrix(g, tensor.Float32, G.WithShape(rows, lc.width), G.WithName(name), G.WithValue(v)), v
	}
	h := algo.Heads{Spec: lc.spec, Rows: rows}
	var ins []*tensor.Dense
	var p *tensor.Dense
	h.Params, p = mat("params", 1, 0)
	ins = append(ins, p)
	wrt := []*G.Node{h.Params}
	if gaussian {
		var ls *tensor.Dense
		h.LogStd, ls = mat("log_std", 0.4, -0.3)
		ins = append(ins, ls)
		wrt = append(wrt, h.LogStd)
	}
	vals := tensor.New(tensor.WithShape(rows), tensor.WithBacking(normals(rng, rows, 1, 0)))
	h.Value = G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName("value"), G.WithValue(vals))
	if lc.valueCol {
		vals.Reshape(rows, 1)
		h.Value = G.NewMatrix(g, tensor.Float32, G.WithShape(rows, 1), G.WithName("value"), G.WithValue(vals))
	}
	ins = append(ins, vals)
	wrt = append(wrt, h.Value)
	l, err := ppo.NewLoss(h, lc.c)
	if err != nil {
		t.Fatal(err)
	}
	return twoRuns(t, g, l.Node(), wrt, l.Stats, l.LogProbs, func() {
		for _, in := range ins {
			copy(in.Float32s(), normals(rng, in.Shape().TotalSize(), 1, 0))
		}
		if gaussian {
			copy(ins[1].Float32s(), normals(rng, rows*lc.width, 0.4, -0.3))
		}
		if err := l.Fill(lc.batch(rng, rows, vals.Float32s(), gaussian), nil); err != nil {
			t.Fatal(err)
		}
	})
}

// twoRuns differentiates loss with respect to wrt and runs g twice, each time after fill, and
// returns each run's loss and the bits of its loss, statistics, log-probabilities (when
// logProbs is not nil) and gradients.
func twoRuns(t *testing.T, g *G.ExprGraph, loss *G.Node, wrt []*G.Node, stats func([]float64), logProbs func() []float32, fill func()) ([]float32, []byte) {
	t.Helper()
	grads, err := G.Grad(loss, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	var losses []float32
	var bits []byte
	for run := range 2 {
		fill()
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		l := scalar(t, loss)
		losses = append(losses, l)
		st := make([]float64, len(ppo.StatNames))
		stats(st)
		if math.IsNaN(float64(l)) || float64(l) != float64(float32(st[0])) {
			t.Fatalf("run %d: loss %v, statistic %v", run, l, st[0])
		}
		bits = binary.LittleEndian.AppendUint32(bits, math.Float32bits(l))
		for _, s := range st[:goldenStats] {
			bits = binary.LittleEndian.AppendUint64(bits, math.Float64bits(s))
		}
		if logProbs != nil {
			bits = appendBits(bits, logProbs())
		}
		for _, gr := range grads {
			bits = appendBits(bits, gr.Value().Data().([]float32))
		}
	}
	return losses, bits
}

// batch is a minibatch of rows for the case: actions, advantages, returns, old values near
// values (some outside the clip range) and old log-probabilities near the head's.
func (lc lossCase) batch(rng *rand.Rand, rows int, values []float32, gaussian bool) *learner.SampleBatch {
	actDim := 1
	if gaussian {
		actDim = lc.width
	}
	mb := learner.NewSampleBatch(rows, 1, actDim, 0)
	for k := range rows {
		if gaussian {
			copy(mb.Actions[k*actDim:(k+1)*actDim], normals(rng, actDim, 1, 0))
		} else {
			mb.Actions[k] = float32(rng.IntN(lc.width))
		}
		mb.Advantages[k] = float32(rng.NormFloat64())
		mb.Returns[k] = float32(rng.NormFloat64())
		mb.Values[k] = values[k] + float32(0.3*rng.NormFloat64())
		mb.LogP[k] = float32(-math.Log(float64(lc.width)) - 0.5 + 0.4*rng.NormFloat64())
	}
	if err := mb.SetLen(rows); err != nil {
		panic(err)
	}
	return mb
}

func normals(rng *rand.Rand, n int, scale, shift float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(shift + scale*rng.NormFloat64())
	}
	return x
}

func appendBits(b []byte, x []float32) []byte {
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func scalar(t *testing.T, n *G.Node) float32 {
	t.Helper()
	switch v := n.Value().(type) {
	case *G.F32:
		return float32(*v)
	case *tensor.Dense:
		return v.Data().(float32)
	}
	t.Fatalf("%s holds %T", n, n.Value())
	return 0
}

// logProbCase runs LogProbLoss over random per-row log-probabilities and entropies.
func logProbCase(t *testing.T, rows int, valueCol bool, c ppo.Coefs) ([]float32, []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(41, uint64(rows)))
	g := G.NewGraph()
	vec := func(name string) (*G.Node, []float32) {
		x := make([]float32, rows)
		return G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName(name), G.WithValue(tensor.New(tensor.WithShape(rows), tensor.WithBacking(x)))), x
	}
	logp, lp := vec("logp")
	ent, e := vec("entropy")
	adv, a := vec("advantages")
	ret, r := vec("returns")
	oldLogp, olp := vec("old_logp")
	oldVal, ov := vec("old_values")
	value, v := vec("value")
	if valueCol {
		value = G.NewMatrix(g, tensor.Float32, G.WithShape(rows, 1), G.WithName("value"),
			G.WithValue(tensor.New(tensor.WithShape(rows, 1), tensor.WithBacking(v))))
	}
	loss, stats, err := ppo.LogProbLoss(logp, ent, value, adv, ret, oldLogp, oldVal, rows, c)
	if err != nil {
		t.Fatal(err)
	}
	return twoRuns(t, g, loss, []*G.Node{logp, ent, value}, stats, nil, func() {
		for k := range rows {
			lp[k] = float32(-0.7 + 0.3*rng.NormFloat64())
			olp[k] = lp[k] + float32(0.25*rng.NormFloat64())
			e[k] = float32(0.6 + 0.1*rng.NormFloat64())
			a[k], r[k], v[k] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
			ov[k] = v[k] + float32(0.3*rng.NormFloat64())
		}
	})
}

// TestLossGolden: the fused ops' every output bit (loss, statistics, log-probabilities,
// gradients; two runs each, the second on fresh inputs) for fixed random inputs, over the
// categorical and Gaussian heads, [rows] and [rows, 1] values, with and without the value
// clipping, and the log-probability form, equals the bits recorded in testdata (regenerate
// with -update only for an intended change of the maths).
func TestLossGolden(t *testing.T) {
	const rows = 37
	clip := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	noClip := ppo.Coefs{ClipCoef: 0.1, EntCoef: 0.05, VfCoef: 0.25}
	gauss := func(kind head.Kind, d int) head.Spec {
		return head.Spec{Head: kind, Low: make([]float32, d), High: make([]float32, d)}
	}
	got := map[string]golden{}
	record := func(name string, losses []float32, bits []byte) {
		sum := sha256.Sum256(bits)
		got[name] = golden{Losses: losses, SHA256: hex.EncodeToString(sum[:])}
	}
	for _, lc := range []lossCase{
		{name: "categorical3/clip", spec: head.Spec{Head: head.CategoricalKind, N: 3}, width: 3, c: clip},
		{name: "categorical4/col/noclip", spec: head.Spec{Head: head.CategoricalKind, N: 4}, width: 4, valueCol: true, c: noClip},
		{name: "gaussian2/clip", spec: gauss(head.GaussianKind, 2), width: 2, c: clip},
		{name: "tanhgaussian1/col/noclip", spec: gauss(head.TanhGaussianKind, 1), width: 1, valueCol: true, c: noClip},
	} {
		losses, bits := lc.run(t, rows)
		record(lc.name, losses, bits)
	}
	for _, tc := range []struct {
		name     string
		valueCol bool
		c        ppo.Coefs
	}{{"logprob/clip", false, clip}, {"logprob/col/noclip", true, noClip}} {
		losses, bits := logProbCase(t, rows, tc.valueCol, tc.c)
		record(tc.name, losses, bits)
	}
	if *update {
		if !exactFloats {
			t.Fatalf("-update records the golden bits on amd64 only; this is %s", runtime.GOARCH)
		}
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("reading the golden outputs (go test -run TestLossGolden -update writes them): %v", err)
	}
	want := map[string]golden{}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: %v", goldenFile, err)
	}
	if len(want) != len(got) {
		t.Errorf("%s holds %d cases, the test runs %d", goldenFile, len(want), len(got))
	}
	for name, g := range got {
		w, ok := want[name]
		switch {
		case !ok:
			t.Errorf("%s: no golden outputs", name)
		case !exactFloats:
			// The golden bits were recorded on amd64, where Go never fuses a multiply and an
			// add; where the compiler may (arm64, ppc64, s390x, riscv64), the bits can differ
			// in the last place, so the losses are held to 1e-5 relative instead.
			if len(g.Losses) != len(w.Losses) {
				t.Errorf("%s: %d losses, want %d", name, len(g.Losses), len(w.Losses))
				continue
			}
			for i := range g.Losses {
				if d := math.Abs(float64(g.Losses[i] - w.Losses[i])); d > 1e-5*math.Max(1, math.Abs(float64(w.Losses[i]))) {
					t.Errorf("%s: loss %d is %v, want %v within 1e-5 (%s)", name, i, g.Losses[i], w.Losses[i], runtime.GOARCH)
				}
			}
		case fmt.Sprint(g.Losses) != fmt.Sprint(w.Losses) || g.SHA256 != w.SHA256:
			t.Errorf("%s: losses %v (sha256 %s), want %v (%s): the outputs' bits changed", name, g.Losses, g.SHA256, w.Losses, w.SHA256)
		}
	}
}

// BenchmarkLoss times one run (forward and backward) of the fused PPO loss alone over the
// categorical head of 2 actions at 512 rows, the shape of BenchmarkTowersUpdate's towers.
func BenchmarkLoss(b *testing.B) {
	const rows, n = 512, 2
	rng := rand.New(rand.NewPCG(3, 4))
	g := G.NewGraph()
	h := algo.Heads{Spec: head.Spec{Head: head.CategoricalKind, N: n}, Rows: rows,
		Params: G.NewMatrix(g, tensor.Float32, G.WithShape(rows, n), G.WithName("logits"),
			G.WithValue(tensor.New(tensor.WithShape(rows, n), tensor.WithBacking(normals(rng, rows*n, 1, 0))))),
		Value: G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName("value"),
			G.WithValue(tensor.New(tensor.WithShape(rows), tensor.WithBacking(normals(rng, rows, 1, 0)))))}
	l, err := ppo.NewLoss(h, ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := G.Grad(l.Node(), h.Params, h.Value); err != nil {
		b.Fatal(err)
	}
	lc := lossCase{spec: h.Spec, width: n}
	if err := l.Fill(lc.batch(rng, rows, normals(rng, rows, 1, 0), false), nil); err != nil {
		b.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	b.ReportAllocs()
	for b.Loop() {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

package vtraceloss

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

// graphLoss is a case's loss on a gorgonia graph: the head's outputs and the value as
// leaves, the loss, and the loss's gradient with respect to each leaf.
type graphLoss struct {
	loss                   *Loss
	vm                     G.VM
	cost                   *G.Node
	params, logStd, values *tensor.Dense
	grads                  []*G.Node // d params, (d log std,) d value
}

// batchOf is the case's per-row data as a minibatch, row k for loss row k.
func batchOf(c *lossCase) *learner.SampleBatch {
	actDim := 1
	if c.gaussian {
		actDim = c.w
	}
	mb := learner.NewSampleBatch(c.rows, 1, actDim, 0)
	copy(mb.Actions, f32(c.acts))
	copy(mb.LogP, f32(c.bLogp))
	copy(mb.Rewards, f32(c.rew))
	copy(mb.Terminated, f32(c.term))
	copy(mb.Truncated, f32(c.trunc))
	copy(mb.NextValues, f32(c.next))
	copy(mb.Returns, f32(c.ret))
	copy(mb.Advantages, f32(c.adv))
	if err := mb.SetLen(c.rows); err != nil {
		panic(err)
	}
	return mb
}

func (c *lossCase) spec() head.Spec {
	if c.gaussian {
		return head.Spec{Head: head.GaussianKind, Low: make([]float32, c.w), High: make([]float32, c.w)}
	}
	return head.Spec{Head: head.CategoricalKind, N: c.w}
}

// newGraphLoss builds the case's loss (a [rows, 1] value when valueCol) and fills it.
func newGraphLoss(t *testing.T, c *lossCase, valueCol bool) *graphLoss {
	t.Helper()
	g := G.NewGraph()
	gl := &graphLoss{}
	gl.params = tensor.New(tensor.WithShape(c.rows, c.w), tensor.WithBacking(f32(c.params)))
	h := algo.Heads{Spec: c.spec(), Rows: c.rows, SeqLen: c.seqLen, TimeMajor: c.timeMajor,
		Params: G.NewMatrix(g, tensor.Float32, G.WithShape(c.rows, c.w), G.WithName("params"), G.WithValue(gl.params))}
	wrt := []*G.Node{h.Params}
	if c.gaussian {
		gl.logStd = tensor.New(tensor.WithShape(c.rows, c.w), tensor.WithBacking(f32(c.logStd)))
		h.LogStd = G.NewMatrix(g, tensor.Float32, G.WithShape(c.rows, c.w), G.WithName("log_std"), G.WithValue(gl.logStd))
		wrt = append(wrt, h.LogStd)
	}
	if valueCol {
		gl.values = tensor.New(tensor.WithShape(c.rows, 1), tensor.WithBacking(f32(c.values)))
		h.Value = G.NewMatrix(g, tensor.Float32, G.WithShape(c.rows, 1), G.WithName("value"), G.WithValue(gl.values))
	} else {
		gl.values = tensor.New(tensor.WithShape(c.rows), tensor.WithBacking(f32(c.values)))
		h.Value = G.NewVector(g, tensor.Float32, G.WithShape(c.rows), G.WithName("value"), G.WithValue(gl.values))
	}
	wrt = append(wrt, h.Value)
	a, err := New(c.kind, algo.Settings{Gamma: c.c.Gamma, Lambda: c.c.Lambda, RhoBar: c.c.RhoBar, CBar: c.c.CBar,
		ClipCoef: c.c.ClipCoef, EntCoef: c.c.EntCoef, VfCoef: c.c.VfCoef, KLCoef: c.c.KLCoef, NormalizeAdvantages: c.c.NormAdv})
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Loss(h)
	if err != nil {
		t.Fatal(err)
	}
	gl.loss = l.(*Loss)
	gl.cost = gl.loss.Node()
	if gl.grads, err = G.Grad(gl.cost, wrt...); err != nil {
		t.Fatal(err)
	}
	gl.vm = G.NewTapeMachine(g)
	t.Cleanup(func() { gl.vm.Close() })
	if err := gl.loss.Fill(batchOf(c), nil); err != nil {
		t.Fatal(err)
	}
	return gl
}

func (gl *graphLoss) run(t *testing.T) {
	t.Helper()
	gl.vm.Reset()
	if err := gl.vm.RunAll(); err != nil {
		t.Fatal(err)
	}
}

func values32(t *testing.T, n *G.Node) []float32 {
	t.Helper()
	switch v := n.Value().(type) {
	case *tensor.Dense:
		return v.Float32s()
	case *G.F32:
		return []float32{float32(*v)}
	}
	t.Fatalf("%s holds %T", n.Name(), n.Value())
	return nil
}

func near(got, want, rel, abs float64) bool { return math.Abs(got-want) <= abs+rel*math.Abs(want) }

// cases are the hand-made layouts: 3 sequences of 5 steps (seq-major and time-major) with a
// termination, a truncation, both flags on one step, and episode ends on a sequence's last
// step; and rows in no order.
func cases() []*lossCase {
	rng := rand.New(rand.NewPCG(16, 2))
	// Sequence-major rows s·5+t: seq 0 terminates at t=1 and truncates at t=3; seq 1 truncates
	// at its last step; seq 2 terminates at its last step and has both flags at t=2.
	seqEnds := map[int]int{1: 1, 3: 2, 9: 2, 12: 3, 14: 1}
	// The same marks at the same (s, t) for the time-major layout t·3+s.
	tmEnds := map[int]int{}
	for k, e := range seqEnds {
		tmEnds[(k%5)*3+k/5] = e
	}
	var out []*lossCase
	for _, kind := range []Kind{IMPALA, APPO} {
		for _, gaussian := range []bool{false, true} {
			hd := "categorical"
			if gaussian {
				hd = "gaussian"
			}
			out = append(out,
				randomCase(rng, fmt.Sprintf("%s/%s/sequences", kind, hd), kind, gaussian, 3, 5, false, seqEnds),
				randomCase(rng, fmt.Sprintf("%s/%s/time-major", kind, hd), kind, gaussian, 3, 5, true, tmEnds),
				randomCase(rng, fmt.Sprintf("%s/%s/no order", kind, hd), kind, gaussian, 9, 0, false, map[int]int{2: 1, 5: 2}))
		}
	}
	return out
}

// TestLossForward: the op's loss, statistics, V-trace targets and advantages equal the
// float64 reference from the paper's definitions, with terminations, truncations and both
// ρ̄ and c̄ clipping active.
func TestLossForward(t *testing.T) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []struct{ valueCol, norm bool }{{false, false}, {true, false}, {false, true}} {
				valueCol := mode.valueCol
				c := *c
				c.c.NormAdv = mode.norm
				gl := newGraphLoss(t, &c, valueCol)
				gl.run(t)
				logp, _ := refLogProbs(&c, c.params, c.logStd)
				vs, adv := refTargets(&c, logp, c.values)
				if mode.norm { // standardised over the rows: mean 0, Bessel-corrected std 1
					var mean, ss float64
					for _, a := range adv {
						mean += a / float64(len(adv))
					}
					for _, a := range adv {
						ss += (a - mean) * (a - mean)
					}
					std := math.Sqrt(ss / float64(len(adv)-1))
					for k := range adv {
						adv[k] = (adv[k] - mean) / (std + 1e-8)
					}
				}
				want, stats := refLoss(&c, c.params, c.logStd, c.values, vs, adv)
				if got := float64(values32(t, gl.cost)[0]); !near(got, want, 1e-5, 1e-6) {
					t.Errorf("loss %.7g, reference %.7g", got, want)
				}
				got := make([]float64, len(c.kind.StatNames()))
				gl.loss.Stats(got)
				for i, name := range c.kind.StatNames() {
					if !near(got[i], stats[i], 1e-5, 1e-6) {
						t.Errorf("%s %.7g, reference %.7g", name, got[i], stats[i])
					}
				}
				gvs, gadv := gl.loss.Targets()
				for k := range c.rows {
					if !near(float64(gvs[k]), vs[k], 1e-5, 1e-5) || !near(float64(gadv[k]), adv[k], 1e-5, 1e-5) {
						t.Errorf("row %d: v_s %.7g A_s %.7g, reference %.7g %.7g", k, gvs[k], gadv[k], vs[k], adv[k])
					}
					if !near(float64(gl.loss.LogProbs()[k]), logp[k], 1e-6, 1e-6) {
						t.Errorf("row %d: log π %v, reference %v", k, gl.loss.LogProbs()[k], logp[k])
					}
				}
			}
			// The case exercises what it claims: ρ above ρ̄ and c̄ and below 1.
			var above, below int
			logp, _ := refLogProbs(c, c.params, c.logStd)
			for k := range logp {
				r := math.Exp(logp[k] - c.bLogp[k])
				if r > c.c.RhoBar && r > c.c.CBar {
					above++
				}
				if r < c.c.CBar {
					below++
				}
			}
			if above == 0 || below == 0 {
				t.Fatalf("%d rows above ρ̄ and c̄, %d below: clipping is not exercised", above, below)
			}
		})
	}
}

// TestLossBackward: the op's gradients equal central finite differences of the float64
// reference loss with the V-trace targets held at their values (the stop-gradient).
func TestLossBackward(t *testing.T) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			gl := newGraphLoss(t, c, false)
			gl.run(t)
			logp, _ := refLogProbs(c, c.params, c.logStd)
			vs, adv := refTargets(c, logp, c.values)
			inputs := []struct {
				name string
				x    []float64
			}{{"params", c.params}}
			if c.gaussian {
				inputs = append(inputs, struct {
					name string
					x    []float64
				}{"log_std", c.logStd})
			}
			inputs = append(inputs, struct {
				name string
				x    []float64
			}{"value", c.values})
			const h = 1e-6
			worst := 0.0
			for i, in := range inputs {
				got := values32(t, gl.grads[i])
				for j := range in.x {
					x0 := in.x[j]
					in.x[j] = x0 + h
					up, _ := refLoss(c, c.params, c.logStd, c.values, vs, adv)
					in.x[j] = x0 - h
					down, _ := refLoss(c, c.params, c.logStd, c.values, vs, adv)
					in.x[j] = x0
					fd := (up - down) / (2 * h)
					worst = math.Max(worst, math.Abs(float64(got[j])-fd))
					if !near(float64(got[j]), fd, 1e-3, 2e-6) {
						t.Errorf("∂loss/∂%s[%d] = %.7g, finite differences %.7g", in.name, j, got[j], fd)
					}
				}
			}
			t.Logf("largest |analytic − finite difference| %.2g", worst)
		})
	}
}

// TestOnPolicyLambdaOneReturns (property): with on-policy data (μ = π), ρ̄ = c̄ = 1 and λ = 1,
// the op's V-trace targets are the discounted returns, bootstrapped with 0 at a termination
// and the successor's value at a truncation and at a sequence's end; and the advantages are
// r_s + γ·G_{s+1} − V(x_s). Random layouts, episode ends and data, 50 draws.
func TestOnPolicyLambdaOneReturns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	for draw := range 50 {
		seqs, L := 1+rng.IntN(4), 1+rng.IntN(8)
		ends := map[int]int{}
		for k := range seqs * L {
			if rng.IntN(4) == 0 {
				ends[k] = 1 + rng.IntN(3)
			}
		}
		kind := Kind(draw % 2)
		c := randomCase(rng, "", kind, draw%4 >= 2, seqs, L, draw%3 == 0, ends)
		c.c.RhoBar, c.c.CBar, c.c.Lambda = 1, 1, 1
		logp, _ := refLogProbs(c, c.params, c.logStd)
		copy(c.bLogp, logp)
		gl := newGraphLoss(t, c, false)
		// μ = π exactly as the op sees it: its own float32 log-probabilities.
		gl.run(t)
		mb := batchOf(c)
		copy(mb.LogP, gl.loss.LogProbs())
		if err := gl.loss.Fill(mb, nil); err != nil {
			t.Fatal(err)
		}
		gl.run(t)
		vs, adv := gl.loss.Targets()
		for s := range seqs {
			ret := 0.0 // G_{t+1}, from the back
			for tt := L - 1; tt >= 0; tt-- {
				k := c.rowOf(s, tt)
				boot := ret
				switch {
				case c.term[k] != 0:
					boot = 0
				case c.trunc[k] != 0 || tt == L-1:
					boot = c.next[k]
				}
				ret = c.rew[k] + c.c.Gamma*boot
				if !near(float64(vs[k]), ret, 1e-5, 1e-5) {
					t.Fatalf("draw %d (%d×%d, time-major %t): sequence %d step %d: v_s %.7g, return %.7g", draw, seqs, L, c.timeMajor, s, tt, vs[k], ret)
				}
				if want := ret - c.values[k]; !near(float64(adv[k]), want, 1e-5, 1e-5) {
					t.Fatalf("draw %d: sequence %d step %d: A_s %.7g, want G_s − V(x_s) = %.7g", draw, s, tt, adv[k], want)
				}
			}
		}
		st := make([]float64, len(kind.StatNames()))
		gl.loss.Stats(st)
		if rm := (algo.Stats{Names: kind.StatNames(), Values: st}).Get("rho_mean"); rm != 1 {
			t.Fatalf("draw %d: on-policy rho_mean %v", draw, rm)
		}
	}
}

// TestLossErrors: bad layouts, actions and settings are errors, not panics.
func TestLossErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	c := randomCase(rng, "", APPO, false, 2, 3, false, nil)
	g := G.NewGraph()
	p := G.NewMatrix(g, tensor.Float32, G.WithShape(6, 3), G.WithInit(G.Zeroes()))
	v := G.NewVector(g, tensor.Float32, G.WithShape(6), G.WithInit(G.Zeroes()))
	a, err := New(APPO, algo.Settings{Gamma: 0.99, Lambda: 1, ClipCoef: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Loss(algo.Heads{Spec: c.spec(), Rows: 6, SeqLen: 4, Params: p, Value: v}); err == nil {
		t.Error("6 rows taken as sequences of 4")
	}
	if _, err := a.Loss(algo.Heads{Spec: head.Spec{Head: head.GaussianKind, Low: []float32{0, 0, 0}}, Rows: 6, Params: p, Value: v}); err == nil {
		t.Error("a Gaussian head without log_std accepted")
	}
	for _, s := range []algo.Settings{
		{Gamma: 1.5, Lambda: 1, ClipCoef: 0.2},
		{Gamma: 0.9, Lambda: 1, ClipCoef: 0.2, RhoBar: -1},
		{Gamma: 0.9, Lambda: 1, ClipCoef: 0},
		{Gamma: 0.9, Lambda: 1, ClipCoef: 0.2, KLCoef: math.NaN()},
	} {
		if _, err := New(APPO, s); err == nil {
			t.Errorf("APPO accepted %+v", s)
		}
	}
	if _, err := New(IMPALA, algo.Settings{Gamma: 0.9, Lambda: 1}); err != nil {
		t.Errorf("IMPALA needs no clip coefficient: %v", err)
	}
	// An action outside the head fails the run, naming the row.
	c.acts[4] = 7
	gl := newGraphLoss(t, c, false)
	gl.vm.Reset()
	if err := gl.vm.RunAll(); err == nil {
		t.Error("action 7 of a 3-way head ran")
	}
	// A NaN value is V-trace's error, not a NaN loss.
	c.acts[4] = 1
	c.values[2] = math.NaN()
	gl = newGraphLoss(t, c, false)
	gl.vm.Reset()
	if err := gl.vm.RunAll(); err == nil {
		t.Error("a NaN value ran")
	}
}

// TestLossForwardAllocates: a run of the op's forward pass (head terms, V-trace, loss and
// derivatives) allocates nothing.
func TestLossForwardAllocates(t *testing.T) {
	for _, c := range cases() {
		gl := newGraphLoss(t, c, false)
		gl.run(t)
		op := gl.loss.op
		headIn := [][]float32{f32(c.params)}
		if c.gaussian {
			headIn = append(headIn, f32(c.logStd))
		}
		v := f32(c.values)
		if n := testing.AllocsPerRun(20, func() {
			if _, err := op.forward(headIn, v); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per forward", c.name, n)
		}
	}
}

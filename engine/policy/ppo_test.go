package policy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/internal/enginetest"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// refLoss computes CleanRL's PPO loss in float64 from ONNX Runtime's forward pass of the
// exported parameters: an implementation independent of the gorgonia graph.
func refLoss(t *testing.T, params *models.Params, mb *learner.SampleBatch, c ppo.Coefs) float64 {
	t.Helper()
	b, err := models.Export(params, 0)
	if err != nil {
		t.Fatal(err)
	}
	return refLossOf(t, b, params.Config().Spec, mb, c)
}

// refLossOf is refLoss for any ONNX policy with a categorical head.
func refLossOf(t *testing.T, b []byte, spec head.Spec, mb *learner.SampleBatch, c ppo.Coefs) float64 {
	t.Helper()
	s, err := onnx.New(context.Background(), b, onnx.Config{MaxBatch: mb.Len()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := mb.Len()
	if _, err := onnx.Feed(s, 0, []int64{int64(n), int64(mb.ObsDim)}, mb.Obs[:n*mb.ObsDim]); err != nil {
		t.Fatal(err)
	}
	if err := s.Run(n); err != nil {
		t.Fatal(err)
	}
	outs, err := head.Bind(spec, bind.HeadTensors(s.Outputs()), head.Names{})
	if err != nil {
		t.Fatal(err)
	}
	logits, _ := onnx.Output[float32](s, outs.Params)
	value, _ := onnx.Output[float32](s, outs.Value)
	var pg, vl, ent float64
	k := spec.N
	for i := range n {
		row := logits[i*k : (i+1)*k]
		m := math.Inf(-1)
		for _, l := range row {
			m = math.Max(m, float64(l))
		}
		var z float64
		for _, l := range row {
			z += math.Exp(float64(l) - m)
		}
		lse := m + math.Log(z)
		logp := float64(row[int(mb.Actions[i])]) - lse
		for _, l := range row {
			p := math.Exp(float64(l) - lse)
			ent -= p * (float64(l) - lse)
		}
		ratio := math.Exp(logp - float64(mb.LogP[i]))
		a := float64(mb.Advantages[i])
		pg += math.Max(-a*ratio, -a*math.Min(math.Max(ratio, 1-c.ClipCoef), 1+c.ClipCoef))
		v, ret, old := float64(value[i]), float64(mb.Returns[i]), float64(mb.Values[i])
		vc := old + math.Min(math.Max(v-old, -c.ClipCoef), c.ClipCoef)
		vl += math.Max((v-ret)*(v-ret), (vc-ret)*(vc-ret))
	}
	nf := float64(n)
	return pg/nf - c.EntCoef*ent/nf + c.VfCoef*0.5*vl/nf
}

func TestPPOLossAndGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	spec := head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{4}}
	params, err := models.NewParams(models.Config{Spec: spec}, rng)
	if err != nil {
		t.Fatal(err)
	}
	// Larger weights than the init, so ratios move and both clipping branches are taken.
	for i := range params.Data() {
		params.Data()[i] += float32(rng.NormFloat64() * 0.3)
	}
	const n = 32
	mb := enginetest.RandomMinibatch(rng, n, 3, enginetest.Scales{Ret: 1, Value: 0.5, LogP: 0.4})
	c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	tw, err := newNativeTower(params, n, &ppo.PPO{Coefs: c})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	grads := make([]float32, params.Size())
	stats := make([]float64, len(ppo.StatNames))
	if err := tw.Grad(mb, grads, stats); err != nil {
		t.Fatal(err)
	}
	want := refLoss(t, params, mb, c)
	if math.Abs(stats[0]-want) > 1e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("loss %.7f, reference %.7f", stats[0], want)
	}
	if stats[5] <= 0 || stats[5] >= 1 {
		t.Fatalf("clip fraction %v: the test should exercise both branches", stats[5])
	}
	// Central differences of the reference loss on a sample of parameters of every tensor.
	const eps = 1e-2
	data := params.Data()
	checked := 0
	for p := range params.Len() {
		off := params.Offset(p)
		size := 1
		for _, d := range params.Shape(p) {
			size *= d
		}
		for _, k := range []int{off, off + size/2, off + size - 1} {
			old := data[k]
			data[k] = old + eps
			up := refLoss(t, params, mb, c)
			data[k] = old - eps
			down := refLoss(t, params, mb, c)
			data[k] = old
			fd := (up - down) / (2 * eps)
			if math.Abs(fd-float64(grads[k])) > 2e-3+0.02*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %.6f, finite difference %.6f", params.Names()[p], k-off, grads[k], fd)
			}
			checked++
		}
	}
	t.Logf("loss %.6f (reference %.6f), %d gradient entries checked, clip fraction %.2f", stats[0], want, checked, stats[5])
}

// headMinibatch is a random minibatch of n rows for spec's observation and action shapes, with
// old log-probabilities near those of a uniform (categorical) or unit (Gaussian) policy.
func headMinibatch(rng *rand.Rand, n int, spec head.Spec) *learner.SampleBatch {
	obsDim, actDim := 1, 1
	for _, d := range spec.ObsShape {
		obsDim *= d
	}
	uniform := math.Log(1 / float64(spec.N))
	if spec.Head == head.GaussianKind {
		actDim = spec.ActionDim()
		uniform = -float64(actDim) * (0.5 + 0.5*math.Log(2*math.Pi))
	}
	mb := learner.NewSampleBatch(n, obsDim, actDim, 0)
	for i := range n {
		for j := range obsDim {
			mb.Obs[i*obsDim+j] = float32(rng.NormFloat64())
		}
		for j := range actDim {
			if spec.Head == head.GaussianKind {
				mb.Actions[i*actDim+j] = float32(rng.NormFloat64())
			} else {
				mb.Actions[i] = float32(rng.IntN(spec.N))
			}
		}
		mb.Advantages[i] = float32(rng.NormFloat64())
		mb.Returns[i] = float32(rng.NormFloat64())
		mb.Values[i] = float32(rng.NormFloat64() * 0.5)
		mb.LogP[i] = float32(uniform + rng.NormFloat64()*0.4)
	}
	mb.SetLen(n)
	return mb
}

// unfusedTower is the reference the fused loss is compared with: gorgonia's graph of
// Policy.LogProb and Policy.Entropy (the distribution maths as small ops), then PPO's loss as
// one op over the per-row log-probabilities and entropies.
type unfusedTower struct {
	pol                       *models.Policy
	rows                      int
	adv, ret, oldLogp, oldVal []float32
	stats                     func([]float64)
}

func newUnfusedTower(params *models.Params, rows int, c ppo.Coefs) (t *unfusedTower, err error) {
	pol, err := models.Build(G.NewGraph(), params, rows)
	if err != nil {
		return nil, err
	}
	t = &unfusedTower{pol: pol, rows: rows}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("building the unfused loss: %v", r)
		}
	}()
	in := func(name string) (*G.Node, []float32) {
		n, data, err := pol.Input(name, rows)
		if err != nil {
			panic(err)
		}
		return n, data
	}
	var adv, ret, oldLogp, oldVal *G.Node
	adv, t.adv = in("advantages")
	ret, t.ret = in("returns")
	oldLogp, t.oldLogp = in("old_logp")
	oldVal, t.oldVal = in("old_values")
	logp, err := pol.LogProb()
	if err != nil {
		return nil, err
	}
	ent, err := pol.Entropy()
	if err != nil {
		return nil, err
	}
	loss, stats, err := ppo.LogProbLoss(logp, ent, pol.Value, adv, ret, oldLogp, oldVal, rows, c)
	if err != nil {
		return nil, err
	}
	t.stats = stats
	if err := pol.Backward(loss); err != nil {
		return nil, err
	}
	return t, pol.Compile()
}

func (t *unfusedTower) StatNames() []string { return ppo.StatNames }
func (t *unfusedTower) Close() error        { return t.pol.Close() }

func (t *unfusedTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	n := mb.Len()
	copy(t.pol.ObsData(), mb.Obs[:n*mb.ObsDim])
	if t.pol.Spec().Head == head.CategoricalKind {
		acts := make([]int32, n)
		for i := range n {
			acts[i] = int32(mb.Actions[i])
		}
		if err := t.pol.SetActions(acts); err != nil {
			return err
		}
	} else if err := t.pol.SetBoxActions(mb.Actions[:n*mb.ActDim]); err != nil {
		return err
	}
	copy(t.adv, mb.Advantages[:n])
	copy(t.ret, mb.Returns[:n])
	copy(t.oldLogp, mb.LogP[:n])
	copy(t.oldVal, mb.Values[:n])
	if err := t.pol.Run(); err != nil {
		return err
	}
	if err := t.pol.Grads(grads); err != nil {
		return err
	}
	t.stats(stats)
	return nil
}

// TestFusedLoss: the one-op loss from the head's outputs (PPO's fused op) gives the loss,
// statistics and gradient of the graph built from Policy.LogProb, Policy.Entropy and the PPO
// loss op, for both heads, and refuses an action outside the categorical head or a NaN one.
func TestFusedLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   head.Spec
		bad    float32 // an action value Grad must refuse
		badMsg string
	}{
		{"categorical", head.Spec{Head: head.CategoricalKind, N: 4, ObsShape: []int{5}}, 4, "action 4 of row 7 is outside [0, 4)"},
		{"gaussian", head.Spec{Head: head.GaussianKind, N: 3, ObsShape: []int{5}, Low: []float32{-1, -1, -1}, High: []float32{1, 1, 1}},
			float32(math.NaN()), "action 1 of row 2 is NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(9, 3))
			params, err := models.NewParams(models.Config{Spec: tc.spec, Hidden: []int{16, 16}}, rng)
			if err != nil {
				t.Fatal(err)
			}
			for i := range params.Data() {
				params.Data()[i] += float32(rng.NormFloat64() * 0.3)
			}
			const n = 48
			mb := headMinibatch(rng, n, tc.spec)
			c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.05, VfCoef: 0.5}
			var grads [2][]float32
			var stats [2][]float64
			fusedTower, err := newNativeTower(params, n, &ppo.PPO{Coefs: c})
			if err != nil {
				t.Fatal(err)
			}
			defer fusedTower.Close()
			graphTower, err := newUnfusedTower(params, n, c)
			if err != nil {
				t.Fatal(err)
			}
			defer graphTower.Close()
			for k, tw := range []learner.Tower{fusedTower, graphTower} {
				grads[k], stats[k] = make([]float32, params.Size()), make([]float64, len(ppo.StatNames))
				for range 2 { // a second run must not accumulate
					if err := tw.Grad(mb, grads[k], stats[k]); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, name := range ppo.StatNames {
				if d := math.Abs(stats[0][i] - stats[1][i]); d > 1e-6*math.Max(1, math.Abs(stats[1][i])) {
					t.Errorf("%s: fused %.8f, graph %.8f", name, stats[0][i], stats[1][i])
				}
			}
			var worst float64
			for i := range grads[0] {
				d := math.Abs(float64(grads[0][i] - grads[1][i]))
				if d > 1e-6+1e-4*math.Abs(float64(grads[1][i])) {
					t.Fatalf("gradient %d: fused %.8g, graph %.8g", i, grads[0][i], grads[1][i])
				}
				worst = max(worst, d)
			}
			t.Logf("worst gradient difference %.2g over %d parameters, clip fraction %.2f", worst, len(grads[0]), stats[0][5])

			tw := fusedTower
			if tc.spec.Head == head.CategoricalKind {
				mb.Actions[7] = tc.bad
			} else {
				mb.Actions[2*mb.ActDim+1] = tc.bad
			}
			err = tw.Grad(mb, grads[0], stats[0])
			if err == nil || !strings.Contains(err.Error(), tc.badMsg) {
				t.Fatalf("Grad with action %v = %v, want an error naming it", tc.bad, err)
			}
		})
	}
}

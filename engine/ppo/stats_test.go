package ppo_test

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/ppo"
)

// TestOldApproxKL: over three rows with log-ratios 0.1, −0.2 and 0.4 (worked by hand),
// old_approx_kl is CleanRL's mean(−log r) = −0.1 and approx_kl its mean((r − 1) − log r) =
// ((e^0.1 − 1.1) + (e^−0.2 − 0.8) + (e^0.4 − 1.4))/3 = 0.0385754563.
func TestOldApproxKL(t *testing.T) {
	const rows = 3
	g := G.NewGraph()
	vec := func(name string, x ...float32) *G.Node {
		return G.NewVector(g, tensor.Float32, G.WithShape(rows), G.WithName(name),
			G.WithValue(tensor.New(tensor.WithShape(rows), tensor.WithBacking(x))))
	}
	logp := vec("logp", -0.5, -1.25, -0.75)
	oldLogp := vec("old_logp", -0.6, -1.05, -1.15)
	zeros := func(name string) *G.Node { return vec(name, 0, 0, 0) }
	loss, stats, err := ppo.LogProbLoss(logp, zeros("entropy"), zeros("value"), zeros("advantages"), zeros("returns"),
		oldLogp, zeros("old_values"), rows, ppo.Coefs{ClipCoef: 0.2, EntCoef: 0.01, VfCoef: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(loss, logp); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	st := make([]float64, len(ppo.StatNames))
	stats(st)
	s := algo.Stats{Names: ppo.StatNames, Values: st}
	// The float32 inputs carry the log-ratios to about 1e-7.
	for name, want := range map[string]float64{"old_approx_kl": -0.1, "approx_kl": 0.0385754563} {
		if got := s.Get(name); math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %.10f, want %.10f", name, got, want)
		}
	}
}

package engine

import (
	"errors"
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// Loss holds PPO's loss coefficients (Schulman et al. 2017; defaults are CleanRL's).
type Loss struct {
	ClipCoef  float64 // ε of the clipped surrogate; also clips the value loss when ClipVLoss
	ClipVLoss bool    // clip the value update around the old value, as CleanRL does
	EntCoef   float64 // weight of the entropy bonus
	VfCoef    float64 // weight of the value loss
}

// PPO statistics reported by each update, in this order.
var ppoStats = []string{"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac"}

// ppoTower computes the PPO loss's gradient on a fixed slice of rows: a learner.Tower.
type ppoTower struct {
	pol                       *models.Policy
	spec                      head.Spec
	rows                      int
	clip                      float64
	adv, ret, oldLogp, oldVal []float32
	acts                      []int32
	nodes                     lossNodes
}

// ppoTowerFactory builds towers computing the PPO loss over params' architecture.
func ppoTowerFactory(params *models.Params, loss Loss) learner.TowerFactory {
	return func(_ int, dev device.Device, rows int, flat []float32) (learner.Tower, error) {
		if dev.Kind() != device.KindCPU {
			return nil, fmt.Errorf("engine: PPO towers run on the CPU for now, not %s", dev)
		}
		if &flat[0] != &params.Data()[0] {
			return nil, errors.New("engine: towers must read the model's own parameter vector")
		}
		return newPPOTower(params, rows, loss)
	}
}

func newPPOTower(params *models.Params, rows int, c Loss) (t *ppoTower, err error) {
	g := G.NewGraph()
	pol, err := models.Build(g, params, rows)
	if err != nil {
		return nil, err
	}
	t = &ppoTower{pol: pol, spec: pol.Spec(), rows: rows, clip: c.ClipCoef, acts: make([]int32, rows)}
	defer func() {
		if r := recover(); r != nil {
			err = errors.Join(fmt.Errorf("engine: building the PPO loss: %v", r), pol.Close())
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
		return nil, errors.Join(err, pol.Close())
	}
	ent, err := pol.Entropy()
	if err != nil {
		return nil, errors.Join(err, pol.Close())
	}
	t.nodes = ppoLoss(logp, ent, pol.Value, adv, ret, oldLogp, oldVal, rows, c)
	for _, n := range t.nodes.all() {
		if err := pol.Watch(n); err != nil {
			return nil, errors.Join(err, pol.Close())
		}
	}
	if err := pol.Backward(t.nodes.loss); err != nil {
		return nil, errors.Join(err, pol.Close())
	}
	if err := pol.Compile(); err != nil {
		return nil, errors.Join(err, pol.Close())
	}
	return t, nil
}

func (t *ppoTower) StatNames() []string { return ppoStats }
func (t *ppoTower) Close() error        { return t.pol.Close() }

// Grad computes the PPO loss's gradient over mb's rows (exactly the tower's size).
func (t *ppoTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	n := mb.Len()
	if n != t.rows {
		return fmt.Errorf("engine: a PPO tower of %d rows got %d", t.rows, n)
	}
	copy(t.pol.ObsData(), mb.Obs[:n*mb.ObsDim])
	if t.spec.Head == head.CategoricalKind {
		for i := range n {
			t.acts[i] = int32(mb.Actions[i])
		}
		if err := t.pol.SetActions(t.acts); err != nil {
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
	return t.nodes.stats(n, t.clip, t.pol.Read, stats)
}

// lossNodes are the PPO loss and its parts, as graph nodes.
type lossNodes struct{ loss, pg, vl, ent, logr *G.Node }

// all lists the nodes a tower reads after each run.
func (ln lossNodes) all() []*G.Node { return []*G.Node{ln.loss, ln.pg, ln.vl, ln.ent, ln.logr} }

// stats fills stats (ppoStats order) from the nodes' values after a run over n rows, read
// through read: the loss and its parts, then CleanRL's diagnostics, approx_kl =
// mean((r − 1) − log r) and the clip fraction mean(|r − 1| > ε), from the log-ratios.
func (ln lossNodes) stats(n int, clip float64, read func(*G.Node) ([]float32, error), stats []float64) error {
	for k, node := range ln.all()[:4] {
		v, err := read(node)
		if err != nil {
			return err
		}
		stats[k] = float64(v[0])
	}
	logr, err := read(ln.logr)
	if err != nil {
		return err
	}
	var kl, clipped float64
	for _, lr := range logr[:n] {
		r := math.Exp(float64(lr))
		kl += (r - 1) - float64(lr)
		if math.Abs(r-1) > clip {
			clipped++
		}
	}
	stats[4], stats[5] = kl/float64(n), clipped/float64(n)
	return nil
}

// ppoLoss adds CleanRL's PPO loss to the graph of logp and ent ([rows]) and value ([rows, 1] or
// [rows]), with the minibatch's advantages, returns, old log-probabilities and old values as
// [rows] inputs. It panics like G.Must; callers recover.
func ppoLoss(logp, ent, value, adv, ret, oldLogp, oldVal *G.Node, rows int, c Loss) lossNodes {
	var t lossNodes
	k := func(v float64) *G.Node { return G.NewConstant(float32(v)) }
	must := G.Must
	// max(a, b) = (a + b + |a − b|)/2 and min(a, b) = (a + b − |a − b|)/2: gorgonia has no
	// element-wise max of two tensors, and these have the subgradients PyTorch's max/clamp use
	// away from ties.
	maxOf := func(a, b *G.Node) *G.Node {
		return must(G.HadamardProd(must(G.Add(must(G.Add(a, b)), must(G.Abs(must(G.Sub(a, b)))))), k(0.5)))
	}
	minOf := func(a, b *G.Node) *G.Node {
		return must(G.HadamardProd(must(G.Sub(must(G.Add(a, b)), must(G.Abs(must(G.Sub(a, b)))))), k(0.5)))
	}
	clamp := func(x *G.Node, lo, hi float64) *G.Node { return minOf(maxOf(x, k(lo)), k(hi)) }

	t.logr = must(G.Sub(logp, oldLogp))
	ratio := must(G.Exp(t.logr))
	pg1 := must(G.Neg(must(G.HadamardProd(adv, ratio))))
	pg2 := must(G.Neg(must(G.HadamardProd(adv, clamp(ratio, 1-c.ClipCoef, 1+c.ClipCoef)))))
	t.pg = must(G.Mean(maxOf(pg1, pg2)))

	v := must(G.Reshape(value, tensor.Shape{rows}))
	vUnclipped := must(G.Square(must(G.Sub(v, ret))))
	vTerm := vUnclipped
	if c.ClipVLoss {
		vClipped := must(G.Add(oldVal, clamp(must(G.Sub(v, oldVal)), -c.ClipCoef, c.ClipCoef)))
		vTerm = maxOf(vUnclipped, must(G.Square(must(G.Sub(vClipped, ret)))))
	} else {
		// old_values takes no part; keep it in the graph with a zero weight.
		vTerm = must(G.Add(vTerm, must(G.HadamardProd(oldVal, k(0)))))
	}
	t.vl = must(G.HadamardProd(must(G.Mean(vTerm)), k(0.5)))
	t.ent = must(G.Mean(ent))
	t.loss = must(G.Add(must(G.Sub(t.pg, must(G.HadamardProd(t.ent, k(c.EntCoef))))), must(G.HadamardProd(t.vl, k(c.VfCoef)))))
	return t
}

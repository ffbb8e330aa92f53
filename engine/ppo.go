package engine

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"

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
	adv, ret, oldLogp, oldVal []float32
	acts                      []int32
	boxActs                   []float32 // Gaussian actions the fused loss op reads
	fused                     bool      // one ppoHeadLossOp reads acts or boxActs
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

func newPPOTower(params *models.Params, rows int, c Loss) (*ppoTower, error) {
	return buildPPOTower(params, rows, c, true)
}

// buildPPOTower builds a PPO tower; fused selects the one-op loss from the head's outputs
// (ppoHeadLossOp) over the graph of Policy.LogProb, Policy.Entropy and ppoLossOp (which tests
// compare it with).
func buildPPOTower(params *models.Params, rows int, c Loss, fused bool) (t *ppoTower, err error) {
	g := G.NewGraph()
	pol, err := models.Build(g, params, rows)
	if err != nil {
		return nil, err
	}
	t = &ppoTower{pol: pol, spec: pol.Spec(), rows: rows, acts: make([]int32, rows)}
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
	if fused {
		// One op from the head's outputs: log-probability, entropy, loss and their gradients.
		t.fused = true
		var head headTerms
		ins := []*G.Node{pol.Logits}
		if pol.Logits != nil {
			head = &categoricalTerms{n: t.spec.N, acts: t.acts}
		} else {
			t.boxActs = make([]float32, rows*t.spec.ActionDim())
			head = &gaussianTerms{d: t.spec.ActionDim(), acts: t.boxActs}
			ins = []*G.Node{pol.Mean, pol.LogStd}
		}
		op := newPPOHeadLossOp(c, rows, pol.Value.Dims(), head)
		loss := G.Must(G.ApplyOp(op, append(ins, pol.Value, adv, ret, oldLogp, oldVal)...))
		t.nodes = lossNodes{loss: loss, op: &op.ppoLossOp}
	} else {
		logp, err := pol.LogProb()
		if err != nil {
			return nil, errors.Join(err, pol.Close())
		}
		ent, err := pol.Entropy()
		if err != nil {
			return nil, errors.Join(err, pol.Close())
		}
		t.nodes = ppoLoss(logp, ent, pol.Value, adv, ret, oldLogp, oldVal, rows, c)
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
	switch {
	case t.spec.Head == head.CategoricalKind:
		for i := range n {
			t.acts[i] = int32(mb.Actions[i])
		}
		// The fused loss op reads t.acts and checks their range; the graph needs one-hots.
		if !t.fused {
			if err := t.pol.SetActions(t.acts); err != nil {
				return err
			}
		}
	case t.fused:
		if mb.ActDim != t.spec.ActionDim() {
			return fmt.Errorf("engine: the batch has %d action values per row, the %s head %d", mb.ActDim, t.spec.Head, t.spec.ActionDim())
		}
		copy(t.boxActs, mb.Actions[:n*mb.ActDim])
	default:
		if err := t.pol.SetBoxActions(mb.Actions[:n*mb.ActDim]); err != nil {
			return err
		}
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
	t.nodes.stats(stats)
	return nil
}

// lossNodes are the PPO loss node and the fused op computing it.
type lossNodes struct {
	loss *G.Node
	op   *ppoLossOp
}

// stats copies the last run's statistics (ppoStats order) into stats.
func (ln lossNodes) stats(stats []float64) { copy(stats, ln.op.stats[:]) }

// ppoLoss adds CleanRL's PPO loss, one fused op, over logp and ent ([rows]) and value
// ([rows, 1] or [rows]), with the minibatch's advantages, returns, old log-probabilities and
// old values as [rows] inputs. It panics like G.Must; callers recover.
func ppoLoss(logp, ent, value, adv, ret, oldLogp, oldVal *G.Node, rows int, c Loss) lossNodes {
	op := &ppoLossOp{c: c, rows: rows, valueDims: value.Dims()}
	return lossNodes{loss: G.Must(G.ApplyOp(op, logp, ent, value, adv, ret, oldLogp, oldVal)), op: op}
}

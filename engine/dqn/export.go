package dqn

import (
	"fmt"

	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// OutputQ is the exported Q-network's output: one Q-value per action, [batch, actions].
const OutputQ = "q_values"

// Export writes the online Q-network as an ONNX policy: input "obs" [batch, obsDim], output
// "q_values" [batch, actions], and spec's metadata with the qvalues head and exploration rate
// epsilon (the batchers act ε-greedily with it, eval greedily). spec gives the env, the
// observation shape and the Discrete action space (its Head and Epsilon are set here); the
// layers are named q.0, q.1, …
func (d *DQN) Export(spec head.Spec, epsilon float64, version int64) ([]byte, error) {
	spec.Head, spec.Epsilon = head.QValuesKind, epsilon
	obs := 1
	for _, n := range spec.ObsShape {
		obs *= n
	}
	if len(spec.ObsShape) == 0 || obs != d.obsDim || spec.N != d.net.Out() {
		return nil, fmt.Errorf("%w: exporting a Q-network of %d observations and %d actions with a spec of observation shape %v and %d actions",
			ErrConfig, d.obsDim, d.net.Out(), spec.ObsShape, spec.N)
	}
	g := models.NewDenseGraph(d.obsDim)
	out, err := d.net.Export(g, d.params, models.InputObs, "q")
	if err != nil {
		return nil, err
	}
	if err := g.Rename(out, OutputQ); err != nil {
		return nil, err
	}
	return g.Marshal(spec, version, "dqn/q", OutputQ)
}

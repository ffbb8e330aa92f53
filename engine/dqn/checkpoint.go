package dqn

import (
	"fmt"

	"github.com/towerrl/towerrl/models"
)

// Store puts DQN's state into c: the online and target networks ("dqn.q", "dqn.q_target",
// flat in engine/internal/mlp's layout), Adam's moments ("dqn.adam.m", "dqn.adam.v") and step
// count (Ints "dqn.adam_steps"), and the update count (Ints "dqn.updates"). With Load, a
// resumed DQN takes the same steps, bit for bit, as one never stopped.
func (d *DQN) Store(c *models.Checkpoint) error {
	st := d.opt.State()
	for _, t := range []struct {
		name string
		data []float32
	}{{"dqn.q", d.params}, {"dqn.q_target", d.target}, {"dqn.adam.m", st["adam.m"]}, {"dqn.adam.v", st["adam.v"]}} {
		if err := c.Put(t.name, []int{len(t.data)}, t.data); err != nil {
			return fmt.Errorf("dqn: %w", err)
		}
	}
	if c.Ints == nil {
		c.Ints = map[string]int64{}
	}
	c.Ints["dqn.adam_steps"], c.Ints["dqn.updates"] = int64(d.opt.Steps()), d.updates
	return nil
}

// Load restores what Store put into c, into a DQN of the same network shape. It checks every
// tensor before it writes any.
func (d *DQN) Load(c *models.Checkpoint) error {
	st := d.opt.State()
	dst := []struct {
		name string
		data []float32
	}{{"dqn.q", d.params}, {"dqn.q_target", d.target}, {"dqn.adam.m", st["adam.m"]}, {"dqn.adam.v", st["adam.v"]}}
	for _, t := range dst {
		got, ok := c.Tensor(t.name)
		if !ok {
			return fmt.Errorf("dqn: the checkpoint has no %q", t.name)
		}
		if len(got.Data) != len(t.data) {
			return fmt.Errorf("dqn: the checkpoint's %q holds %d values, this network %d", t.name, len(got.Data), len(t.data))
		}
	}
	steps, ok1 := c.Ints["dqn.adam_steps"]
	updates, ok2 := c.Ints["dqn.updates"]
	if !ok1 || !ok2 || steps < 0 || updates < 0 {
		return fmt.Errorf("dqn: the checkpoint's step counts are missing or negative (adam %d, updates %d)", steps, updates)
	}
	for _, t := range dst {
		got, _ := c.Tensor(t.name)
		copy(t.data, got.Data)
	}
	d.opt.SetSteps(int(steps))
	d.updates = updates
	return nil
}

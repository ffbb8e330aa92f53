package sac

import (
	"fmt"

	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// state lists SAC's tensors under their checkpoint names, and its optimisers with the names of
// their step counts.
func (s *SAC) state() (tensors []struct {
	name string
	data []float32
}, opts map[string]*learner.Adam) {
	add := func(name string, data []float32) {
		tensors = append(tensors, struct {
			name string
			data []float32
		}{name, data})
	}
	add("sac.actor", s.actorP)
	add("sac.critic", s.criticP)
	add("sac.critic_target", s.target)
	add("sac.log_alpha", s.logAlpha)
	if s.sde != nil {
		add("sac.sde_acting_w", s.sde.actW)
	}
	opts = map[string]*learner.Adam{"sac.actor": s.actorOpt, "sac.critic": s.criticOpt, "sac.alpha": s.alphaOpt}
	for _, name := range []string{"sac.actor", "sac.critic", "sac.alpha"} {
		st := opts[name].State()
		add(name+".adam.m", st["adam.m"])
		add(name+".adam.v", st["adam.v"])
	}
	return tensors, opts
}

// Store puts SAC's state into c: the actor, the critics and their targets ("sac.actor",
// "sac.critic", "sac.critic_target", flat in engine/internal/mlp's layout, Q_1 then Q_2),
// log α ("sac.log_alpha"), with UseSDE gSDE's acting W ("sac.sde_acting_w"; log σ is the
// tail of "sac.actor"), each optimiser's moments ("sac.actor.adam.m", ..., "sac.alpha.adam.v")
// and step count (Ints "sac.actor.adam_steps", ...), and the update count (Ints "sac.updates").
// With Load, a resumed SAC takes the same steps, bit for bit, as one never stopped, given the
// same noise.
func (s *SAC) Store(c *models.Checkpoint) error {
	tensors, opts := s.state()
	for _, t := range tensors {
		if err := c.Put(t.name, []int{len(t.data)}, t.data); err != nil {
			return fmt.Errorf("sac: %w", err)
		}
	}
	if c.Ints == nil {
		c.Ints = map[string]int64{}
	}
	for name, o := range opts {
		c.Ints[name+".adam_steps"] = int64(o.Steps())
	}
	c.Ints["sac.updates"] = s.updates
	return nil
}

// Load restores what Store put into c, into a SAC of the same shapes. It checks everything
// before it writes anything.
func (s *SAC) Load(c *models.Checkpoint) error {
	tensors, opts := s.state()
	for _, t := range tensors {
		got, ok := c.Tensor(t.name)
		if !ok {
			return fmt.Errorf("sac: the checkpoint has no %q", t.name)
		}
		if len(got.Data) != len(t.data) {
			return fmt.Errorf("sac: the checkpoint's %q holds %d values, this SAC %d", t.name, len(got.Data), len(t.data))
		}
	}
	for _, name := range []string{"sac.actor.adam_steps", "sac.critic.adam_steps", "sac.alpha.adam_steps", "sac.updates"} {
		if v, ok := c.Ints[name]; !ok || v < 0 {
			return fmt.Errorf("sac: the checkpoint's %q is missing or negative", name)
		}
	}
	for _, t := range tensors {
		got, _ := c.Tensor(t.name)
		copy(t.data, got.Data)
	}
	for name, o := range opts {
		o.SetSteps(int(c.Ints[name+".adam_steps"]))
	}
	s.updates = c.Ints["sac.updates"]
	return nil
}

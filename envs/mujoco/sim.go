//go:build mujoco && cgo

package mujoco

import (
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/envs"
)

// task is what one of Gymnasium's v4 envs adds to its model: reset noise, observation,
// reward and termination. Its methods read and write the env's mjData through the views of
// data; they must not allocate.
type task interface {
	// resetState writes the state a reset starts from (init_qpos and init_qvel plus noise
	// drawn from rng) into qpos and qvel.
	resetState(md *model, rng *rand.Rand, qpos, qvel []float64)
	// before records, into pre, what the reward needs from the state before a step (a
	// position).
	before(md *model, d *data, pre *[3]float64)
	// after returns the reward and termination of the step just taken with action a, given
	// before's record.
	after(md *model, d *data, pre *[3]float64, a []float32) (reward float64, terminated bool)
	// observe writes the observation of d's state to obs.
	observe(md *model, d *data, obs []float32)
}

// sim is the envs.Dynamics of n copies of one MuJoCo env: one mjData each over the shared
// compiled model, stepped by one cgo call per Step.
type sim struct {
	def  *def
	md   *model
	ds   []*data
	ptrs dataPtrs
	pre  [][3]float64
	qpos []float64 // reset scratch
	qvel []float64
	nu   int

	failed []bool // per env: MuJoCo failed in this Step
}

var (
	_ envs.Dynamics   = (*sim)(nil)
	_ envs.StateSaver = (*sim)(nil)
	_ envs.Physics    = (*sim)(nil)
)

func newSim(df *def, n int) (envs.Dynamics, error) {
	md, err := df.model()
	if err != nil {
		return nil, err
	}
	s := &sim{def: df, md: md, pre: make([][3]float64, n), failed: make([]bool, n), qpos: make([]float64, md.nq), qvel: make([]float64, md.nv), nu: md.nu}
	for range n {
		d, err := newData(md)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.ds = append(s.ds, d)
	}
	s.ptrs = newDataPtrs(s.ds)
	return s, nil
}

// Reset implements envs.Dynamics.
func (s *sim) Reset(i int, rng *rand.Rand, obs []float32) {
	s.def.task.resetState(s.md, rng, s.qpos, s.qvel)
	d := s.ds[i]
	// mj_resetData and mj_forward from a finite state near the model's own do not fail; if
	// MuJoCo ever did, its error unwinds (no crash) and the observation is of what it left.
	_ = s.md.reset(d, s.qpos, s.qvel)
	s.def.task.observe(s.md, d, obs)
}

// Step implements envs.Dynamics: ctrl = action (MuJoCo clamps it to ctrlrange where the model
// says ctrllimited, as under Gymnasium), frame_skip mj_steps, then reward and observation.
func (s *sim) Step(a envs.Actions, obs, rewards, terminated []float32) {
	t, md, nu, od := s.def.task, s.md, s.nu, s.def.obsDim
	for i, d := range s.ds {
		t.before(md, d, &s.pre[i])
		row := a.Box[i*nu : (i+1)*nu]
		for j, x := range row {
			d.ctrl[j] = float64(x)
		}
	}
	// An internal MuJoCo error (its stack exhausted, say; a diverged simulation is reset by
	// MuJoCo itself and is no error) stops twr_step at the env it hit: that env's episode ends
	// there, terminated with reward 0, and the envs after it are stepped by the next call.
	clear(s.failed)
	for lo := 0; lo < len(s.ds); {
		k, err := md.step(s.ptrs, lo, len(s.ds)-lo, s.def.frameSkip, s.def.rne)
		if err == nil {
			break
		}
		s.failed[lo+k] = true
		lo += k + 1
	}
	for i, d := range s.ds {
		t.observe(md, d, obs[i*od:(i+1)*od])
		if s.failed[i] {
			rewards[i], terminated[i] = 0, 1
			continue
		}
		r, term := t.after(md, d, &s.pre[i], a.Box[i*nu:(i+1)*nu])
		rewards[i] = float32(r)
		terminated[i] = 0
		if term {
			terminated[i] = 1
		}
	}
}

// Close frees the envs' mjData. Idempotent.
func (s *sim) Close() error {
	for _, d := range s.ds {
		d.free()
	}
	s.ds = nil
	s.ptrs.free()
	return nil
}

// NQ implements envs.Physics.
func (s *sim) NQ() int { return s.md.nq }

// NV implements envs.Physics.
func (s *sim) NV() int { return s.md.nv }

// State implements envs.Physics.
func (s *sim) State(i int, qpos, qvel []float64) {
	copy(qpos, s.ds[i].qpos)
	copy(qvel, s.ds[i].qvel)
}

// SetState implements envs.Physics.
func (s *sim) SetState(i int, qpos, qvel []float64) error {
	if len(qpos) != s.md.nq || len(qvel) != s.md.nv {
		return fmt.Errorf("%w: %s: SetState needs qpos of %d and qvel of %d values, got %d and %d",
			envs.ErrConfig, s.def.spec.ID, s.md.nq, s.md.nv, len(qpos), len(qvel))
	}
	if !finite(qpos) || !finite(qvel) {
		return fmt.Errorf("%w: %s: SetState: qpos and qvel must be finite", envs.ErrConfig, s.def.spec.ID)
	}
	return s.md.setState(s.ds[i], qpos, qvel)
}

// Observe implements envs.Physics.
func (s *sim) Observe(i int, obs []float32) { s.def.task.observe(s.md, s.ds[i], obs) }

// SaveState implements envs.StateSaver: per env, the time, then the arrays of data.saved (the
// state mj_step reads, the solver's warm start among them, and the derived arrays the
// observations and rewards read), so that a restored env continues bit for bit.
func (s *sim) SaveState(dst []float64) []float64 {
	for _, d := range s.ds {
		dst = append(dst, d.time())
		for _, a := range d.saved {
			dst = append(dst, a...)
		}
	}
	return dst
}

// LoadState implements envs.StateSaver.
func (s *sim) LoadState(src []float64) error {
	per := 1
	if len(s.ds) > 0 {
		for _, a := range s.ds[0].saved {
			per += len(a)
		}
	}
	if len(src) != per*len(s.ds) {
		return fmt.Errorf("%d state values for %d", len(src), per*len(s.ds))
	}
	for _, d := range s.ds {
		d.setTime(src[0])
		k := 1
		for _, a := range d.saved {
			k += copy(a, src[k:])
		}
		src = src[per:]
	}
	return nil
}

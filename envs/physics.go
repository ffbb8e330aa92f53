package envs

import "fmt"

// Physics is implemented by the Dynamics of simulated bodies (the MuJoCo envs of envs/mujoco):
// each env's generalised positions and velocities, read and set as Gymnasium's data.qpos,
// data.qvel and set_state.
type Physics interface {
	// NQ and NV are the lengths of qpos and qvel.
	NQ() int
	NV() int
	// State copies env i's qpos and qvel into qpos (len NQ) and qvel (len NV).
	State(i int, qpos, qvel []float64)
	// SetState sets env i's qpos and qvel and recomputes what follows from them (MuJoCo's
	// mj_forward), as Gymnasium's set_state; it fails, changing nothing, on slices of the wrong
	// length or values that are not finite.
	SetState(i int, qpos, qvel []float64) error
	// Observe writes env i's observation of its current state to obs (len ObsDim).
	Observe(i int, obs []float32)
}

// PhysicsAccess reads and sets the physical state of the envs of a VecEnv or Env whose
// environment is simulated (see Physics). Its methods take the env's index in the VecEnv (0
// for an Env). It is owned with the VecEnv: use it from the goroutine that steps it.
type PhysicsAccess struct {
	shards []Physics // the dynamics of each shard
	lo     []int     // first env of each shard, then n
	obs    []float32 // the VecEnv's Obs buffer
	od     int       // observation values per env
}

// PhysicsOf returns the physics of e, a VecEnv of Make or an Env of New (both have Spec); ok
// is false for an environment that is not simulated (classic control) or another
// implementation (a DeviceEnv: ask the VecEnv it wraps).
func PhysicsOf(e interface{ Spec() Spec }) (p *PhysicsAccess, ok bool) {
	switch v := e.(type) {
	case *vecEnv:
		ph, ok := v.dyn.(Physics)
		if !ok {
			return nil, false
		}
		return &PhysicsAccess{shards: []Physics{ph}, lo: []int{0, v.n}, obs: v.buf.Obs, od: v.obsDim}, true
	case *parallelEnv:
		a := &PhysicsAccess{lo: v.lo, obs: v.buf.Obs, od: v.spec.Observation.Dim()}
		for _, s := range v.shards {
			ph, ok := s.dyn.(Physics)
			if !ok {
				return nil, false
			}
			a.shards = append(a.shards, ph)
		}
		return a, true
	case *single:
		ph, ok := v.dyn.(Physics)
		if !ok {
			return nil, false
		}
		return &PhysicsAccess{shards: []Physics{ph}, lo: []int{0, 1}, obs: v.obs, od: len(v.obs)}, true
	}
	return nil, false
}

// NQ and NV are the lengths of qpos and qvel.
func (p *PhysicsAccess) NQ() int { return p.shards[0].NQ() }
func (p *PhysicsAccess) NV() int { return p.shards[0].NV() }

// NumEnvs is the number of envs.
func (p *PhysicsAccess) NumEnvs() int { return p.lo[len(p.lo)-1] }

// find returns the shard holding env i and i's index in it.
func (p *PhysicsAccess) find(i int) (Physics, int) {
	for s := range p.shards {
		if i < p.lo[s+1] {
			return p.shards[s], i - p.lo[s]
		}
	}
	panic("unreachable: index checked by the caller")
}

func (p *PhysicsAccess) check(i int) error {
	if i < 0 || i >= p.NumEnvs() {
		return fmt.Errorf("%w: env %d of %d", ErrConfig, i, p.NumEnvs())
	}
	return nil
}

// State copies env i's qpos (len NQ) and qvel (len NV).
func (p *PhysicsAccess) State(i int, qpos, qvel []float64) error {
	if err := p.check(i); err != nil {
		return err
	}
	if len(qpos) != p.NQ() || len(qvel) != p.NV() {
		return fmt.Errorf("%w: State needs qpos of %d and qvel of %d values, got %d and %d",
			ErrConfig, p.NQ(), p.NV(), len(qpos), len(qvel))
	}
	ph, j := p.find(i)
	ph.State(j, qpos, qvel)
	return nil
}

// SetState sets env i's state (Gymnasium's set_state) and rewrites its row of the observation
// buffer (the VecEnv's Obs, or the Env's last observation) to the observation of that state,
// so that the next Step acts from it. The env's time-limit counter is unchanged.
func (p *PhysicsAccess) SetState(i int, qpos, qvel []float64) error {
	if err := p.check(i); err != nil {
		return err
	}
	ph, j := p.find(i)
	if err := ph.SetState(j, qpos, qvel); err != nil {
		return err
	}
	ph.Observe(j, p.obs[i*p.od:(i+1)*p.od])
	return nil
}

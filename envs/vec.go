package envs

import (
	"fmt"
	"math/rand/v2"
)

var (
	_ VecEnv = (*vecEnv)(nil)
	_ Env    = (*single)(nil)
)

// vecEnv is the VecEnv of Make: registered Dynamics plus time limit, autoreset,
// action checking and seeding.
type vecEnv struct {
	spec    Spec
	dyn     Dynamics
	n       int
	obsDim  int
	limit   int32
	rngs    []*rand.Rand
	pcgs    []*rand.PCG // the rngs' sources, for snapshots
	elapsed []int32     // steps taken in the current episode, per env
	buf     Buffers
	ready   bool // Reset has been called
	closed  bool
}

func newVec(spec Spec, dyn Dynamics, cfg Config) *vecEnv {
	return newVecOver(spec, dyn, cfg, newBuffers(cfg.NumEnvs, spec.Observation.Dim()))
}

// newBuffers allocates the Buffers of n envs with od observation values each.
func newBuffers(n, od int) Buffers {
	return Buffers{
		Obs:        make([]float32, n*od),
		Rewards:    make([]float32, n),
		Terminated: make([]float32, n),
		Truncated:  make([]float32, n),
		FinalObs:   make([]float32, n*od),
	}
}

// newVecOver is newVec writing into buf, which holds cfg.NumEnvs envs' rows (a shard of a
// parallel VecEnv's buffers).
func newVecOver(spec Spec, dyn Dynamics, cfg Config, buf Buffers) *vecEnv {
	n, od := cfg.NumEnvs, spec.Observation.Dim()
	limit := spec.MaxEpisodeSteps
	if cfg.MaxEpisodeSteps > 0 {
		limit = cfg.MaxEpisodeSteps
		spec.MaxEpisodeSteps = limit
	}
	v := &vecEnv{
		spec:    spec,
		dyn:     dyn,
		n:       n,
		obsDim:  od,
		limit:   int32(limit),
		rngs:    make([]*rand.Rand, n),
		pcgs:    make([]*rand.PCG, n),
		elapsed: make([]int32, n),
		buf:     buf,
	}
	for i := range v.rngs {
		v.rngs[i], v.pcgs[i] = newPCGStream(cfg.Seed, cfg.Offset+i)
	}
	return v
}

func (v *vecEnv) Spec() Spec       { return cloneSpec(v.spec) }
func (v *vecEnv) NumEnvs() int     { return v.n }
func (v *vecEnv) Buffers() Buffers { return v.buf }

func (v *vecEnv) Reset() error {
	if v.closed {
		return ErrClosed
	}
	od := v.obsDim
	for i := range v.n {
		v.dyn.Reset(i, v.rngs[i], v.buf.Obs[i*od:(i+1)*od:(i+1)*od])
		v.elapsed[i] = 0
	}
	clear(v.buf.Rewards)
	clear(v.buf.Terminated)
	clear(v.buf.Truncated)
	v.ready = true
	return nil
}

func (v *vecEnv) Step(a Actions) error {
	if err := checkStep(v.closed, v.ready, v.spec.Action, v.n, a); err != nil {
		return err
	}
	v.step(a)
	return nil
}

// checkStep is what Step refuses, before any env moves: a closed VecEnv, one never Reset, and
// actions that do not fit space for n envs.
func checkStep(closed, ready bool, space Space, n int, a Actions) error {
	if closed {
		return ErrClosed
	}
	if !ready {
		return ErrNeedsReset
	}
	return checkActions(space, n, a)
}

// step is Step on checked actions.
func (v *vecEnv) step(a Actions) {
	b := v.buf
	v.dyn.Step(a, b.Obs, b.Rewards, b.Terminated)
	od, limit := v.obsDim, v.limit
	elapsed := v.elapsed[:v.n]
	term, trunc := b.Terminated[:v.n], b.Truncated[:v.n]
	for i, e := range elapsed {
		e++
		tr := float32(0)
		if e == limit { // limit 0 (none) never matches: e >= 1
			tr = 1
		}
		trunc[i] = tr
		if term[i] != 0 || tr != 0 {
			row := b.Obs[i*od : (i+1)*od : (i+1)*od]
			copy(b.FinalObs[i*od:(i+1)*od], row)
			v.dyn.Reset(i, v.rngs[i], row)
			e = 0
		}
		elapsed[i] = e
	}
}

func (v *vecEnv) Close() error {
	if v.closed {
		return nil
	}
	v.closed = true
	return closeDynamics(v.dyn)
}

// closeDynamics releases what dyn holds outside Go's heap (a physics engine's data), where it
// has a Close method.
func closeDynamics(dyn Dynamics) error {
	if c, ok := dyn.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// single is the Env of New: one env without autoreset.
type single struct {
	spec    Spec
	dyn     Dynamics
	rng     *rand.Rand
	obs     []float32
	rew     [1]float32
	term    [1]float32
	limit   int
	elapsed int
	ready   bool // an episode is running
	closed  bool
}

func (s *single) Spec() Spec { return cloneSpec(s.spec) }

func (s *single) Reset() ([]float32, error) {
	if s.closed {
		return nil, ErrClosed
	}
	s.dyn.Reset(0, s.rng, s.obs)
	s.elapsed, s.ready = 0, true
	return s.obs, nil
}

func (s *single) Step(a Actions) ([]float32, float32, bool, bool, error) {
	if s.closed {
		return nil, 0, false, false, ErrClosed
	}
	if !s.ready {
		return nil, 0, false, false, ErrNeedsReset
	}
	if err := checkActions(s.spec.Action, 1, a); err != nil {
		return nil, 0, false, false, err
	}
	s.dyn.Step(a, s.obs, s.rew[:], s.term[:])
	s.elapsed++
	term := s.term[0] != 0
	trunc := s.limit > 0 && s.elapsed >= s.limit
	if term || trunc {
		s.ready = false
	}
	return s.obs, s.rew[0], term, trunc, nil
}

func (s *single) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return closeDynamics(s.dyn)
}

// String describes the VecEnv for logs.
func (v *vecEnv) String() string {
	return fmt.Sprintf("VecEnv(%s, n=%d)", v.spec.ID, v.n)
}

package batcher

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
)

// Agent is the policy side of a worker, as in rlstructures: from observations (and a
// recurrent state) to actions and agent information, for a batch of envs. An Agent belongs to
// one worker goroutine.
type Agent interface {
	// Initial returns the recurrent state for n envs; nil for a feed-forward agent.
	Initial(n int) ([]*device.Tensor, error)
	// Act reads in and writes the first in.N rows of out.
	Act(in AgentInput, out AgentOutput) error
	// Version is the version of the policy the agent runs.
	Version() int64
	// Close releases the agent's resources.
	Close() error
}

// AgentInput is what an Agent reads for one step.
type AgentInput struct {
	N   int            // number of envs (rows) this step
	Obs *device.Tensor // [N × obs]
	// State is the recurrent state before the step, one tensor [N × row] per state of the
	// agent (from Initial); nil for a feed-forward agent.
	State []*device.Tensor
	// Starts is [N]: 1 where the step is the first of an env's episode (its state is then
	// zero), else 0. Nil means no episode starts.
	Starts *device.Tensor
}

// AgentOutput is what an Agent writes for one step.
type AgentOutput struct {
	// Actions [N × act] are the raw actions LogP refers to: a Discrete action's index as a
	// float32; a Gaussian's unclipped draw; a tanh-gaussian's draw u before tanh (see Rollout).
	Actions *device.Tensor
	// EnvActions [N × act] are the actions as the env takes them: a Box's clipped to its
	// bounds; a tanh-gaussian's tanh(u) mapped onto them.
	EnvActions *device.Tensor
	LogP       *device.Tensor // [N] log-probability of Actions; 0 for a deterministic-only policy
	Value      *device.Tensor // [N] state value; zeros for a policy without a value output
	// State receives the recurrent state after the step, laid out as AgentInput.State.
	State []*device.Tensor
}

func (o AgentOutput) tensors() []*device.Tensor {
	return append([]*device.Tensor{o.Actions, o.EnvActions, o.LogP, o.Value}, o.State...)
}

// CheckDevice wraps agent so that every step verifies that each input and output tensor lives
// on dev; a misplaced tensor fails the step with a *device.PlacementError naming it.
func CheckDevice(agent Agent, dev device.Device) Agent { return &checked{Agent: agent, dev: dev} }

type checked struct {
	Agent
	dev device.Device
}

func (c *checked) Initial(n int) ([]*device.Tensor, error) {
	st, err := c.Agent.Initial(n)
	if err != nil {
		return nil, err
	}
	if err := device.CheckDevice(c.dev, st...); err != nil {
		return nil, fmt.Errorf("batcher: agent initial state: %w", err)
	}
	return st, nil
}

func (c *checked) Act(in AgentInput, out AgentOutput) error {
	if err := device.CheckDevice(c.dev, in.Obs); err != nil {
		return fmt.Errorf("batcher: agent input: %w", err)
	}
	if in.Starts != nil {
		if err := device.CheckDevice(c.dev, in.Starts); err != nil {
			return fmt.Errorf("batcher: agent input episode starts: %w", err)
		}
	}
	if err := device.CheckDevice(c.dev, in.State...); err != nil {
		return fmt.Errorf("batcher: agent input state: %w", err)
	}
	if err := device.CheckDevice(c.dev, out.tensors()...); err != nil {
		return fmt.Errorf("batcher: agent output: %w", err)
	}
	if err := c.Agent.Act(in, out); err != nil {
		return err
	}
	if err := device.CheckDevice(c.dev, out.tensors()...); err != nil {
		return fmt.Errorf("batcher: agent output after the step: %w", err)
	}
	return nil
}

// host returns t's host memory, for agents that compute on the CPU.
func host(t *device.Tensor) ([]float32, error) {
	if t == nil {
		return nil, errors.New("batcher: missing tensor")
	}
	h, ok := t.Host()
	if !ok {
		return nil, fmt.Errorf("batcher: tensor %q is on %s, this agent computes on the CPU", t.Name(), t.Device())
	}
	return h, nil
}

// host returns the host memory of the output tensors, for agents that compute on the CPU.
func (o AgentOutput) host() (acts, envActs, logp, value []float32, err error) {
	for _, p := range []struct {
		dst *[]float32
		t   *device.Tensor
	}{{&acts, o.Actions}, {&envActs, o.EnvActions}, {&logp, o.LogP}, {&value, o.Value}} {
		if *p.dst, err = host(p.t); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return acts, envActs, logp, value, nil
}

// valuer is implemented by agents that can evaluate the state value of observations without
// acting (no random draws): the batcher asks it for the values it bootstraps from.
type valuer interface {
	// values writes the value of the first n rows of obs (row-major, as AgentInput.Obs) to
	// dst; state holds the n rows' recurrent states (nil for a feed-forward agent) and
	// starts their episode-start flags (nil: none starts).
	values(obs []float32, state [][]float32, starts []float32, n int, dst []float32) error
}

// timed is implemented by agents that measure their inference time apart from sampling.
type timed interface{ inferenceTime() time.Duration }

// randomAgent acts uniformly at random over the action space.
type randomAgent struct {
	space envs.Space
	rngs  []*rand.Rand
}

func (a *randomAgent) Initial(int) ([]*device.Tensor, error) { return nil, nil }
func (a *randomAgent) Version() int64                        { return 0 }
func (a *randomAgent) Close() error                          { return nil }

func (a *randomAgent) Act(in AgentInput, out AgentOutput) error {
	acts, envActs, logp, value, err := out.host()
	if err != nil {
		return err
	}
	switch s := a.space.(type) {
	case envs.Discrete:
		lp := float32(-math.Log(float64(s.N)))
		for i := range in.N {
			k := float32(a.rngs[i].IntN(s.N))
			acts[i], envActs[i], logp[i] = k, k, lp
		}
	case envs.Box:
		d := s.Dim()
		var lp float64
		for j := range d {
			lp -= math.Log(float64(s.High[j]) - float64(s.Low[j]))
		}
		for i := range in.N {
			for j := range d {
				v := s.Low[j] + float32(a.rngs[i].Float64())*(s.High[j]-s.Low[j])
				acts[i*d+j], envActs[i*d+j] = v, v
			}
			logp[i] = float32(lp)
		}
	default:
		return fmt.Errorf("batcher: random agent: unsupported action space %v", a.space)
	}
	clear(value[:in.N])
	return nil
}

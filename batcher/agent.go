package batcher

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
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
	N     int            // number of envs (rows) this step
	Obs   *device.Tensor // [N × obs]
	State []*device.Tensor
}

// AgentOutput is what an Agent writes for one step.
type AgentOutput struct {
	Actions    *device.Tensor // [N × act] raw actions; a Discrete action is its index as a float32
	EnvActions *device.Tensor // [N × act] actions as the env takes them (a Box's clipped to its bounds)
	LogP       *device.Tensor // [N] log-probability of Actions
	Value      *device.Tensor // [N] state value; zeros for a policy without a value output
	State      []*device.Tensor
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
	// values writes the value of the first n rows of obs (row-major, as AgentInput.Obs) to dst.
	values(obs []float32, n int, dst []float32) error
}

// values implements valuer: one inference over the rows, the value output read.
func (a *onnxAgent) values(obs []float32, n int, dst []float32) error {
	if a.value == nil {
		clear(dst[:n])
		return nil
	}
	copy(a.in, obs[:len(a.in)/a.sess.MaxBatch()*n])
	start := time.Now()
	if err := a.sess.Run(n); err != nil {
		return err
	}
	a.inference += time.Since(start)
	copy(dst[:n], a.value[:n])
	return nil
}

// timed is implemented by agents that measure their inference time apart from sampling.
type timed interface{ inferenceTime() time.Duration }

// onnxAgent runs an ONNX policy on CPU memory and samples its head. Each env has its own
// random stream, so actions do not depend on how envs are spread over workers.
type onnxAgent struct {
	sess          *onnx.Session
	spec          head.Spec
	in            []float32 // session input buffer
	params        []float32 // logits or mean
	logStd        []float32 // nil for categorical
	value         []float32 // nil without a value output
	logStdPerRow  bool
	act           []int32 // one discrete action, scratch
	lp            []float32
	rngs          []*rand.Rand // one per env, owned by the worker
	deterministic bool
	version       int64
	inference     time.Duration
}

func (a *onnxAgent) Initial(int) ([]*device.Tensor, error) { return nil, nil }
func (a *onnxAgent) Version() int64                        { return a.version }
func (a *onnxAgent) Close() error                          { return a.sess.Close() }
func (a *onnxAgent) inferenceTime() time.Duration          { return a.inference }

func (a *onnxAgent) Act(in AgentInput, out AgentOutput) error {
	obs, err := host(in.Obs)
	if err != nil {
		return err
	}
	acts, envActs, logp, value, err := out.host()
	if err != nil {
		return err
	}
	n := in.N
	copy(a.in, obs[:len(obs)/in.Obs.Shape()[0]*n])
	start := time.Now()
	if err := a.sess.Run(n); err != nil {
		return err
	}
	a.inference += time.Since(start)
	d := a.spec.ActionDim()
	if a.spec.Head == head.CategoricalKind {
		c := head.Categorical{N: a.spec.N}
		for i := range n {
			row := a.params[i*d : (i+1)*d]
			if a.deterministic {
				err = c.Mode(row, a.act, a.lp)
			} else {
				err = c.Sample(a.rngs[i], row, a.act, a.lp)
			}
			if err != nil {
				return fmt.Errorf("batcher: env %d: %w", i, err)
			}
			acts[i], envActs[i], logp[i] = float32(a.act[0]), float32(a.act[0]), a.lp[0]
		}
	} else {
		g := head.Gaussian{Low: a.spec.Low, High: a.spec.High}
		for i := range n {
			ls := a.logStd[:d]
			if a.logStdPerRow {
				ls = a.logStd[i*d : (i+1)*d]
			}
			mean, raw, clipped := a.params[i*d:(i+1)*d], acts[i*d:(i+1)*d], envActs[i*d:(i+1)*d]
			if a.deterministic {
				err = g.Mode(mean, ls, raw, clipped, logp[i:i+1])
			} else {
				err = g.Sample(a.rngs[i], mean, ls, raw, clipped, logp[i:i+1])
			}
			if err != nil {
				return fmt.Errorf("batcher: env %d: %w", i, err)
			}
		}
	}
	if a.value != nil {
		copy(value[:n], a.value[:n])
	} else {
		clear(value[:n])
	}
	return nil
}

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

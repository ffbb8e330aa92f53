package batcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/device"
)

// onnxAgent is the Agent of a bound ONNX policy: a bind.Runner fed the step's tensors in CPU
// memory.
type onnxAgent struct {
	r      *bind.Runner
	states []bind.State
	size   []int // elements of one env's row of each state

	stateBuf [][]float32 // host memory of AgentInput.State, per step
	stateOut [][]float32 // host memory of AgentOutput.State, per step
}

// newAgent makes the agent of a worker stepping n envs with the given random streams.
func newAgent(ctx context.Context, p *bind.Policy, n int, rngs []*rand.Rand, deterministic bool) (*onnxAgent, error) {
	r, err := p.NewRunner(ctx, n, rngs, deterministic)
	if err != nil {
		return nil, err
	}
	return wrapRunner(p, r), nil
}

// newWorkerAgent is newAgent for worker w, env i drawing from the source of its stream,
// w.pcgs[i] (bind.Policy.NewRunnerPCG: the same numbers as w.rngs[i], fewer calls).
func newWorkerAgent(ctx context.Context, p *bind.Policy, w *worker, deterministic bool) (*onnxAgent, error) {
	r, err := p.NewRunnerPCG(ctx, w.m, w.pcgs, deterministic)
	if err != nil {
		return nil, err
	}
	if w.turn != nil {
		r.SetTurn(w.turn)
	}
	return wrapRunner(p, r), nil
}

// wrapRunner is the agent of runner r of policy p.
func wrapRunner(p *bind.Policy, r *bind.Runner) *onnxAgent {
	a := &onnxAgent{r: r, states: p.States()}
	a.size = make([]int, len(a.states))
	for k, st := range a.states {
		a.size[k] = 1
		for _, d := range st.Row {
			a.size[k] *= d
		}
	}
	a.stateBuf, a.stateOut = make([][]float32, len(a.states)), make([][]float32, len(a.states))
	return a
}

func (a *onnxAgent) Version() int64               { return a.r.Version() }
func (a *onnxAgent) Close() error                 { return a.r.Close() }
func (a *onnxAgent) inferenceTime() time.Duration { return a.r.InferenceTime() }

// values implements valuer.
func (a *onnxAgent) values(obs []float32, state [][]float32, starts []float32, n int, dst []float32) error {
	return a.r.Values(obs, state, starts, n, dst)
}

// Initial returns zero recurrent states for n envs, one tensor [n × row] per state; nil for
// a feed-forward policy.
func (a *onnxAgent) Initial(n int) ([]*device.Tensor, error) {
	if len(a.states) == 0 {
		return nil, nil
	}
	out := make([]*device.Tensor, len(a.states))
	for k, st := range a.states {
		t, err := device.CPU().Mirror(st.Name, make([]float32, n*a.size[k]), append([]int{n}, st.Row...)...)
		if err != nil {
			return nil, err
		}
		out[k] = t
	}
	return out, nil
}

func (a *onnxAgent) Act(in AgentInput, out AgentOutput) error {
	obs, err := host(in.Obs)
	if err != nil {
		return err
	}
	acts, envActs, logp, value, err := out.host()
	if err != nil {
		return err
	}
	if len(in.State) != len(a.states) || len(out.State) != len(a.states) {
		return fmt.Errorf("batcher: the policy carries %d recurrent states; the step gave %d in and %d out",
			len(a.states), len(in.State), len(out.State))
	}
	for k := range a.states {
		if a.stateBuf[k], err = host(in.State[k]); err != nil {
			return err
		}
		if a.stateOut[k], err = host(out.State[k]); err != nil {
			return err
		}
	}
	var starts []float32
	if in.Starts != nil {
		if starts, err = host(in.Starts); err != nil {
			return err
		}
	}
	return a.r.Step(in.N, obs, a.stateBuf, starts, acts, envActs, logp, value, a.stateOut)
}

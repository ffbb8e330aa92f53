package batcher

import (
	"context"
	"fmt"

	"github.com/towerrl/towerrl/bind"
)

// Trajectory is one episode recorded step by step (to draw it: package envs/render).
type Trajectory struct {
	ObsDim, ActDim int
	// Obs holds Length()+1 observations, row by row: the one before each step, then the
	// episode's last.
	Obs []float32
	// Actions holds the Length() actions the env took, row by row (a Box's clipped to its
	// bounds, a Discrete's index).
	Actions []float32
	Rewards []float32 // the Length() rewards
	Return  float64   // their sum
	// Terminated: the episode ended by the env's rule (else its time limit cut it).
	Terminated bool
	// A simulated env's physical state before each step (envs.Physics: the MuJoCo envs),
	// else empty: Length() rows of NQ values (qpos) in QPos and of NV (qvel) in QVel, what a
	// MuJoCo env's frames are drawn from.
	NQ, NV     int
	QPos, QVel []float64
}

// Length is the number of steps.
func (t Trajectory) Length() int { return len(t.Rewards) }

// maxRecordSteps bounds RecordEpisode for an env with no time limit.
const maxRecordSteps = 100_000

// RecordEpisode runs policy (nil: uniformly random actions) on one env until its first
// episode ends and returns it step by step. The env is the one Evaluate runs as env 0 with the
// same Seed, so with Deterministic set the episode is Evaluate's first (its Returns[0]).
// cfg.Episodes and cfg.Envs are not used. An episode longer than 100 000 steps (an env with no
// time limit and a policy that never ends it) is an error that names MaxEpisodeSteps.
func RecordEpisode(ctx context.Context, cfg EvalConfig, policy *bind.Policy) (Trajectory, error) {
	const chunk = evalSteps
	b, err := New(ctx, Config{Env: cfg.Env, Workers: 1, EnvsPerWorker: 1, Steps: chunk, Seed: cfg.Seed,
		Deterministic: cfg.Deterministic, MaxEpisodeSteps: cfg.MaxEpisodeSteps}, policy)
	if err != nil {
		return Trajectory{}, err
	}
	defer b.Close()
	var tr Trajectory
	for tr.Length() < maxRecordSteps {
		r, err := b.Collect(ctx, chunk)
		if err != nil {
			return Trajectory{}, err
		}
		tr.ObsDim, tr.ActDim, tr.NQ, tr.NV = r.ObsDim, r.ActDim, r.NQ, r.NV
		for t := range r.T { // one env: row t
			tr.Obs = append(tr.Obs, r.Obs[t*r.ObsDim:(t+1)*r.ObsDim]...)
			if r.QPos != nil {
				tr.QPos = append(tr.QPos, r.QPos[t*r.NQ:(t+1)*r.NQ]...)
				tr.QVel = append(tr.QVel, r.QVel[t*r.NV:(t+1)*r.NV]...)
			}
			tr.Actions = append(tr.Actions, r.EnvActions[t*r.ActDim:(t+1)*r.ActDim]...)
			tr.Rewards = append(tr.Rewards, r.Rewards[t])
			tr.Return += float64(r.Rewards[t])
			if r.Terminated[t] == 1 || r.Truncated[t] == 1 {
				tr.Obs = append(tr.Obs, r.FinalObs[t*r.ObsDim:(t+1)*r.ObsDim]...)
				tr.Terminated = r.Terminated[t] == 1
				return tr, nil
			}
		}
	}
	return Trajectory{}, fmt.Errorf("%w: the episode of %s did not end in %d steps; give it a time limit (MaxEpisodeSteps)",
		ErrConfig, cfg.Env.ID, maxRecordSteps)
}

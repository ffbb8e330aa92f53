package batcher

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/internal/npy"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/bind/bindtest"
)

// seqFixture is what a recurrent fixture's NAME.json says about its recorded sequences.
type seqFixture struct {
	Env     string `json:"env"`
	SeqObs  string `json:"seq_obs_file"`
	Outputs []struct {
		Name      string `json:"name"`
		Role      string `json:"role"`
		BatchAxis int    `json:"batch_axis"`
		SeqFile   string `json:"seq_file"`
	} `json:"outputs"`
}

// recurrentFixtures lists the fixtures that carry a recurrent state.
func recurrentFixtures(t *testing.T) []foreignFixture {
	var out []foreignFixture
	for _, f := range foreignFixtures(t) {
		if f.Recurrent != nil {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatal("no recurrent fixtures")
	}
	return out
}

// TestRecurrentSequences steps each recurrent fixture's recorded sequences (B envs, T steps,
// state carried, no reset) through an agent whose state the test carries as the worker does,
// and compares every recorded output at every step: logits, actions, values and the states
// (those with the batch on axis 1 read back from the agent's batch-first rows).
func TestRecurrentSequences(t *testing.T) {
	for _, f := range recurrentFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			var sf seqFixture
			data, err := os.ReadFile(filepath.Join(bindtest.ForeignDir, f.Name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &sf); err != nil {
				t.Fatal(err)
			}
			p, err := loadFile(context.Background(), f.path(), f.Env, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			seqObs := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, sf.SeqObs))
			steps, n, od := seqObs.Shape[0], seqObs.Shape[1], seqObs.Len()/(seqObs.Shape[0]*seqObs.Shape[1])
			a := newTestAgent(t, p, n, 0, true)
			defer a.Close()
			in, out := agentIO(t, a, make([]float32, n*od), n, 1)
			obsHost, _ := in.Obs.Host()
			b := p.Binding()
			checked := 0
			for step := range steps {
				copy(obsHost, seqObs.F32[step*n*od:(step+1)*n*od])
				if err := a.Act(in, out); err != nil {
					t.Fatal(err)
				}
				for _, o := range sf.Outputs {
					if o.SeqFile == "" {
						continue
					}
					rec := bindtest.ReadNpy(t, filepath.Join(bindtest.ForeignDir, o.SeqFile))
					want := float64s(rec)
					per := len(want) / steps
					want = want[step*per : (step+1)*per]
					var got []float32
					switch o.Role {
					case "logits":
						got = a.r.Params()[:per]
					case "actions":
						got, _ = out.Actions.Host()
					case "value":
						got, _ = out.Value.Host()
					case "state":
						k := -1
						for j, s := range b.State {
							if s.Output == o.Name {
								k = j
							}
						}
						if k < 0 {
							t.Fatalf("recorded state %s is not among the bound states %+v", o.Name, b.State)
						}
						host, _ := out.State[k].Host()
						got = batchAxisLayout(host, rec.Shape[1:], o.BatchAxis)
					default:
						continue
					}
					for j := range per {
						if d := math.Abs(float64(got[j]) - want[j]); d > 1e-4*max(1, math.Abs(want[j])) {
							t.Fatalf("step %d output %s (%s) element %d: %v, PyTorch %v", step, o.Name, o.Role, j, got[j], want[j])
						}
					}
					checked++
				}
				in.State, out.State = out.State, in.State
			}
			if checked < steps {
				t.Fatalf("only %d outputs compared over %d steps", checked, steps)
			}
		})
	}
}

// batchAxisLayout lays batch-first rows out as a tensor of shape with its batch on axis.
func batchAxisLayout(rows []float32, shape []int, axis int) []float32 {
	if axis == 0 {
		return rows
	}
	n := shape[axis]
	outer := 1
	for _, d := range shape[:axis] {
		outer *= d
	}
	inner := len(rows) / (n * outer)
	out := make([]float32, len(rows))
	for o := range outer {
		for i := range n {
			for k := range inner {
				// rows: [i][o][k]; out: [o][i][k]
				out[(o*n+i)*inner+k] = rows[(i*outer+o)*inner+k]
			}
		}
	}
	return out
}

// float64s is a's values, whatever their element type.
func float64s(a *npy.Array) []float64 {
	out := make([]float64, 0, a.Len())
	for _, v := range a.F32 {
		out = append(out, float64(v))
	}
	for _, v := range a.F64 {
		out = append(out, v)
	}
	for _, v := range a.I32 {
		out = append(out, float64(v))
	}
	for _, v := range a.I64 {
		out = append(out, float64(v))
	}
	for _, v := range a.U8 {
		out = append(out, float64(v))
	}
	return out
}

// TestRecurrentRolloutReplays: a learner can replay every env's rollout from
// Rollout.InitialState, zeroing the state where EpisodeStarts says, and get the actions the
// batcher took. Collected across several rollouts (so the initial states are not zero) with
// episodes ending inside them.
func TestRecurrentRolloutReplays(t *testing.T) {
	ctx := context.Background()
	for _, f := range recurrentFixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			p, err := loadFile(ctx, f.path(), f.Env, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			const m, steps = 3, 40
			b := newBatcher(t, Config{Env: envSpec(f.Env), Workers: 2, EnvsPerWorker: m, Steps: steps, Seed: 9, MaxEpisodeSteps: 25}, p)
			var r *Rollout
			for range 2 {
				if r, err = b.Collect(ctx, steps); err != nil {
					t.Fatal(err)
				}
			}
			if len(r.InitialState) != len(p.Binding().State) || len(r.StateNames) != len(r.InitialState) {
				t.Fatalf("rollout carries %d states (%v), the policy %d", len(r.InitialState), r.StateNames, len(p.Binding().State))
			}
			nonzero, starts := false, 0
			for _, st := range r.InitialState {
				for _, v := range st {
					nonzero = nonzero || v != 0
				}
			}
			for _, s := range r.EpisodeStarts {
				starts += int(s)
			}
			if !nonzero || starts == 0 {
				t.Fatalf("initial states all zero %v, %d episode starts: the replay would prove little", !nonzero, starts)
			}
			// Replay env i alone: one row, the state carried by the test.
			for i := range r.N {
				rngs := []*rand.Rand{nil}
				rngs[0], _ = samplingStream(9, i)
				a, err := newAgent(ctx, p, 1, rngs, false)
				if err != nil {
					t.Fatal(err)
				}
				in, out := agentIO(t, a, make([]float32, r.ObsDim), 1, r.ActDim)
				for k, st := range r.InitialState {
					host, _ := in.State[k].Host()
					sz := len(host)
					copy(host, st[i*sz:(i+1)*sz])
				}
				obs, _ := in.Obs.Host()
				for step := range r.T {
					row := step*r.N + i
					if r.EpisodeStarts[row] != 0 {
						for _, s := range in.State {
							h, _ := s.Host()
							clear(h)
						}
					}
					copy(obs, r.Obs[row*r.ObsDim:(row+1)*r.ObsDim])
					if err := a.Act(in, out); err != nil {
						t.Fatal(err)
					}
					// The batcher's action under the replayed logits has the recorded log-probability.
					if lp := a.r.LogProb(0, r.Actions[row:row+1]); math.Abs(lp-float64(r.LogP[row])) > 1e-4 {
						t.Fatalf("env %d step %d: replayed log-probability of action %v is %v, recorded %v",
							i, step, r.Actions[row], lp, r.LogP[row])
					}
					in.State, out.State = out.State, in.State
				}
				a.Close()
			}
		})
	}
}

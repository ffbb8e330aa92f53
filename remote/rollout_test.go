package remote

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
)

// loadPolicy binds the ONNX policy in file for env, as version.
func loadPolicy(t testing.TB, file, env string, version int64) *bind.Policy {
	t.Helper()
	model, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := envs.Lookup(env)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bind.New(context.Background(), model, version, spec, bind.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newBatcher(t testing.TB, cfg batcher.Config, p *bind.Policy) *batcher.Batcher {
	t.Helper()
	b, err := batcher.New(context.Background(), cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// meaningful copies what a learner may read of a local rollout: columns cut to T steps,
// and zeros where the batcher leaves FinalObs and FinalValues stale (rows where no episode
// ended, rows not truncated), as Unpack fills them.
func meaningful(r *batcher.Rollout) *batcher.Rollout {
	rows, od := r.T*r.N, r.ObsDim
	c := *r
	f := func(s []float32, n int) []float32 { return slices.Clone(s[:n]) }
	c.Obs, c.Actions, c.EnvActions = f(r.Obs, rows*od), f(r.Actions, rows*r.ActDim), f(r.EnvActions, rows*r.ActDim)
	c.Rewards, c.Terminated, c.Truncated = f(r.Rewards, rows), f(r.Terminated, rows), f(r.Truncated, rows)
	c.LogP, c.Values, c.EpisodeStarts = f(r.LogP, rows), f(r.Values, rows), f(r.EpisodeStarts, rows)
	c.FinalObs, c.FinalValues = f(r.FinalObs, rows*od), f(r.FinalValues, rows)
	c.LastObs, c.LastValues = f(r.LastObs, r.N*od), f(r.LastValues, r.N)
	c.Version = slices.Clone(r.Version[:rows])
	c.Episodes = slices.Clone(r.Episodes)
	c.ObsShape = slices.Clone(r.ObsShape)
	for row := range rows {
		term, trunc := r.Terminated[row] != 0, r.Truncated[row] != 0
		if !term && !trunc {
			clear(c.FinalObs[row*od : (row+1)*od])
		}
		if !trunc || term {
			c.FinalValues[row] = 0
		}
	}
	c.States, c.InitialState = nil, nil
	c.StateNames, c.StateShapes = slices.Clone(r.StateNames), nil
	for k, st := range r.States {
		s := 1
		for _, d := range r.StateShapes[k] {
			s *= d
		}
		cut := slices.Clone(st[:rows*s])
		c.States = append(c.States, cut)
		c.InitialState = append(c.InitialState, cut[:r.N*s])
		c.StateShapes = append(c.StateShapes, slices.Clone(r.StateShapes[k]))
	}
	return &c
}

// bitwise compares floats by their bits (NaN, -0) and treats empty and nil slices alike.
var bitwise = cmp.Options{
	cmp.Transformer("f32bits", func(s []float32) []uint32 {
		out := make([]uint32, len(s))
		for i, v := range s {
			out[i] = math.Float32bits(v)
		}
		return out
	}),
	cmp.Transformer("f64bits", func(v float64) uint64 { return math.Float64bits(v) }),
	cmpopts.EquateEmpty(),
}

// diffRollouts is empty when got holds exactly what a learner may read of want.
func diffRollouts(want, got *batcher.Rollout) string {
	return cmp.Diff(meaningful(want), got, bitwise)
}

// wireTrip packs r, encodes, chunks, reassembles, decodes and unpacks it.
func wireTrip(t *testing.T, env string, r *batcher.Rollout) (*batcher.Rollout, RolloutMsg) {
	t.Helper()
	m, err := Pack(env, r)
	if err != nil {
		t.Fatal(err)
	}
	m.BatcherID, m.Session, m.Seq = "b", 1, 1
	c := newCodec(64 << 10) // small chunks: several per rollout
	t.Cleanup(c.close)
	got, _ := roundTrip(t, c, m, CodecS2, nil)
	u, err := got.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	return u, got
}

// TestPackUnpack sends real batcher rollouts through the wire and back: discrete and
// continuous actions (clipped, so EnvActions travel), truncated episodes (FinalValues),
// a recurrent policy's states, a second rollout over the first's buffers and a shorter
// one. What the learner reads is the batcher's rollout bit for bit.
func TestPackUnpack(t *testing.T) {
	for _, tc := range []struct {
		name, policy, env string
		maxSteps          int
		wantStates        int
		wantEnvActions    bool
	}{
		{name: "categorical", policy: "../testdata/mlp_tanh.onnx", env: "CartPole-v1", maxSteps: 15},
		{name: "gaussian", policy: "../testdata/gaussian_relu.onnx", env: "Pendulum-v1", maxSteps: 12},
		{name: "tanh-gaussian", policy: "../testdata/foreign/sb3_sac_pendulum.onnx", env: "Pendulum-v1", maxSteps: 12, wantEnvActions: true},
		{name: "lstm", policy: "../testdata/foreign/rllib_cartpole_lstm.onnx", env: "CartPoleNoVel-v1", maxSteps: 15, wantStates: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadPolicy(t, tc.policy, tc.env, 3)
			b := newBatcher(t, batcher.Config{Env: envSpec(tc.env), Workers: 2, EnvsPerWorker: 3, Steps: 40, Seed: 9, MaxEpisodeSteps: tc.maxSteps}, p)
			for _, steps := range []int{40, 40, 17} {
				r, err := b.Collect(context.Background(), steps)
				if err != nil {
					t.Fatal(err)
				}
				got, m := wireTrip(t, tc.env, r)
				if d := diffRollouts(r, got); d != "" {
					t.Fatalf("%d steps: unpacked rollout differs (-batcher +unpacked):\n%s", steps, d)
				}
				trunc := 0
				for _, v := range got.Truncated {
					trunc += int(v)
				}
				if trunc == 0 || len(got.Episodes) == 0 {
					t.Errorf("%d steps: %d truncations and %d episodes: the test does not cover final values", steps, trunc, len(got.Episodes))
				}
				if len(got.States) != tc.wantStates {
					t.Errorf("%d recurrent states, want %d", len(got.States), tc.wantStates)
				}
				n := r.T * r.N * r.ActDim
				differ := !sameBits(r.Actions[:n], r.EnvActions[:n])
				if has := m.Column(colEnvActions) != nil; has != differ || tc.wantEnvActions && !has {
					t.Errorf("env_actions sent: %v; the envs' actions differ from the policy's: %v", has, differ)
				}
				if m.PolicyVersion != 3 || m.EnvID != tc.env {
					t.Errorf("header: policy %d env %q", m.PolicyVersion, m.EnvID)
				}
			}
		})
	}
}

// TestUnpackRefuses: a message whose columns do not fit its header is an error wrapping
// ErrColumn naming what is wrong, never a panic or a short buffer.
func TestUnpackRefuses(t *testing.T) {
	p := loadPolicy(t, "../testdata/foreign/rllib_cartpole_lstm.onnx", "CartPoleNoVel-v1", 1)
	b := newBatcher(t, batcher.Config{Env: envSpec("CartPoleNoVel-v1"), EnvsPerWorker: 4, Steps: 30, Seed: 2, MaxEpisodeSteps: 10}, p)
	r, err := b.Collect(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	good, err := Pack("CartPoleNoVel-v1", r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Unpack(); err != nil {
		t.Fatal(err)
	}
	stateCol := ""
	for _, c := range good.Columns {
		if strings.HasPrefix(c.Name, colStatePrefix) {
			stateCol = c.Name
			break
		}
	}
	col := func(m *RolloutMsg, name string) *Column {
		c := m.Column(name)
		if c == nil {
			t.Fatalf("no column %q", name)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		edit func(m *RolloutMsg)
		want string
	}{
		{"short obs", func(m *RolloutMsg) { c := col(m, colObs); c.F32 = c.F32[:len(c.F32)-1] }, `"obs" holds`},
		{"missing rewards", func(m *RolloutMsg) {
			m.Columns = slices.DeleteFunc(m.Columns, func(c Column) bool { return c.Name == colRewards })
		}, `"rewards": missing`},
		{"version as float", func(m *RolloutMsg) { c := col(m, colVersion); c.F32, c.I64 = make([]float32, len(c.I64)), nil }, "want int64"},
		{"obs shape", func(m *RolloutMsg) { col(m, colObsShape).I64 = []int64{3} }, "observation shape [3]"},
		{"negative shape", func(m *RolloutMsg) { col(m, colObsShape).I64 = []int64{-2, -1} }, "observation shape"},
		{"discrete 2", func(m *RolloutMsg) { col(m, colDiscrete).I64 = []int64{2} }, "discrete = 2"},
		{"discrete wide actions", func(m *RolloutMsg) {
			m.ActDim = 2
			c := col(m, colActions)
			c.F32 = append(c.F32, c.F32...)
		}, "discrete actions of 2"},
		{"final obs short", func(m *RolloutMsg) { c := col(m, colFinalObs); c.F32 = c.F32[:len(c.F32)-2] }, "final_obs"},
		{"final obs long", func(m *RolloutMsg) { c := col(m, colFinalObs); c.F32 = append(c.F32, 1, 2) }, "final_obs"},
		{"final values long", func(m *RolloutMsg) { c := col(m, colFinalValues); c.F32 = append(c.F32, 1) }, "final_values"},
		{"episode env", func(m *RolloutMsg) { col(m, colEpisodeEnv).I64[0] = 4 }, "env 4 of 4"},
		{"episode returns", func(m *RolloutMsg) { c := col(m, colEpisodeReturn); c.F64 = c.F64[1:] }, "episode_return"},
		{"state without shape", func(m *RolloutMsg) {
			m.Columns = slices.DeleteFunc(m.Columns, func(c Column) bool { return c.Name == colShapePrefix+stateCol[len(colStatePrefix):] })
		}, "has no column"},
		{"state short", func(m *RolloutMsg) { c := col(m, stateCol); c.F32 = c.F32[:3] }, stateCol},
		{"huge T", func(m *RolloutMsg) { m.T = math.MaxUint32 }, "do not make a rollout"},
		{"no obs dim", func(m *RolloutMsg) { m.ObsDim = 0 }, "do not make a rollout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			m.Columns = slices.Clone(good.Columns)
			for i := range m.Columns { // edits must not reach good's columns
				c := &m.Columns[i]
				c.F32, c.I64, c.F64 = cloneNil(c.F32), cloneNil(c.I64), cloneNil(c.F64)
			}
			tc.edit(&m)
			_, err := m.Unpack()
			if !errors.Is(err, ErrColumn) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Unpack: %v; want ErrColumn naming %s", err, tc.want)
			}
		})
	}
}

func cloneNil[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return slices.Clone(s)
}

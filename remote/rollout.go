package remote

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/towerrl/towerrl/batcher"
)

// The columns of a batcher rollout as Pack writes them and Unpack reads them. T·N is the
// rollout's rows (row t·N+i is env i at step t), D the observation's elements, A the
// action's, S a recurrent state's elements per env, E the episodes that ended in it.
//
//	obs_shape        int64   one observation's shape (its product is D)
//	discrete         int64   [1] 1 when actions index a Discrete space, else 0
//	obs              float32 [T·N·D]
//	actions          float32 [T·N·A]   what LogP refers to (batcher.Rollout.Actions)
//	env_actions      float32 [T·N·A]   what the envs took; absent when equal to actions
//	rewards, terminated, truncated, logp, values, episode_starts  float32 [T·N]
//	version          int64   [T·N]     policy version of each row
//	final_obs        float32 [F·D]     final observations of the F rows where an episode
//	                                   ended (terminated or truncated), in row order
//	final_values     float32 [G]       values of those of the G rows truncated and not
//	                                   terminated, in row order
//	last_obs         float32 [N·D]
//	last_values      float32 [N]
//	episode_env, episode_length, episode_version  int64 [E]
//	episode_return   float64 [E]
//	state_shape:NAME int64   one env's recurrent state NAME (a graph input), in the
//	state:NAME       float32 [T·N·S]   policy's order; absent without recurrent state
//
// Only what a learner may read travels: the rows of FinalObs and FinalValues that the
// batcher leaves stale are not sent, and Unpack fills them with zeros.
const (
	colObsShape      = "obs_shape"
	colDiscrete      = "discrete"
	colObs           = "obs"
	colActions       = "actions"
	colEnvActions    = "env_actions"
	colRewards       = "rewards"
	colTerminated    = "terminated"
	colTruncated     = "truncated"
	colLogP          = "logp"
	colValues        = "values"
	colEpisodeStarts = "episode_starts"
	colVersion       = "version"
	colFinalObs      = "final_obs"
	colFinalValues   = "final_values"
	colLastObs       = "last_obs"
	colLastValues    = "last_values"
	colEpisodeEnv    = "episode_env"
	colEpisodeLength = "episode_length"
	colEpisodeVer    = "episode_version"
	colEpisodeReturn = "episode_return"
	colStatePrefix   = "state:"
	colShapePrefix   = "state_shape:"
)

// Pack makes the message of a batcher rollout collected on env envID (see the column list
// above). The message shares r's buffers where it can: publish it (PublishRollout copies
// it into its encoding) before r is collected into again. PolicyVersion is the oldest
// version among the rows. The message's BatcherID, Session and Seq are left for
// PublishRollout to set.
func Pack(envID string, r *batcher.Rollout) (RolloutMsg, error) {
	rows := r.T * r.N
	od, ad := r.ObsDim, r.ActDim
	if r.T < 0 || r.N < 0 || od < 1 || ad < 1 || len(r.Obs) < rows*od || len(r.Actions) < rows*ad ||
		len(r.Version) < rows || len(r.LastObs) < r.N*od {
		return RolloutMsg{}, fmt.Errorf("remote: packing a rollout of T=%d N=%d obs %d action %d: its buffers are shorter than that",
			r.T, r.N, od, ad)
	}
	m := RolloutMsg{EnvID: envID, T: r.T, N: r.N, ObsDim: od, ActDim: ad}
	version := r.Version[:rows]
	if rows > 0 {
		m.PolicyVersion = version[0]
		for _, v := range version {
			m.PolicyVersion = min(m.PolicyVersion, v)
		}
	}
	shape := make([]int64, len(r.ObsShape))
	for i, d := range r.ObsShape {
		shape[i] = int64(d)
	}
	discrete := int64(0)
	if r.Discrete {
		discrete = 1
	}
	m.Columns = append(m.Columns,
		Column{Name: colObsShape, I64: shape},
		Column{Name: colDiscrete, I64: []int64{discrete}},
		Column{Name: colObs, F32: r.Obs[:rows*od]},
		Column{Name: colActions, F32: r.Actions[:rows*ad]},
	)
	if envActs := r.EnvActions[:rows*ad]; !sameBits(envActs, r.Actions[:rows*ad]) {
		m.Columns = append(m.Columns, Column{Name: colEnvActions, F32: envActs})
	}
	m.Columns = append(m.Columns,
		Column{Name: colRewards, F32: r.Rewards[:rows]},
		Column{Name: colTerminated, F32: r.Terminated[:rows]},
		Column{Name: colTruncated, F32: r.Truncated[:rows]},
		Column{Name: colLogP, F32: r.LogP[:rows]},
		Column{Name: colValues, F32: r.Values[:rows]},
		Column{Name: colEpisodeStarts, F32: r.EpisodeStarts[:rows]},
		Column{Name: colVersion, I64: version},
	)
	var finObs, finVal []float32
	for row := range rows {
		term, trunc := r.Terminated[row] != 0, r.Truncated[row] != 0
		if term || trunc {
			finObs = append(finObs, r.FinalObs[row*od:(row+1)*od]...)
		}
		if trunc && !term {
			finVal = append(finVal, r.FinalValues[row])
		}
	}
	m.Columns = append(m.Columns,
		Column{Name: colFinalObs, F32: nonNil(finObs)},
		Column{Name: colFinalValues, F32: nonNil(finVal)},
		Column{Name: colLastObs, F32: r.LastObs[:r.N*od]},
		Column{Name: colLastValues, F32: r.LastValues[:r.N]},
	)
	ne := len(r.Episodes)
	envIdx, length, ver, ret := make([]int64, ne), make([]int64, ne), make([]int64, ne), make([]float64, ne)
	for i, e := range r.Episodes {
		envIdx[i], length[i], ver[i], ret[i] = int64(e.Env), int64(e.Length), e.Version, e.Return
	}
	m.Columns = append(m.Columns,
		Column{Name: colEpisodeEnv, I64: envIdx},
		Column{Name: colEpisodeLength, I64: length},
		Column{Name: colEpisodeVer, I64: ver},
		Column{Name: colEpisodeReturn, F64: ret},
	)
	if len(r.StateNames) != len(r.States) || len(r.StateShapes) != len(r.States) {
		return RolloutMsg{}, fmt.Errorf("remote: packing a rollout with %d state names, %d shapes and %d states: want as many of each",
			len(r.StateNames), len(r.StateShapes), len(r.States))
	}
	for k, name := range r.StateNames {
		if len(colShapePrefix)+len(name) > maxNameLen {
			return RolloutMsg{}, fmt.Errorf("remote: recurrent state %q: names up to %d bytes travel", name, maxNameLen-len(colShapePrefix))
		}
		s := 1
		sh := make([]int64, len(r.StateShapes[k]))
		for i, d := range r.StateShapes[k] {
			sh[i] = int64(d)
			s *= d
		}
		if len(r.States[k]) < rows*s {
			return RolloutMsg{}, fmt.Errorf("remote: recurrent state %q holds %d values, want %d", name, len(r.States[k]), rows*s)
		}
		m.Columns = append(m.Columns,
			Column{Name: colShapePrefix + name, I64: sh},
			Column{Name: colStatePrefix + name, F32: r.States[k][:rows*s]},
		)
	}
	return m, nil
}

// nonNil keeps an empty float32 column a float32 column.
func nonNil(s []float32) []float32 {
	if s == nil {
		return []float32{}
	}
	return s
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// Unpack reads a message Pack wrote back into a batcher rollout, the learner's side: every
// column is checked against T, N and the observation and action sizes, so a rollout that
// does not fit is an error wrapping ErrColumn, never a panic or a short buffer. The rollout
// shares the message's column memory (Unpack copies only the final observations and values
// into full-size columns, zeros where the batcher leaves them stale). Its InitialState
// slices States.
func (m *RolloutMsg) Unpack() (*batcher.Rollout, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: rollout %s/%d from %s: %s", ErrColumn, m.EnvID, m.Seq, m.BatcherID, fmt.Sprintf(format, a...))
	}
	rows, ok := mulLen(m.T, m.N)
	if !ok || m.ObsDim < 1 || m.ActDim < 1 {
		return nil, bad("T=%d N=%d obs %d action %d do not make a rollout", m.T, m.N, m.ObsDim, m.ActDim)
	}
	od, ad := m.ObsDim, m.ActDim
	var firstErr error
	f32 := func(name string, want ...int) []float32 {
		s, err := m.Float32(name)
		if err == nil {
			if n, ok := mulLen(want...); !ok || len(s) != n {
				err = bad("column %q holds %d values, want %v", name, len(s), want)
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return s
	}
	i64 := func(name string, want ...int) []int64 {
		s, err := m.Int64(name)
		if err == nil && want != nil {
			if n, ok := mulLen(want...); !ok || len(s) != n {
				err = bad("column %q holds %d values, want %v", name, len(s), want)
			}
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return s
	}
	r := &batcher.Rollout{T: m.T, N: m.N, ObsDim: od, ActDim: ad}
	shape := i64(colObsShape)
	disc := i64(colDiscrete, 1)
	r.Obs = f32(colObs, rows, od)
	r.Actions = f32(colActions, rows, ad)
	r.Rewards = f32(colRewards, rows)
	r.Terminated = f32(colTerminated, rows)
	r.Truncated = f32(colTruncated, rows)
	r.LogP = f32(colLogP, rows)
	r.Values = f32(colValues, rows)
	r.EpisodeStarts = f32(colEpisodeStarts, rows)
	r.Version = i64(colVersion, rows)
	r.LastObs = f32(colLastObs, m.N, od)
	r.LastValues = f32(colLastValues, m.N)
	finObs, errObs := m.Float32(colFinalObs)
	finVal, errVal := m.Float32(colFinalValues)
	epEnv := i64(colEpisodeEnv)
	epLen := i64(colEpisodeLength, len(epEnv))
	epVer := i64(colEpisodeVer, len(epEnv))
	epRet, errRet := m.Float64(colEpisodeReturn)
	if err := errors.Join(firstErr, errObs, errVal, errRet); err != nil {
		return nil, err
	}
	if m.Column(colEnvActions) != nil {
		r.EnvActions = f32(colEnvActions, rows, ad)
		if firstErr != nil {
			return nil, firstErr
		}
	} else {
		r.EnvActions = r.Actions
	}

	// Observation shape and action kind.
	r.ObsShape = make([]int, len(shape))
	prod := 1
	for i, d := range shape {
		if d < 1 || d > MaxRolloutBytes {
			return nil, bad("observation shape %v", shape)
		}
		r.ObsShape[i] = int(d)
		prod *= int(d)
		if prod > MaxRolloutBytes {
			return nil, bad("observation shape %v", shape)
		}
	}
	if prod != od {
		return nil, bad("observation shape %v holds %d values, the header says %d", shape, prod, od)
	}
	switch disc[0] {
	case 0:
	case 1:
		if ad != 1 {
			return nil, bad("discrete actions of %d values", ad)
		}
		r.Discrete = true
	default:
		return nil, bad("discrete = %d, want 0 or 1", disc[0])
	}

	// Final observations and values, spread back onto their rows.
	r.FinalObs = make([]float32, rows*od)
	r.FinalValues = make([]float32, rows)
	fo, fv := 0, 0
	for row := range rows {
		term, trunc := r.Terminated[row] != 0, r.Truncated[row] != 0
		if term || trunc {
			if (fo+1)*od > len(finObs) {
				return nil, bad("column %q holds %d observations, fewer than the episodes that ended", colFinalObs, len(finObs)/od)
			}
			copy(r.FinalObs[row*od:(row+1)*od], finObs[fo*od:(fo+1)*od])
			fo++
		}
		if trunc && !term {
			if fv >= len(finVal) {
				return nil, bad("column %q holds %d values, fewer than the truncated episodes", colFinalValues, len(finVal))
			}
			r.FinalValues[row] = finVal[fv]
			fv++
		}
	}
	if fo*od != len(finObs) || fv != len(finVal) {
		return nil, bad("columns %q and %q hold %d observations and %d values, the episodes that ended %d and %d",
			colFinalObs, colFinalValues, len(finObs)/od, len(finVal), fo, fv)
	}

	// Episodes.
	if len(epRet) != len(epEnv) {
		return nil, bad("column %q holds %d values, want %d", colEpisodeReturn, len(epRet), len(epEnv))
	}
	r.Episodes = make([]batcher.Episode, len(epEnv))
	for i := range epEnv {
		if epEnv[i] < 0 || epEnv[i] >= int64(m.N) || epLen[i] < 0 {
			return nil, bad("episode %d: env %d of %d, length %d", i, epEnv[i], m.N, epLen[i])
		}
		r.Episodes[i] = batcher.Episode{Env: int(epEnv[i]), Return: epRet[i], Length: int(epLen[i]), Version: epVer[i]}
	}

	// Recurrent states, in column order.
	for i := range m.Columns {
		name, ok := strings.CutPrefix(m.Columns[i].Name, colShapePrefix)
		if !ok {
			continue
		}
		sh := m.Columns[i].I64
		if m.Columns[i].DType() != Int64 {
			return nil, bad("column %q holds %v, want int64", m.Columns[i].Name, m.Columns[i].DType())
		}
		row := make([]int, len(sh))
		s := 1
		for j, d := range sh {
			if d < 1 || d > MaxRolloutBytes || s*int(d) > MaxRolloutBytes {
				return nil, bad("recurrent state %q of shape %v", name, sh)
			}
			row[j] = int(d)
			s *= int(d)
		}
		st := f32(colStatePrefix+name, rows, s)
		if firstErr != nil {
			return nil, firstErr
		}
		r.StateNames = append(r.StateNames, name)
		r.StateShapes = append(r.StateShapes, row)
		r.States = append(r.States, st)
		r.InitialState = append(r.InitialState, st[:m.N*s])
	}
	for i := range m.Columns {
		if name, ok := strings.CutPrefix(m.Columns[i].Name, colStatePrefix); ok && m.Column(colShapePrefix+name) == nil {
			return nil, bad("recurrent state %q has no column %q", name, colShapePrefix+name)
		}
	}
	return r, nil
}

// mulLen multiplies sizes, reporting false for a negative one or a product beyond
// MaxRolloutBytes.
func mulLen(ds ...int) (int, bool) {
	n := 1
	for _, d := range ds {
		if d < 0 || d > MaxRolloutBytes || n*d > MaxRolloutBytes {
			return 0, false
		}
		n *= d
	}
	return n, true
}

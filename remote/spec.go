package remote

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
)

// Spec is what the learner trains on (ServeConfig.Spec): rollouts of Env over T steps of N
// envs, with the recurrent States of its policy (none for a feed-forward one). With a Spec,
// every rollout is held against it in two steps, and one that does not fit is dropped:
// acknowledged so that no learner meets it again, counted (Stats.Refused, by reason and by
// batcher ID) and logged with its batcher ID; it never reaches the learner and never ends
// the run.
//
//   - Before anything is decompressed or allocated for it, its header: the env id, T, N, the
//     observation and action sizes, every column's name, type and declared length (so a
//     message that claims more bytes than a rollout of the run holds costs nothing), and a
//     chunk's declared rollout size.
//   - Once unpacked (Source.Next), its values: observations, actions, rewards, values,
//     log-probabilities, recurrent states and episode returns finite; flags 0 or 1; discrete
//     actions whole numbers in [0, n); the observation shape and action kind the env's; and
//     every row's policy version one the learner published before the rollout was stored
//     (see Source), never a negative one or one of the future.
type Spec struct {
	Env    envs.Spec
	T, N   int
	States []StateSpec
}

// StateSpec is one recurrent state a rollout carries: its name (a graph input of the policy)
// and its elements per env.
type StateSpec struct {
	Name string
	Dim  int
}

// ErrMisfit is wrapped by the reason a rollout that does not fit the learner's Spec was
// dropped.
var ErrMisfit = errors.New("remote: rollout does not fit the run")

// Refusal reasons, the keys of Stats.RefusedReasons.
const (
	refusedEnv     = "env"        // another env id
	refusedShape   = "shape"      // T, N, observation or action size, a column's type or length
	refusedSize    = "size"       // a chunk or blob that claims more bytes than the run's rollouts hold
	refusedValue   = "value"      // NaN, ±Inf, a flag not 0 or 1
	refusedAction  = "action"     // a discrete action out of range or not whole
	refusedVersion = "version"    // a policy version the learner never published, or not yet when it was stored
	refusedPending = "unfinished" // chunks of an unfinished rollout dropped to bound what waits
	refusedID      = "id"         // a chunk claiming another batcher's ID than its subject's
)

// refusal is the error of a rollout held against the Spec: its reason (a key of
// Stats.RefusedReasons) and what did not fit.
type refusal struct {
	reason string
	msg    string
}

func (r *refusal) Error() string { return "remote: rollout does not fit the run: " + r.msg }
func (r *refusal) Unwrap() error { return ErrMisfit }

func refuse(reason, format string, a ...any) error {
	return &refusal{reason: reason, msg: fmt.Sprintf(format, a...)}
}

// reasonOf is the refusal reason of err ("" when it is not a refusal).
func reasonOf(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

func (sp *Spec) validate() error {
	if sp.Env.ID == "" || sp.Env.Action == nil || sp.T < 1 || sp.N < 1 || sp.Env.Observation.Dim() < 1 {
		return fmt.Errorf("remote: ServeConfig.Spec needs an env (id, observation and action spaces), T ≥ 1 and N ≥ 1; got %q, T %d, N %d",
			sp.Env.ID, sp.T, sp.N)
	}
	for _, s := range sp.States {
		if s.Dim < 1 || s.Name == "" {
			return fmt.Errorf("remote: ServeConfig.Spec: recurrent state %q of %d elements", s.Name, s.Dim)
		}
	}
	if _, ok := mulLen(sp.T, sp.N, max(sp.Env.Observation.Dim(), sp.Env.Action.Dim()), 8); !ok {
		return fmt.Errorf("remote: ServeConfig.Spec: rollouts of %d × %d rows are larger than %d bytes", sp.T, sp.N, MaxRolloutBytes)
	}
	return nil
}

func (sp *Spec) dims() (rows, od, ad int) {
	return sp.T * sp.N, sp.Env.Observation.Dim(), sp.Env.Action.Dim()
}

// maxRaw is the most uncompressed bytes a rollout of the run holds (every step ending an
// episode).
func (sp *Spec) maxRaw() int {
	rows, od, ad := sp.dims()
	n := 8*len(sp.Env.Observation.Shape) + 8 + // obs_shape, discrete
		4*rows*od*2 + 4*rows*ad*2 + // obs, final_obs; actions, env_actions
		4*rows*7 + 8*rows + // rewards … values, episode_starts, final_values; version
		4*sp.N*(od+1) + // last_obs, last_values
		32*rows // four episode columns
	for _, s := range sp.States {
		n += 8*8 + 4*rows*s.Dim
	}
	return n
}

// maxBlob is the most bytes an encoded rollout of the run takes: the header, the payload
// compressed at worst (S2's bound; zstd's is lower) and the checksum.
func (sp *Spec) maxBlob() int {
	raw := sp.maxRaw()
	hdr := 64 + maxEnvLen + 2 + maxNameLen + 2 + (len(sp.States)*2+20)*(2+maxNameLen+1+8) + 16
	return hdr + raw + raw/6 + 64 + 4 // ≥ s2.MaxEncodedLen(raw)
}

// header holds a rollout's header against the spec, before its payload is decompressed.
func (sp *Spec) header(m *RolloutMsg, cols []colHeader) error {
	rows, od, ad := sp.dims()
	if m.EnvID != sp.Env.ID {
		return refuse(refusedEnv, "env %q, the run trains on %s", m.EnvID, sp.Env.ID)
	}
	if m.T != sp.T || m.N != sp.N || m.ObsDim != od || m.ActDim != ad {
		return refuse(refusedShape, "%d steps × %d envs, observations of %d, actions of %d; the run's rollouts are %d × %d, %d, %d",
			m.T, m.N, m.ObsDim, m.ActDim, sp.T, sp.N, od, ad)
	}
	for _, c := range cols {
		dtype, most, exact := sp.column(c.name, rows, od, ad)
		switch {
		case most < 0:
			return refuse(refusedShape, "column %q, which a rollout of the run does not have", c.name)
		case c.dtype != dtype:
			return refuse(refusedShape, "column %q holds %v, want %v", c.name, c.dtype, dtype)
		case exact && c.n != most || c.n > most:
			return refuse(refusedShape, "column %q declares %d values, the run's rollouts %d", c.name, c.n, most)
		}
	}
	return nil
}

// column is the type of column name in a rollout of the run and its length: exactly most
// values (exact), or at most; most < 0 for a column the run's rollouts do not have.
func (sp *Spec) column(name string, rows, od, ad int) (dtype DType, most int, exact bool) {
	switch name {
	case colObsShape:
		return Int64, len(sp.Env.Observation.Shape), true
	case colDiscrete:
		return Int64, 1, true
	case colObs:
		return Float32, rows * od, true
	case colActions, colEnvActions:
		return Float32, rows * ad, true
	case colRewards, colTerminated, colTruncated, colLogP, colValues, colEpisodeStarts:
		return Float32, rows, true
	case colVersion:
		return Int64, rows, true
	case colFinalObs:
		return Float32, rows * od, false
	case colFinalValues:
		return Float32, rows, false
	case colLastObs:
		return Float32, sp.N * od, true
	case colLastValues:
		return Float32, sp.N, true
	case colEpisodeEnv, colEpisodeLength, colEpisodeVer:
		return Int64, rows, false
	case colEpisodeReturn:
		return Float64, rows, false
	}
	if s, ok := strings.CutPrefix(name, colShapePrefix); ok {
		if slices.ContainsFunc(sp.States, func(st StateSpec) bool { return st.Name == s }) {
			return Int64, 8, false
		}
	}
	if s, ok := strings.CutPrefix(name, colStatePrefix); ok {
		if k := slices.IndexFunc(sp.States, func(st StateSpec) bool { return st.Name == s }); k >= 0 {
			return Float32, rows * sp.States[k].Dim, true
		}
	}
	return 0, -1, false
}

// values holds an unpacked rollout's values against the spec (the versions are the Source's
// to check).
func (sp *Spec) values(r *batcher.Rollout) error {
	rows, od, ad := sp.dims()
	if !slices.Equal(r.ObsShape, sp.Env.Observation.Shape) {
		return refuse(refusedShape, "observation shape %v, the env's %v", r.ObsShape, sp.Env.Observation.Shape)
	}
	d, discrete := sp.Env.Action.(envs.Discrete)
	if r.Discrete != discrete {
		return refuse(refusedShape, "discrete actions %v, the env's action space is %v", r.Discrete, sp.Env.Action)
	}
	for _, c := range []struct {
		name string
		v    []float32
	}{
		{"observations", r.Obs[:rows*od]}, {"rewards", r.Rewards[:rows]}, {"log-probabilities", r.LogP[:rows]},
		{"values", r.Values[:rows]}, {"final observations", r.FinalObs[:rows*od]}, {"final values", r.FinalValues[:rows]},
		{"last observations", r.LastObs[:sp.N*od]}, {"last values", r.LastValues[:sp.N]},
		{"actions", r.Actions[:rows*ad]}, {"env actions", r.EnvActions[:rows*ad]},
	} {
		if i := nonFinite(c.v); i >= 0 {
			return refuse(refusedValue, "%s[%d] = %v, not a finite number", c.name, i, c.v[i])
		}
	}
	for k, st := range r.States {
		if i := nonFinite(st); i >= 0 {
			return refuse(refusedValue, "recurrent state %q[%d] = %v, not a finite number", r.StateNames[k], i, st[i])
		}
	}
	for _, c := range []struct {
		name string
		v    []float32
	}{{"terminated", r.Terminated[:rows]}, {"truncated", r.Truncated[:rows]}, {"episode starts", r.EpisodeStarts[:rows]}} {
		for i, x := range c.v {
			if x != 0 && x != 1 {
				return refuse(refusedValue, "%s[%d] = %v, want 0 or 1", c.name, i, x)
			}
		}
	}
	if discrete {
		for _, acts := range [][]float32{r.Actions[:rows], r.EnvActions[:rows]} {
			for i, a := range acts {
				if a != float32(math.Trunc(float64(a))) || a < 0 || a >= float32(d.N) {
					return refuse(refusedAction, "action[%d] = %v, the env's actions are 0 to %d", i, a, d.N-1)
				}
			}
		}
	}
	for i, e := range r.Episodes {
		if math.IsNaN(e.Return) || math.IsInf(e.Return, 0) {
			return refuse(refusedValue, "episode %d: return %v, not a finite number", i, e.Return)
		}
	}
	return nil
}

// nonFinite returns the index of the first NaN or ±Inf in v, or -1.
func nonFinite(v []float32) int {
	for i, x := range v {
		if x-x != 0 { // NaN and ±Inf
			return i
		}
	}
	return -1
}

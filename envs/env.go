package envs

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/towerrl/towerrl/spaces"
)

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrUnknownEnv is returned by Make and New for an id nobody registered.
	ErrUnknownEnv = errors.New("envs: unknown environment id")
	// ErrUnavailable is returned by Lookup, Make and New for an id this build knows but cannot
	// run (see RegisterUnavailable); the message says what to install.
	ErrUnavailable = errors.New("envs: environment not available in this build")
	// ErrAction is returned for an action outside the action space: a
	// discrete index out of range, a buffer of the wrong length or kind, or a
	// Box value that is NaN or infinite. Per-env failures are *ActionError.
	ErrAction = errors.New("envs: invalid action")
	// ErrNeedsReset is returned by Step before the first Reset and, for a
	// single Env, after its episode ended.
	ErrNeedsReset = errors.New("envs: Step needs a Reset first")
	// ErrConfig is returned for an invalid Config; the message names the field.
	ErrConfig = errors.New("envs: invalid config")
	// ErrSpace is returned by ParseSpace for a malformed space (it is spaces.ErrSpace).
	ErrSpace = spaces.ErrSpace
	// ErrClosed is returned by calls on a closed environment.
	ErrClosed = errors.New("envs: environment closed")
)

// ActionError reports one env's action outside the action space. It unwraps
// to ErrAction.
type ActionError struct {
	Env       int     // index of the env in the VecEnv (0 for a single Env)
	Component int     // element of the env's action row (always 0 for Discrete)
	Value     float64 // the offending value
	Space     Space   // the action space
}

func (e *ActionError) Error() string {
	if _, ok := e.Space.(Discrete); ok {
		return fmt.Sprintf("envs: env %d: action %v outside %v", e.Env, e.Value, e.Space)
	}
	return fmt.Sprintf("envs: env %d: action[%d] = %v is not a finite number (space %v)",
		e.Env, e.Component, e.Value, e.Space)
}

// Unwrap returns ErrAction.
func (e *ActionError) Unwrap() error { return ErrAction }

// Spec describes a registered environment.
type Spec struct {
	// ID is the Gymnasium id, for example "CartPole-v1".
	ID string
	// Observation is the observation space; observations are float32.
	Observation Box
	// Action is the action space: Discrete or Box.
	Action Space
	// MaxEpisodeSteps is the time limit (Gymnasium's TimeLimit wrapper): an
	// episode is truncated when it has lasted this many steps. 0 means none.
	MaxEpisodeSteps int
	// RewardThreshold is Gymnasium's reward_threshold (informational; 0 when
	// Gymnasium registers none).
	RewardThreshold float64
	// EnvBytes is the memory one env holds besides its rows of the Buffers (a physics
	// engine's data: about 3.3 MB for a MuJoCo env), for memory checks made before envs are
	// made; 0 for envs whose state is a few numbers.
	EnvBytes int64
}

// Actions carries one step's actions for every env of a VecEnv (or the one
// env of an Env). Set exactly the field that matches the action space:
//   - Discrete: N action indices, for a Discrete space;
//   - Box: N×Dim float32 values, row-major, for a Box space.
//
// Box values outside the bounds are clipped where Gymnasium clips them (each
// environment documents where); NaN and ±Inf are errors.
type Actions struct {
	Discrete []int
	Box      []float32
}

// Buffers are a VecEnv's output buffers, struct-of-arrays over its N envs.
// They belong to the VecEnv, are allocated once at construction, and are
// overwritten in place by every Reset and Step: read them (or copy them) before
// the next call. Their backing arrays never change, so a caller may keep the
// slices (a DeviceEnv aliases them).
type Buffers struct {
	// Obs is [N×ObsDim]: row i is env i's observation after the step. For an
	// env whose episode ended this step it is the first observation of the
	// next episode (see FinalObs).
	Obs []float32
	// Rewards is [N]: the reward of the step just taken.
	Rewards []float32
	// Terminated is [N]: 1 where the step reached a terminal state of the MDP
	// (the value of what follows is 0), else 0.
	Terminated []float32
	// Truncated is [N]: 1 where the time limit cut the episode at this step
	// (the episode could have gone on; bootstrap from FinalObs), else 0. Both
	// Terminated and Truncated can be 1, exactly as Gymnasium reports them.
	Truncated []float32
	// FinalObs is [N×ObsDim]: row i is the last observation of the episode
	// that ended this step, meaningful only where Terminated[i] or
	// Truncated[i] is 1; other rows hold stale data.
	FinalObs []float32
}

// VecEnv is N environments of one kind stepped together.
//
// Autoreset rule (same-step reset, as in Stable-Baselines3 and EnvPool): when
// env i's episode ends during Step (Terminated or Truncated), its final
// observation is copied into FinalObs row i, the env is reset at once, and Obs
// row i holds the first observation of the new episode. Rewards, Terminated
// and Truncated describe the step that ended the old episode. The next Step
// therefore acts on the new episode; no step is wasted.
//
// A VecEnv is not safe for concurrent use; one goroutine owns it. Step does
// not allocate.
type VecEnv interface {
	// Spec describes the environment.
	Spec() Spec
	// NumEnvs is N.
	NumEnvs() int
	// Reset starts a new episode in every env and writes their first
	// observations to Obs; Rewards, Terminated and Truncated become 0.
	Reset() error
	// Step applies one action per env (see Actions) and fills the Buffers.
	// A bad action returns an error (an *ActionError naming the env and the
	// value when one env's action is at fault) before any env moves.
	Step(a Actions) error
	// Buffers returns the output buffers. The slices stay valid for the life
	// of the VecEnv; their contents change on every Reset and Step.
	Buffers() Buffers
	// Close releases resources; later calls return ErrClosed. Idempotent.
	Close() error
}

// Env is one environment with Gymnasium's single-env API and no autoreset:
// Reset, then Step until terminated or truncated, then Reset again. Stepping
// an ended episode returns ErrNeedsReset (Gymnasium calls it undefined).
//
// An Env is not safe for concurrent use.
type Env interface {
	// Spec describes the environment.
	Spec() Spec
	// Reset starts a new episode and returns its first observation.
	Reset() (obs []float32, err error)
	// Step applies one action (Actions with one Discrete value or Dim Box
	// values). The returned observation slice belongs to the Env and is
	// overwritten by the next call.
	Step(a Actions) (obs []float32, reward float32, terminated, truncated bool, err error)
	// Close releases resources; later calls return ErrClosed. Idempotent.
	Close() error
}

// Dynamics is what an environment implements to be registered: the Markov
// transition of n independent copies of the environment, with no time limit
// and no autoreset (the VecEnv and Env returned by Make and New add those).
// Implementations keep their state in float64 and emit float32 observations.
type Dynamics interface {
	// Reset draws a fresh initial state for env i from rng and writes its
	// observation to obs (len ObsDim).
	Reset(i int, rng *rand.Rand, obs []float32)
	// Step advances every env one step. a has already been checked against
	// the action space (right kind and length, indices in range, values
	// finite). It writes env i's next observation to obs[i*ObsDim:], its
	// reward to rewards[i] and 1 or 0 to terminated[i]. It must not allocate.
	Step(a Actions, obs, rewards, terminated []float32)
}

// checkActions validates a against space for n envs.
func checkActions(space Space, n int, a Actions) error {
	switch sp := space.(type) {
	case Discrete:
		if a.Box != nil {
			return fmt.Errorf("%w: Box actions given to an env with action space %v", ErrAction, sp)
		}
		if len(a.Discrete) != n {
			return fmt.Errorf("%w: %d discrete actions for %d envs", ErrAction, len(a.Discrete), n)
		}
		for i, x := range a.Discrete {
			if uint(x) >= uint(sp.N) {
				return &ActionError{Env: i, Value: float64(x), Space: sp}
			}
		}
	case Box:
		if a.Discrete != nil {
			return fmt.Errorf("%w: Discrete actions given to an env with action space %v", ErrAction, sp)
		}
		dim := len(sp.Low)
		if len(a.Box) != n*dim {
			return fmt.Errorf("%w: %d Box action values for %d envs × %d", ErrAction, len(a.Box), n, dim)
		}
		for j, x := range a.Box {
			if x != x || x > math.MaxFloat32 || x < -math.MaxFloat32 {
				return &ActionError{Env: j / dim, Component: j % dim, Value: float64(x), Space: sp}
			}
		}
	}
	return nil
}

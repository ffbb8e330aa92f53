package head

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/towerrl/towerrl/spaces"
)

// Kind names a policy head.
type Kind string

const (
	// CategoricalKind is a categorical distribution over logits, for a Discrete action space.
	CategoricalKind Kind = "categorical"
	// GaussianKind is a diagonal Gaussian (mean, state-independent or per-row log_std), for a Box space.
	GaussianKind Kind = "gaussian"
	// TanhGaussianKind is a diagonal Gaussian squashed by tanh into [−1, 1] and mapped onto the
	// Box's bounds (Soft Actor-Critic's policy), for a Box space.
	TanhGaussianKind Kind = "tanh-gaussian"
	// QValuesKind reads one Q-value per action of a Discrete space (a DQN's Q-network): it acts
	// ε-greedily (ε from the policy's metadata, towerrl.epsilon) and greedily when
	// deterministic.
	QValuesKind Kind = "qvalues"
)

// Kinds lists the heads, in the order help texts show them.
var Kinds = []Kind{CategoricalKind, GaussianKind, TanhGaussianKind, QValuesKind}

// Continuous reports whether the head acts in a Box space (gaussian, tanh-gaussian).
func (k Kind) Continuous() bool { return k == GaussianKind || k == TanhGaussianKind }

// Discrete reports whether the head acts in a Discrete space (categorical, qvalues).
func (k Kind) Discrete() bool { return k == CategoricalKind || k == QValuesKind }

// Scale says how a tanh-gaussian head's squashed actions, in [−1, 1], become the env's.
type Scale string

const (
	// ScaleEnv maps [−1, 1] linearly onto [Low, High]: low + (a+1)/2·(high−low), as SB3's
	// unscale_action does. It is the default (the empty Scale means it too).
	ScaleEnv Scale = "env"
	// ScaleNone passes squashed actions to the env as they are (clipped to its bounds): for an
	// env that takes [−1, 1] actions, or a policy trained without the mapping.
	ScaleNone Scale = "none"
)

// ParseScale parses "env", "none" or "" (the default, env).
func ParseScale(text string) (Scale, error) {
	switch s := Scale(strings.TrimSpace(text)); s {
	case "", ScaleEnv:
		return ScaleEnv, nil
	case ScaleNone:
		return s, nil
	}
	return "", fmt.Errorf("%w: action scale %q; choose env or none", ErrSpec, text)
}

// Metadata keys of the towerrl ONNX contract (docs/library.md).
const (
	KeyEnvID       = "towerrl.env_id"
	KeyObsShape    = "towerrl.obs_shape"
	KeyActionSpace = "towerrl.action_space"
	KeyHead        = "towerrl.head"
	KeyVersion     = "towerrl.version"
	// KeyActionScale is a tanh-gaussian head's Scale; absent means env.
	KeyActionScale = "towerrl.action_scale"
	// KeyEpsilon is a qvalues head's exploration rate ε in [0, 1]; absent means 0 (greedy).
	KeyEpsilon = "towerrl.epsilon"
)

// ErrSpec is wrapped by every error about a malformed or inconsistent Spec.
var ErrSpec = errors.New("head: invalid policy spec")

// Spec describes a policy's head and the spaces it acts in.
type Spec struct {
	Head     Kind
	EnvID    string // Gymnasium id the policy was trained on; may be empty
	ObsShape []int  // shape of one observation; may be empty when unknown
	// N is the number of actions of a Discrete space (categorical head).
	N int
	// Low and High bound each dimension of a Box space (Gaussian heads); len is the action size.
	Low, High []float32
	// ActionShape is a Box space's shape when it has more than one dimension (then Low and
	// High are flattened row-major); empty means [len(Low)].
	ActionShape []int
	// Scale is how a tanh-gaussian head's actions reach the env; "" means ScaleEnv. Other
	// heads ignore it.
	Scale Scale
	// Epsilon is a qvalues head's exploration rate: the probability of a uniformly random
	// action. Other heads ignore it.
	Epsilon float64
	Version int64 // policy version; 0 when unknown
}

// ActionDim is the number of floats per row the head's parameters take: N logits, or one mean
// per action dimension.
func (s Spec) ActionDim() int {
	if s.Head.Discrete() {
		return s.N
	}
	return len(s.Low)
}

// Validate checks the spec's internal consistency.
func (s Spec) Validate() error {
	switch s.Head {
	case CategoricalKind, QValuesKind:
		if s.N < 1 {
			return fmt.Errorf("%w: %s head over %d actions", ErrSpec, s.Head, s.N)
		}
		if s.Head == QValuesKind && !(s.Epsilon >= 0 && s.Epsilon <= 1) {
			return fmt.Errorf("%w: qvalues head with exploration rate ε = %v, want [0, 1]", ErrSpec, s.Epsilon)
		}
	case GaussianKind, TanhGaussianKind:
		if len(s.Low) == 0 || len(s.Low) != len(s.High) {
			return fmt.Errorf("%w: %s head with %d low and %d high bounds", ErrSpec, s.Head, len(s.Low), len(s.High))
		}
		for i := range s.Low {
			if !(s.Low[i] <= s.High[i]) {
				return fmt.Errorf("%w: action dimension %d has low %g above high %g", ErrSpec, i, s.Low[i], s.High[i])
			}
		}
		if s.Head == TanhGaussianKind {
			sc, err := ParseScale(string(s.Scale))
			if err != nil {
				return err
			}
			for i := range s.Low {
				if sc == ScaleEnv && (math.IsInf(float64(s.Low[i]), 0) || math.IsInf(float64(s.High[i]), 0)) {
					return fmt.Errorf("%w: tanh-gaussian head over unbounded dimension %d [%g, %g] cannot map [-1, 1] onto it; use action scale none",
						ErrSpec, i, s.Low[i], s.High[i])
				}
			}
		}
	default:
		return fmt.Errorf("%w: head %q; choose %s", ErrSpec, string(s.Head), kindList())
	}
	return nil
}

func kindList() string {
	parts := make([]string, len(Kinds))
	for i, k := range Kinds {
		parts[i] = string(k)
	}
	return strings.Join(parts, ", ")
}

// ActionSpace formats the action space as the metadata contract does, in package spaces' one
// text form: "discrete:N" or "box:SHAPE:LOW:HIGH" (SHAPE is ActionShape, or the action size
// when it is empty).
func (s Spec) ActionSpace() string {
	return s.Space().String()
}

// Space is the action space as a typed value: Discrete{N} for a categorical or qvalues head,
// else the Box of ActionShape (or [len(Low)]), Low and High.
func (s Spec) Space() spaces.Space {
	if s.Head.Discrete() {
		return spaces.Discrete{N: s.N}
	}
	shape := s.ActionShape
	if len(shape) == 0 {
		shape = []int{len(s.Low)}
	}
	return spaces.Box{Shape: shape, Low: s.Low, High: s.High}
}

// SetSpace sets s's N, or Low, High and ActionShape, from an action space, and s.Head to the
// matching head (categorical or gaussian) unless it is already set. Its size is at most
// MaxActions.
func (s *Spec) SetSpace(sp spaces.Space) error {
	switch a := sp.(type) {
	case spaces.Discrete:
		if a.N < 1 || a.N > MaxActions {
			return fmt.Errorf("%w: action space %s: N must be an integer from 1 to %d", ErrSpec, a, MaxActions)
		}
		s.N = a.N
		if s.Head == "" {
			s.Head = CategoricalKind
		}
	case spaces.Box:
		if err := a.Validate(); err != nil {
			return fmt.Errorf("%w: action space: %w", ErrSpec, err)
		}
		if a.Dim() > MaxActions {
			return fmt.Errorf("%w: action space %s: %d dimensions, more than %d", ErrSpec, a, a.Dim(), MaxActions)
		}
		s.Low, s.High = slices.Clone(a.Low), slices.Clone(a.High)
		s.ActionShape = nil
		if len(a.Shape) > 1 {
			s.ActionShape = slices.Clone(a.Shape)
		}
		if s.Head == "" {
			s.Head = GaussianKind
		}
	default:
		return fmt.Errorf("%w: action space %v is neither discrete nor a box", ErrSpec, sp)
	}
	return nil
}

// ParseActionSpace parses "discrete:N" or "box:SHAPE:LOW:HIGH" (spaces.Parse) into s as
// SetSpace does. A box's SHAPE may have several dimensions ("box:2x3:-1:1"): its Gaussian head
// has one mean per element, in row-major order.
//
// N and the elements of SHAPE are at most MaxActions: the text may come from a file's
// metadata, and buffers are sized by it before any env is consulted.
func (s *Spec) ParseActionSpace(text string) error {
	sp, err := spaces.ParseMax(text, MaxActions)
	if err != nil {
		return fmt.Errorf("%w: action space: %w (want discrete:N or box:SHAPE:LOW:HIGH)", ErrSpec, err)
	}
	return s.SetSpace(sp)
}

// MaxActions bounds the N of a discrete and the elements of a box action space (2^16; the
// largest Gymnasium spaces have a few hundred).
const MaxActions = 1 << 16

// ParseShape parses a comma-separated shape such as "4" or "4,84,84".
func ParseShape(text string) ([]int, error) {
	var shape []int
	for _, p := range strings.Split(text, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || d < 1 {
			return nil, fmt.Errorf("%w: shape %q: %q is not a positive integer", ErrSpec, text, p)
		}
		shape = append(shape, d)
	}
	return shape, nil
}

// FromMetadata reads a Spec from an ONNX model's towerrl.* metadata. ok is false when the
// model has no towerrl.head key (a foreign model: the caller must supply the Spec).
func FromMetadata(meta map[string]string) (spec Spec, ok bool, err error) {
	h, ok := meta[KeyHead]
	if !ok {
		return Spec{}, false, nil
	}
	spec = Spec{Head: Kind(h), EnvID: meta[KeyEnvID]}
	if !slices.Contains(Kinds, spec.Head) {
		return spec, true, fmt.Errorf("%w: metadata %s is %q; want one of %s", ErrSpec, KeyHead, h, kindList())
	}
	as, found := meta[KeyActionSpace]
	if !found {
		return spec, true, fmt.Errorf("%w: metadata has %s but no %s", ErrSpec, KeyHead, KeyActionSpace)
	}
	if err := spec.ParseActionSpace(as); err != nil {
		return spec, true, err
	}
	if v, found := meta[KeyObsShape]; found {
		if spec.ObsShape, err = ParseShape(v); err != nil {
			return spec, true, err
		}
	}
	if v, found := meta[KeyActionScale]; found {
		if spec.Scale, err = ParseScale(v); err != nil {
			return spec, true, err
		}
	}
	if v, found := meta[KeyEpsilon]; found {
		if spec.Epsilon, err = strconv.ParseFloat(v, 64); err != nil {
			return spec, true, fmt.Errorf("%w: metadata %s is %q, not a number", ErrSpec, KeyEpsilon, v)
		}
	}
	if v, found := meta[KeyVersion]; found {
		if spec.Version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return spec, true, fmt.Errorf("%w: metadata %s is %q, not an integer", ErrSpec, KeyVersion, v)
		}
	}
	return spec, true, spec.Validate()
}

// Metadata is the towerrl.* metadata for the spec, the inverse of FromMetadata.
func (s Spec) Metadata() map[string]string {
	m := map[string]string{
		KeyHead:        string(s.Head),
		KeyActionSpace: s.ActionSpace(),
		KeyVersion:     strconv.FormatInt(s.Version, 10),
	}
	if s.EnvID != "" {
		m[KeyEnvID] = s.EnvID
	}
	if s.Head == TanhGaussianKind && s.Scale != "" {
		m[KeyActionScale] = string(s.Scale)
	}
	if s.Head == QValuesKind && s.Epsilon != 0 {
		m[KeyEpsilon] = strconv.FormatFloat(s.Epsilon, 'g', -1, 64)
	}
	if len(s.ObsShape) > 0 {
		parts := make([]string, len(s.ObsShape))
		for i, d := range s.ObsShape {
			parts[i] = strconv.Itoa(d)
		}
		m[KeyObsShape] = strings.Join(parts, ",")
	}
	return m
}

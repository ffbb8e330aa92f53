package head

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
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
)

// Kinds lists the heads, in the order help texts show them.
var Kinds = []Kind{CategoricalKind, GaussianKind, TanhGaussianKind}

// Continuous reports whether the head acts in a Box space (gaussian, tanh-gaussian).
func (k Kind) Continuous() bool { return k == GaussianKind || k == TanhGaussianKind }

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

// Metadata keys of the towerrl ONNX contract (DESIGN.md).
const (
	KeyEnvID       = "towerrl.env_id"
	KeyObsShape    = "towerrl.obs_shape"
	KeyActionSpace = "towerrl.action_space"
	KeyHead        = "towerrl.head"
	KeyVersion     = "towerrl.version"
	// KeyActionScale is a tanh-gaussian head's Scale; absent means env.
	KeyActionScale = "towerrl.action_scale"
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
	// Scale is how a tanh-gaussian head's actions reach the env; "" means ScaleEnv. Other
	// heads ignore it.
	Scale   Scale
	Version int64 // policy version; 0 when unknown
}

// ActionDim is the number of floats per row the head's parameters take: N logits, or one mean
// per action dimension.
func (s Spec) ActionDim() int {
	if s.Head == CategoricalKind {
		return s.N
	}
	return len(s.Low)
}

// Validate checks the spec's internal consistency.
func (s Spec) Validate() error {
	switch s.Head {
	case CategoricalKind:
		if s.N < 1 {
			return fmt.Errorf("%w: categorical head over %d actions", ErrSpec, s.N)
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

// ActionSpace formats the action space as the metadata contract does: "discrete:N" or
// "box:DIM:LOW:HIGH" (LOW and HIGH one number for every dimension, or comma lists).
func (s Spec) ActionSpace() string {
	if s.Head == CategoricalKind {
		return fmt.Sprintf("discrete:%d", s.N)
	}
	list := func(v []float32) string {
		if slices.Min(v) == slices.Max(v) {
			return strconv.FormatFloat(float64(v[0]), 'g', -1, 32)
		}
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatFloat(float64(x), 'g', -1, 32)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprintf("box:%d:%s:%s", len(s.Low), list(s.Low), list(s.High))
}

// ParseActionSpace parses "discrete:N" or "box:DIM:LOW:HIGH" into s's N or Low/High, and sets
// s.Head to the matching head unless it is already set.
//
// N and DIM are at most MaxActions: the text may come from a file's metadata, and buffers are
// sized by it before any env is consulted.
func (s *Spec) ParseActionSpace(text string) error {
	f := strings.Split(strings.TrimSpace(text), ":")
	bad := func(why string) error {
		return fmt.Errorf("%w: action space %q: %s (want discrete:N or box:DIM:LOW:HIGH)", ErrSpec, text, why)
	}
	switch {
	case len(f) == 2 && f[0] == "discrete":
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > MaxActions {
			return bad(fmt.Sprintf("N must be an integer from 1 to %d", MaxActions))
		}
		s.N = n
		if s.Head == "" {
			s.Head = CategoricalKind
		}
	case len(f) == 4 && f[0] == "box":
		dim, err := strconv.Atoi(f[1])
		if err != nil || dim < 1 || dim > MaxActions {
			return bad(fmt.Sprintf("DIM must be an integer from 1 to %d", MaxActions))
		}
		if s.Low, err = bounds(f[2], dim); err != nil {
			return bad("LOW: " + err.Error())
		}
		if s.High, err = bounds(f[3], dim); err != nil {
			return bad("HIGH: " + err.Error())
		}
		if s.Head == "" {
			s.Head = GaussianKind
		}
	default:
		return bad("unknown form")
	}
	return nil
}

// MaxActions bounds the N of a discrete and the DIM of a box action space (2^16; the largest
// Gymnasium spaces have a few hundred).
const MaxActions = 1 << 16

func bounds(text string, dim int) ([]float32, error) {
	parts := strings.Split(text, ",")
	if len(parts) != 1 && len(parts) != dim {
		return nil, fmt.Errorf("%d values for %d dimensions", len(parts), dim)
	}
	out := make([]float32, dim)
	for i := range out {
		p := parts[0]
		if len(parts) == dim {
			p = parts[i]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", p)
		}
		out[i] = float32(v)
	}
	return out, nil
}

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
	if len(s.ObsShape) > 0 {
		parts := make([]string, len(s.ObsShape))
		for i, d := range s.ObsShape {
			parts[i] = strconv.Itoa(d)
		}
		m[KeyObsShape] = strings.Join(parts, ",")
	}
	return m
}

package head

import (
	"errors"
	"fmt"
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
)

// Metadata keys of the towerrl ONNX contract (DESIGN.md).
const (
	KeyEnvID       = "towerrl.env_id"
	KeyObsShape    = "towerrl.obs_shape"
	KeyActionSpace = "towerrl.action_space"
	KeyHead        = "towerrl.head"
	KeyVersion     = "towerrl.version"
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
	// Low and High bound each dimension of a Box space (Gaussian head); len is the action size.
	Low, High []float32
	Version   int64 // policy version; 0 when unknown
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
	case GaussianKind:
		if len(s.Low) == 0 || len(s.Low) != len(s.High) {
			return fmt.Errorf("%w: gaussian head with %d low and %d high bounds", ErrSpec, len(s.Low), len(s.High))
		}
		for i := range s.Low {
			if !(s.Low[i] <= s.High[i]) {
				return fmt.Errorf("%w: action dimension %d has low %g above high %g", ErrSpec, i, s.Low[i], s.High[i])
			}
		}
	default:
		return fmt.Errorf("%w: head %q; choose categorical or gaussian", ErrSpec, string(s.Head))
	}
	return nil
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
func (s *Spec) ParseActionSpace(text string) error {
	f := strings.Split(strings.TrimSpace(text), ":")
	bad := func(why string) error {
		return fmt.Errorf("%w: action space %q: %s (want discrete:N or box:DIM:LOW:HIGH)", ErrSpec, text, why)
	}
	switch {
	case len(f) == 2 && f[0] == "discrete":
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 {
			return bad("N must be a positive integer")
		}
		s.N = n
		if s.Head == "" {
			s.Head = CategoricalKind
		}
	case len(f) == 4 && f[0] == "box":
		dim, err := strconv.Atoi(f[1])
		if err != nil || dim < 1 {
			return bad("DIM must be a positive integer")
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
	if spec.Head != CategoricalKind && spec.Head != GaussianKind {
		return spec, true, fmt.Errorf("%w: metadata %s is %q; want categorical or gaussian", ErrSpec, KeyHead, h)
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
	if len(s.ObsShape) > 0 {
		parts := make([]string, len(s.ObsShape))
		for i, d := range s.ObsShape {
			parts[i] = strconv.Itoa(d)
		}
		m[KeyObsShape] = strings.Join(parts, ",")
	}
	return m
}

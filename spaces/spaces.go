// Package spaces holds the action and observation spaces of towerrl's envs and policies —
// Discrete and Box, as Gymnasium defines them — with their one text form, the form of the
// towerrl.action_space ONNX metadata: "discrete:N" or "box:SHAPE:LOW:HIGH". envs describes its
// envs with them and models/head reads a policy's action space with Parse, so there is one
// grammar for both.
package spaces

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrSpace is returned by Parse for a malformed space and by Box.Validate for an inconsistent
// one. Match it with errors.Is.
var ErrSpace = errors.New("spaces: malformed space")

// MaxElems bounds the elements of a parsed Box (2^24: an Atari frame stack holds 28,224, a raw
// 210×160×3 frame 100,800): the text may come from a file's metadata, and buffers are sized by
// it before anything else is consulted.
const MaxElems = 1 << 24

// Space is an action or observation space: a Discrete or a Box. The set is closed; switch on
// the concrete type to tell them apart.
type Space interface {
	// Dim is the number of values one sample takes in a flat buffer row: 1 for Discrete, the
	// product of the shape for Box.
	Dim() int
	// String is the space's text form (see Parse).
	String() string
	isSpace()
}

// Discrete is the set {0, 1, …, N-1}. Samples are ints.
type Discrete struct {
	N int
}

// Dim is 1.
func (Discrete) Dim() int { return 1 }

// String returns "discrete:N".
func (d Discrete) String() string { return "discrete:" + strconv.Itoa(d.N) }

// Contains reports whether a is a valid action.
func (d Discrete) Contains(a int) bool { return a >= 0 && a < d.N }

func (Discrete) isSpace() {}

// Box is a float32 box: Shape gives the dimensions; Low and High the inclusive bounds of each
// element, flattened row-major (len = product of Shape). Infinite bounds are ±math.MaxFloat32
// as in Gymnasium, or ±Inf.
type Box struct {
	Shape     []int
	Low, High []float32
}

// NewBox returns a box of the given shape with the same bounds for every element.
func NewBox(low, high float32, shape ...int) Box {
	n := 1
	for _, d := range shape {
		n *= d
	}
	b := Box{Shape: slices.Clone(shape), Low: make([]float32, n), High: make([]float32, n)}
	for i := range n {
		b.Low[i], b.High[i] = low, high
	}
	return b
}

// Dim is the product of the shape.
func (b Box) Dim() int {
	n := 1
	for _, d := range b.Shape {
		n *= d
	}
	return n
}

// Contains reports whether x (len Dim) lies inside the box. NaN never does.
func (b Box) Contains(x []float32) bool {
	if len(x) != len(b.Low) {
		return false
	}
	for i, v := range x {
		if !(v >= b.Low[i] && v <= b.High[i]) {
			return false
		}
	}
	return true
}

// String returns "box:SHAPE:LOW:HIGH": SHAPE is the dimensions joined by "x"; LOW and HIGH
// are one number when all elements share the bound, else a comma-separated list. For example
// "box:1:-2:2", "box:2x3:-1:1" or "box:2:-1.2,-0.07:0.6,0.07".
func (b Box) String() string {
	dims := make([]string, len(b.Shape))
	for i, d := range b.Shape {
		dims[i] = strconv.Itoa(d)
	}
	return "box:" + strings.Join(dims, "x") + ":" + formatBound(b.Low) + ":" + formatBound(b.High)
}

func (Box) isSpace() {}

// Validate checks that the bounds match the shape and are ordered.
func (b Box) Validate() error {
	n := b.Dim()
	if len(b.Shape) == 0 || n <= 0 || len(b.Low) != n || len(b.High) != n {
		return fmt.Errorf("%w: box shape %v holds %d elements but has %d low and %d high bounds",
			ErrSpace, b.Shape, n, len(b.Low), len(b.High))
	}
	for i := range b.Low {
		if !(b.Low[i] <= b.High[i]) {
			return fmt.Errorf("%w: box element %d: low %v is not <= high %v", ErrSpace, i, b.Low[i], b.High[i])
		}
	}
	return nil
}

func formatBound(v []float32) string {
	same := true
	for _, x := range v {
		if x != v[0] {
			same = false
			break
		}
	}
	if same && len(v) > 0 {
		return strconv.FormatFloat(float64(v[0]), 'g', -1, 32)
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(float64(x), 'g', -1, 32)
	}
	return strings.Join(parts, ",")
}

// Parse parses the String form of a space: "discrete:N" or "box:SHAPE:LOW:HIGH", where SHAPE
// is positive dimensions joined by "x" (at most MaxElems elements in all), and LOW and HIGH
// are one number for every element or one per element, comma-separated. A bound too large
// for float32 is infinite. Spaces around the text and its numbers are ignored.
func Parse(s string) (Space, error) { return ParseMax(s, MaxElems) }

// ParseMax is Parse with a box's elements, and a discrete space's N, at most max (at most
// MaxElems), checked before anything is allocated.
func ParseMax(s string, max int) (Space, error) {
	max = min(max, MaxElems)
	text := strings.TrimSpace(s)
	kind, rest, _ := strings.Cut(text, ":")
	switch kind {
	case "discrete":
		n, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil || n <= 0 || n > max {
			return nil, fmt.Errorf("%w: %q: N must be an integer from 1 to %d", ErrSpace, s, max)
		}
		return Discrete{N: n}, nil
	case "box":
		f := strings.Split(rest, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: %q: want box:SHAPE:LOW:HIGH", ErrSpace, s)
		}
		var b Box
		n := 1
		for _, d := range strings.Split(f[0], "x") {
			v, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("%w: %q: dimension %q is not a positive integer", ErrSpace, s, d)
			}
			if v > max/n {
				return nil, fmt.Errorf("%w: %q: the shape's elements must number from 1 to %d", ErrSpace, s, max)
			}
			b.Shape = append(b.Shape, v)
			n *= v
		}
		var err error
		if b.Low, err = parseBound(f[1], n); err != nil {
			return nil, fmt.Errorf("%w: %q: low: %w", ErrSpace, s, err)
		}
		if b.High, err = parseBound(f[2], n); err != nil {
			return nil, fmt.Errorf("%w: %q: high: %w", ErrSpace, s, err)
		}
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %q: kind must be discrete or box", ErrSpace, s)
}

func parseBound(s string, n int) ([]float32, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 1 && len(parts) != n {
		return nil, fmt.Errorf("%d values for %d elements", len(parts), n)
	}
	out := make([]float32, n)
	for i := range out {
		p := parts[0]
		if len(parts) == n {
			p = parts[i]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 32)
		if err != nil && !math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q is not a number", p)
		}
		out[i] = float32(v)
	}
	return out, nil
}

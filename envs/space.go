package envs

import "github.com/towerrl/towerrl/spaces"

// The spaces of package spaces, under the names envs has always given them.
type (
	// Space is an action or observation space: a Discrete or a Box (spaces.Space).
	Space = spaces.Space
	// Discrete is the set {0, 1, …, N-1} (spaces.Discrete).
	Discrete = spaces.Discrete
	// Box is a float32 box (spaces.Box).
	Box = spaces.Box
)

// NewBox returns a box of the given shape with the same bounds for every element.
func NewBox(low, high float32, shape ...int) Box { return spaces.NewBox(low, high, shape...) }

// ParseSpace parses the String form of a space: "discrete:N" or "box:SHAPE:LOW:HIGH" (see
// spaces.Parse).
func ParseSpace(s string) (Space, error) { return spaces.Parse(s) }

package head

import (
	"slices"
	"testing"

	"github.com/towerrl/towerrl/spaces"
)

// TestMultiDimBox: an env whose actions are a 2×3 Box (the text form envs prints,
// "box:2x3:LOW:HIGH") binds a Gaussian head with one mean per element, six in row-major
// order, and its metadata keeps the shape through a round trip. Before package spaces the
// head read only box:DIM and refused it.
func TestMultiDimBox(t *testing.T) {
	env := spaces.Box{Shape: []int{2, 3}, Low: []float32{-1, -2, -3, -4, -5, -6}, High: []float32{1, 2, 3, 4, 5, 6}}
	var s Spec
	if err := s.ParseActionSpace(env.String()); err != nil {
		t.Fatal(err)
	}
	if s.Head != GaussianKind || s.ActionDim() != 6 || !slices.Equal(s.ActionShape, []int{2, 3}) || s.Low[4] != -5 || s.High[5] != 6 {
		t.Fatalf("got %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.ActionSpace() != env.String() {
		t.Errorf("ActionSpace() = %q, want the env's %q", s.ActionSpace(), env.String())
	}
	got, ok, err := FromMetadata(s.Metadata())
	if err != nil || !ok {
		t.Fatalf("FromMetadata: %v, %v", ok, err)
	}
	if got.ActionSpace() != env.String() || got.ActionDim() != 6 {
		t.Errorf("after the metadata round trip: %q (dim %d)", got.ActionSpace(), got.ActionDim())
	}
	// SetSpace takes the typed value; a one-dimensional box keeps no shape, as before.
	var one Spec
	if err := one.SetSpace(spaces.NewBox(-2, 2, 1)); err != nil || one.ActionShape != nil || one.ActionSpace() != "box:1:-2:2" {
		t.Errorf("SetSpace box:1: %+v, %v", one, err)
	}
	var d Spec
	if err := d.SetSpace(spaces.Discrete{N: 3}); err != nil || d.Head != CategoricalKind || d.ActionDim() != 3 || d.ActionSpace() != "discrete:3" {
		t.Errorf("SetSpace discrete:3: %+v, %v", d, err)
	}
}

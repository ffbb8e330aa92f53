package spaces

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestParseRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Space
	}{
		{"discrete:2", Discrete{N: 2}},
		{"box:1:-2:2", Box{Shape: []int{1}, Low: []float32{-2}, High: []float32{2}}},
		{"box:2x3:-1:1", NewBox(-1, 1, 2, 3)},
		{"box:2:-1.2,-0.07:0.6,0.07", Box{Shape: []int{2}, Low: []float32{-1.2, -0.07}, High: []float32{0.6, 0.07}}},
		{"box:3:-inf:+inf", NewBox(float32(math.Inf(-1)), float32(math.Inf(1)), 3)},
	} {
		got, err := Parse(tc.text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.text, err)
		}
		if got.String() != tc.want.String() || got.Dim() != tc.want.Dim() {
			t.Errorf("Parse(%q) = %v (dim %d), want %v (dim %d)", tc.text, got, got.Dim(), tc.want, tc.want.Dim())
		}
		again, err := Parse(got.String())
		if err != nil || again.String() != got.String() {
			t.Errorf("Parse(%q) = %v, %v; want %v again", got.String(), again, err, got)
		}
	}
	// A 2×3 box is six elements, row-major, with the bounds given per element.
	b, err := Parse("box:2x3:0,1,2,3,4,5:10,11,12,13,14,15")
	if err != nil {
		t.Fatal(err)
	}
	box := b.(Box)
	if !slices.Equal(box.Shape, []int{2, 3}) || box.Dim() != 6 || box.Low[4] != 4 || box.High[5] != 15 {
		t.Errorf("got %+v", box)
	}
	if !box.Contains([]float32{0, 1, 2, 3, 4, 15}) || box.Contains([]float32{0, 1, 2, 3, 4, 16}) || box.Contains([]float32{0, 1}) {
		t.Error("Contains")
	}
}

func TestParseErrors(t *testing.T) {
	for _, text := range []string{"", "discrete", "discrete:0", "discrete:x", "box:2:-1", "box:0:-1:1",
		"box:2x0:-1:1", "box:2:-1,0,1:1", "box:1:1:-1", "box:1:nan:1", "box:1:a:1", "cube:2", "box:99999999999:-1:1",
		"box:65536x65536:0:1"} {
		sp, err := Parse(text)
		if !errors.Is(err, ErrSpace) {
			t.Errorf("Parse(%q) = %v, %v; want ErrSpace", text, sp, err)
		}
	}
	// ParseMax refuses a size above its limit before it allocates.
	if _, err := ParseMax("box:3x4:0:1", 11); !errors.Is(err, ErrSpace) || !strings.Contains(err.Error(), "from 1 to 11") {
		t.Errorf("ParseMax 12 > 11: %v", err)
	}
	if _, err := ParseMax("discrete:12", 11); !errors.Is(err, ErrSpace) {
		t.Errorf("ParseMax discrete:12 > 11: %v", err)
	}
	if sp, err := ParseMax("box:3x4:0:1", 12); err != nil || sp.Dim() != 12 {
		t.Errorf("ParseMax 12: %v, %v", sp, err)
	}
}

func TestValidate(t *testing.T) {
	for _, b := range []Box{{}, {Shape: []int{2}, Low: []float32{0}, High: []float32{1, 1}}, {Shape: []int{1}, Low: []float32{2}, High: []float32{1}}} {
		if err := b.Validate(); !errors.Is(err, ErrSpace) {
			t.Errorf("%+v: %v", b, err)
		}
	}
	if err := NewBox(-1, 1, 2, 3).Validate(); err != nil {
		t.Error(err)
	}
}

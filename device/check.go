package device

import "fmt"

// PlacementError reports a tensor found on another device than the one
// expected. It unwraps to ErrPlacement.
type PlacementError struct {
	Tensor string // the tensor's name
	Want   string // the expected device, as Device.String
	Got    string // the device the tensor is on, as Device.String ("none" if nil)
}

func (e *PlacementError) Error() string {
	return fmt.Sprintf("device: tensor %q is on %s, want %s", e.Tensor, e.Got, e.Want)
}

// Unwrap returns ErrPlacement.
func (e *PlacementError) Unwrap() error { return ErrPlacement }

// CheckDevice verifies that every tensor lives on want. It returns a
// *PlacementError naming the first tensor that does not (a nil tensor counts
// as misplaced). It does not allocate when all tensors are in place.
func CheckDevice(want Device, tensors ...*Tensor) error {
	for i, t := range tensors {
		if t == nil {
			return &PlacementError{Tensor: fmt.Sprintf("#%d (nil)", i), Want: want.String(), Got: "none"}
		}
		if !sameDevice(t.dev, want) {
			got := "none"
			if t.dev != nil {
				got = t.dev.String()
			}
			return &PlacementError{Tensor: t.name, Want: want.String(), Got: got}
		}
	}
	return nil
}

func sameDevice(a, b Device) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Kind() == b.Kind() && a.Ordinal() == b.Ordinal()
}

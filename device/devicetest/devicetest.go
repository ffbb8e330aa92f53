// Package devicetest is the conformance suite every device.Device
// implementation passes. Call Run from a test of the implementation's package:
//
//	func TestConformance(t *testing.T) { devicetest.Run(t, device.CPU()) }
package devicetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/device"
)

// Run checks dev against the device.Device contract. It closes dev at the end.
func Run(t *testing.T, dev device.Device) {
	t.Helper()
	t.Run("Name", func(t *testing.T) {
		again, err := device.Open(dev.String())
		if err != nil {
			t.Fatalf("Open(%q): %v", dev.String(), err)
		}
		if again.Kind() != dev.Kind() || again.Ordinal() != dev.Ordinal() {
			t.Errorf("Open(%q) = %v, want %v", dev.String(), again, dev)
		}
	})
	t.Run("Mirror", func(t *testing.T) {
		tests := []struct {
			name  string
			n     int
			shape []int
			err   error
		}{
			{"vector", 6, []int{6}, nil},
			{"matrix", 6, []int{2, 3}, nil},
			{"scalar", 1, nil, nil},
			{"empty", 0, []int{0, 4}, nil},
			{"too small", 5, []int{2, 3}, device.ErrShape},
			{"negative", 6, []int{-2, -3}, device.ErrShape},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				host := make([]float32, tt.n)
				tn, err := dev.Mirror(tt.name, host, tt.shape...)
				if !errors.Is(err, tt.err) {
					t.Fatalf("Mirror(%v) error = %v, want %v", tt.shape, err, tt.err)
				}
				if err != nil {
					return
				}
				if tn.Name() != tt.name || tn.Len() != tt.n {
					t.Errorf("tensor %v: name %q len %d, want %q %d", tn, tn.Name(), tn.Len(), tt.name, tt.n)
				}
				if !slices.Equal(tn.Shape(), tt.shape) {
					t.Errorf("shape = %v, want %v", tn.Shape(), tt.shape)
				}
				if err := device.CheckDevice(dev, tn); err != nil {
					t.Errorf("CheckDevice on its own device: %v", err)
				}
			})
		}
	})
	t.Run("Sync", func(t *testing.T) {
		host := []float32{1, 2, 3, 4}
		tn, err := dev.Mirror("x", host, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		host[3] = 42
		if err := dev.Sync(tn); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		if data, ok := tn.Host(); ok && data[3] != 42 {
			t.Errorf("host-visible tensor reads %v after Sync, want 42", data[3])
		}
		if allocs := testing.AllocsPerRun(100, func() { _ = dev.Sync(tn) }); allocs != 0 {
			t.Errorf("Sync allocates %v times per call, want 0", allocs)
		}
		if err := dev.Sync(nil); err == nil {
			t.Error("Sync(nil) succeeded, want an error")
		}
	})
	t.Run("CheckDevice", func(t *testing.T) {
		tn, err := dev.Mirror("obs", make([]float32, 3), 3)
		if err != nil {
			t.Fatal(err)
		}
		err = device.CheckDevice(dev, tn, nil)
		var pe *device.PlacementError
		if !errors.As(err, &pe) || !errors.Is(err, device.ErrPlacement) {
			t.Fatalf("CheckDevice with a nil tensor = %v, want a *PlacementError", err)
		}
	})
	t.Run("Close", func(t *testing.T) {
		if err := dev.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := dev.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

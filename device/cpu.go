package device

import "fmt"

func init() {
	Register("cpu", func(ordinal int) (Device, error) {
		if ordinal != 0 {
			return nil, fmt.Errorf("device: there is one CPU device, cpu:0, not cpu:%d", ordinal)
		}
		return CPU(), nil
	})
}

// cpu is the host device. It has no state: all values are the same device.
type cpu struct{}

// CPU returns the host device. It is always available.
func CPU() Device { return cpu{} }

func (cpu) Kind() Kind     { return KindCPU }
func (cpu) Ordinal() int   { return 0 }
func (cpu) String() string { return "cpu" }
func (cpu) Close() error   { return nil }

// Mirror returns a tensor that is host itself: no copy is made.
func (c cpu) Mirror(name string, host []float32, shape ...int) (*Tensor, error) {
	return newTensor(c, name, host, shape)
}

// Sync does nothing: a CPU tensor is its host slice.
func (c cpu) Sync(t *Tensor) error {
	if t == nil || t.dev != Device(c) {
		return fmt.Errorf("%w: syncing %v on cpu", ErrForeign, t)
	}
	return nil
}

package device

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Kind is the kind of a device.
type Kind uint8

const (
	// KindCPU is the host processor; its memory is the Go heap.
	KindCPU Kind = iota
	// KindCUDA is an NVIDIA GPU driven through CUDA.
	KindCUDA
)

// String returns the kind's name as used by [Open]: "cpu" or "cuda".
func (k Kind) String() string {
	switch k {
	case KindCPU:
		return "cpu"
	case KindCUDA:
		return "cuda"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrNoCUDA is returned when CUDA is asked for in a build without the
	// build tag towerrl_cuda.
	ErrNoCUDA = errors.New("device: built without CUDA (build tag towerrl_cuda)")
	// ErrUnknown is returned by Open for a device kind nobody registered.
	ErrUnknown = errors.New("device: unknown device")
	// ErrShape is returned when a shape does not match the buffer it describes.
	ErrShape = errors.New("device: shape does not match buffer")
	// ErrPlacement is returned by CheckDevice for a tensor on the wrong device.
	ErrPlacement = errors.New("device: tensor on the wrong device")
	// ErrForeign is returned when a tensor is given to a device that does not
	// own it.
	ErrForeign = errors.New("device: tensor belongs to another device")
)

// Device is a place float32 tensors can live.
type Device interface {
	// Kind is the device's kind.
	Kind() Kind
	// Ordinal is the device's index among devices of its kind (0 for the CPU).
	Ordinal() int
	// String names the device as Open accepts it: "cpu", "cuda:0".
	String() string
	// Mirror returns a tensor on this device, called name, that mirrors host
	// with the given shape (whose product must equal len(host)). On the CPU
	// the tensor aliases host; elsewhere it owns device memory that Sync
	// fills from host.
	Mirror(name string, host []float32, shape ...int) (*Tensor, error)
	// Sync makes t hold the current contents of the host slice it mirrors.
	// It does nothing on the CPU. It does not allocate.
	Sync(t *Tensor) error
	// Close releases the device's resources. It is idempotent.
	Close() error
}

// Tensor is a named float32 buffer with a shape, placed on a device.
// Its fields are set by the device that made it and never change.
type Tensor struct {
	name  string
	dev   Device
	shape []int
	host  []float32 // host slice mirrored; the tensor's memory itself on the CPU
	// ptr is the device address of the tensor's memory on devices other than
	// the CPU (zero on the CPU).
	ptr uintptr
}

// Name is the tensor's name, used in error messages.
func (t *Tensor) Name() string { return t.name }

// Device is the device the tensor lives on.
func (t *Tensor) Device() Device { return t.dev }

// Shape returns the tensor's shape. The caller must not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Len is the number of float32 elements.
func (t *Tensor) Len() int { return len(t.host) }

// Host returns the tensor's memory when the host can address it directly
// (CPU tensors), and ok false otherwise. The slice is the tensor: writes to it
// are writes to the tensor.
func (t *Tensor) Host() (data []float32, ok bool) {
	if t.dev != nil && t.dev.Kind() == KindCPU {
		return t.host, true
	}
	return nil, false
}

// String describes the tensor: name, shape and device.
func (t *Tensor) String() string {
	return fmt.Sprintf("%s%v@%v", t.name, t.shape, t.dev)
}

// NewTensor returns a tensor on dev, called name, mirroring host with the
// given shape (whose product must equal len(host)). It is for Device
// implementations: their Mirror methods call it, then attach device memory.
// The tensor aliases host; on the CPU host is the tensor's memory.
func NewTensor(dev Device, name string, host []float32, shape ...int) (*Tensor, error) {
	if dev == nil {
		return nil, fmt.Errorf("device: NewTensor(%q) with a nil device", name)
	}
	return newTensor(dev, name, host, shape)
}

// newTensor checks that shape describes host and builds a tensor.
func newTensor(dev Device, name string, host []float32, shape []int) (*Tensor, error) {
	n := 1
	for i, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("%w: tensor %q: dimension %d is %d", ErrShape, name, i, d)
		}
		n *= d
	}
	if n != len(host) {
		return nil, fmt.Errorf("%w: tensor %q: shape %v holds %d elements, buffer has %d",
			ErrShape, name, shape, n, len(host))
	}
	return &Tensor{name: name, dev: dev, shape: slices.Clone(shape), host: host}, nil
}

// An Opener opens the device of its kind with the given ordinal.
type Opener func(ordinal int) (Device, error)

var registry struct {
	mu      sync.RWMutex // guards openers
	openers map[string]Opener
}

// Register makes a device kind available to Open under name. It is meant to
// be called from init functions and panics if name is empty, open is nil, or
// name is already registered.
func Register(name string, open Opener) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if name == "" || open == nil {
		panic("device: Register with empty name or nil opener")
	}
	if _, dup := registry.openers[name]; dup {
		panic("device: Register called twice for " + name)
	}
	if registry.openers == nil {
		registry.openers = make(map[string]Opener)
	}
	registry.openers[name] = open
}

// Kinds lists the registered device kinds, sorted.
func Kinds() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	names := make([]string, 0, len(registry.openers))
	for n := range registry.openers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open opens a device by name: a registered kind ("cpu", "cuda") optionally
// followed by ":ordinal" ("cuda:1"). A kind alone means ordinal 0.
func Open(spec string) (Device, error) {
	kind, ord, hasOrd := strings.Cut(spec, ":")
	ordinal := 0
	if hasOrd {
		n, err := strconv.Atoi(ord)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("device: opening %q: ordinal %q is not a non-negative integer", spec, ord)
		}
		ordinal = n
	}
	registry.mu.RLock()
	open, ok := registry.openers[kind]
	registry.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, spec, strings.Join(Kinds(), ", "))
	}
	d, err := open(ordinal)
	if err != nil {
		return nil, fmt.Errorf("device: opening %q: %w", spec, err)
	}
	return d, nil
}

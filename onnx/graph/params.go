package graph

import (
	"fmt"
	"maps"
	"slices"

	"gorgonia.org/tensor"
)

// Params holds the values of a model's parameters, one dense tensor per name: the float
// initializers of the ONNX graph, plus one per untied Identity (see the package doc). Each is
// trainable or frozen ([TrainOptions]); frozen ones are read by the graphs but never
// differentiated, and stay out of the flat vector.
//
// One Params is meant to be shared: every [Graph] built over it binds its parameter nodes to
// these very tensors, without copying, so an in-place update (an optimiser step, CopyFrom) is
// seen by all of them at their next run. The tensors must not be written while a graph built
// over them runs.
type Params struct {
	names []string                 // in model order
	vals  map[string]*tensor.Dense // name → value
	dt    tensor.Dtype
	flat  []float32 // set by Flat: the buffer every trainable tensor views
	// frozen marks the parameters that do not train (see TrainOptions).
	frozen map[string]bool
}

// Names returns the parameter names in model order (initializers first, in the order the ONNX
// graph lists them, then untied Identity outputs in node order).
func (p *Params) Names() []string { return slices.Clone(p.names) }

// Len is the number of parameters.
func (p *Params) Len() int { return len(p.names) }

// Dtype is the element type of every tensor: tensor.Float32 unless converted with [Params.As].
func (p *Params) Dtype() tensor.Dtype { return p.dt }

// Value returns the tensor of the named parameter, which callers may update in place (never
// while a graph built over p runs), and whether p has it.
func (p *Params) Value(name string) (*tensor.Dense, bool) {
	v, ok := p.vals[name]
	return v, ok
}

// Size is the total number of scalar parameters, frozen ones included.
func (p *Params) Size() int {
	n := 0
	for _, name := range p.names {
		n += p.vals[name].Shape().TotalSize()
	}
	return n
}

// Clone returns a deep copy of p.
func (p *Params) Clone() *Params {
	q := &Params{names: slices.Clone(p.names), vals: make(map[string]*tensor.Dense, len(p.vals)), dt: p.dt, frozen: maps.Clone(p.frozen)}
	for name, v := range p.vals {
		q.vals[name] = v.Clone().(*tensor.Dense)
	}
	return q
}

// As returns a deep copy of p with elements of type dt (tensor.Float32 or tensor.Float64).
// Graphs built over a Float64 copy compute in float64, which finite-difference checks like.
func (p *Params) As(dt tensor.Dtype) (*Params, error) {
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, fmt.Errorf("%w: element type %v; want float32 or float64", ErrParams, dt)
	}
	q := &Params{names: slices.Clone(p.names), vals: make(map[string]*tensor.Dense, len(p.vals)), dt: dt, frozen: maps.Clone(p.frozen)}
	for name, v := range p.vals {
		q.vals[name] = newDense(dt, v.Shape(), floatsOf(v))
	}
	return q, nil
}

// CopyFrom copies the values of src into p's tensors in place (converting the element type if
// they differ). Both must hold the same names and shapes.
func (p *Params) CopyFrom(src *Params) error {
	if err := p.sameLayout(src); err != nil {
		return err
	}
	for _, name := range p.names {
		dst := p.vals[name]
		vals := floatsOf(src.vals[name])
		switch data := dst.Data().(type) {
		case []float32:
			for k, v := range vals {
				data[k] = float32(v)
			}
		case []float64:
			copy(data, vals)
		}
	}
	return nil
}

func (p *Params) sameLayout(q *Params) error {
	if len(p.names) != len(q.names) {
		return fmt.Errorf("%w: %d parameters, the other set has %d", ErrParams, len(p.names), len(q.names))
	}
	for _, name := range p.names {
		w, ok := q.vals[name]
		if !ok {
			return fmt.Errorf("%w: the other set lacks %q", ErrParams, name)
		}
		if !w.Shape().Eq(p.vals[name].Shape()) {
			return fmt.Errorf("%w: %q has shape %v, the other set %v", ErrParams, name, p.vals[name].Shape(), w.Shape())
		}
	}
	return nil
}

// newDense makes a tensor of type dt holding vals (converted).
func newDense(dt tensor.Dtype, shape tensor.Shape, vals []float64) *tensor.Dense {
	if dt == tensor.Float64 {
		return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(slices.Clone(vals)))
	}
	f := make([]float32, len(vals))
	for k, v := range vals {
		f[k] = float32(v)
	}
	return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(f))
}

// floatsOf returns a float64 copy of a float32 or float64 tensor's elements (in row-major
// order of its shape; the tensors Params holds are never views).
func floatsOf(t *tensor.Dense) []float64 {
	switch data := t.Data().(type) {
	case []float32:
		out := make([]float64, len(data))
		for k, v := range data {
			out[k] = float64(v)
		}
		return out
	case []float64:
		return slices.Clone(data)
	case float32:
		return []float64{float64(data)}
	case float64:
		return []float64{data}
	}
	return nil
}

// Flat moves every trainable tensor of a float32 Params into one contiguous buffer, in
// [Params.TrainableNames] order, and returns it: the flat parameter vector a learner's
// optimiser updates in place (the layout of [Graph.Learnables] and [Graph.Gradients]). Frozen
// tensors stay where they are. Tensors keep their shapes and values; graphs must be built
// after Flat (they bind the tensors they find). Calling it again returns the same buffer.
func (p *Params) Flat() ([]float32, error) {
	if p.dt != tensor.Float32 {
		return nil, fmt.Errorf("%w: Flat needs float32 parameters, these are %v", ErrParams, p.dt)
	}
	total := p.TrainableSize()
	if total == 0 {
		return nil, fmt.Errorf("%w: no trainable parameters (%d frozen)", ErrParams, len(p.Frozen()))
	}
	if p.flat != nil && p.contiguous(p.flat) {
		return p.flat, nil
	}
	flat := make([]float32, total)
	off := 0
	for _, name := range p.TrainableNames() {
		v := p.vals[name]
		if v.Shape().Dims() == 0 {
			return nil, fmt.Errorf("%w: parameter %q is a scalar", ErrParams, name)
		}
		n := v.Shape().TotalSize()
		copy(flat[off:off+n], v.Data().([]float32))
		p.vals[name] = tensor.New(tensor.WithShape(v.Shape().Clone()...), tensor.WithBacking(flat[off:off+n:off+n]))
		off += n
	}
	p.flat = flat
	return flat, nil
}

// contiguous reports whether the trainable tensors already lie in flat, in Names order.
func (p *Params) contiguous(flat []float32) bool {
	off := 0
	for _, name := range p.TrainableNames() {
		data, ok := p.vals[name].Data().([]float32)
		if !ok || len(data) == 0 || &data[0] != &flat[off] {
			return false
		}
		off += len(data)
	}
	return off == len(flat)
}

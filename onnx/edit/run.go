package edit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// maxInputElems bounds the elements of one input DynamicBatch and Tensors feed.
const maxInputElems = 1 << 26

// dims returns the shape a graph input or output declares, -1 marking a dynamic dimension;
// nil when it declares none.
func dims(vi *onnxpb.ValueInfoProto) []int64 {
	shape := vi.GetType().GetTensorType().GetShape()
	if shape == nil {
		return nil
	}
	out := make([]int64, len(shape.GetDim()))
	for k, d := range shape.GetDim() {
		out[k] = -1
		if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && v.DimValue >= 0 {
			out[k] = v.DimValue
		}
	}
	return out
}

// concreteShape is the shape input vi has for a batch of n on axis (none: leave the batch as
// declared), with other dynamic dimensions taken from fixed (Config.Shapes).
func concreteShape(vi *onnxpb.ValueInfoProto, axis int, n int64, fixed map[string][]int64) ([]int64, error) {
	name := vi.GetName()
	if vi.GetType().GetTensorType() == nil {
		return nil, fmt.Errorf("%w: input %q is not a tensor", onnx.ErrModel, name)
	}
	d := dims(vi)
	if d == nil {
		return nil, fmt.Errorf("%w: input %q declares no shape", onnx.ErrShape, name)
	}
	if f, ok := fixed[name]; ok && len(f) == len(d) {
		for k := range d {
			if d[k] < 0 && f[k] >= 0 {
				d[k] = f[k]
			}
		}
	}
	if axis != none {
		if axis >= len(d) {
			return nil, fmt.Errorf("%w: batch axis %d of input %q, which has rank %d", onnx.ErrShape, axis, name, len(d))
		}
		d[axis] = n
	}
	total := int64(1)
	for k, v := range d {
		if v < 0 {
			return nil, fmt.Errorf("%w: input %q has a dynamic dimension %d besides the batch; give its size in Config.Shapes", onnx.ErrShape, name, k)
		}
		total *= v
		if total > maxInputElems {
			return nil, fmt.Errorf("%w: input %q of shape %v holds more than %d elements", onnx.ErrShape, name, d, maxInputElems)
		}
	}
	return d, nil
}

// withInputShapes marshals m with its inputs' shapes set to shapes (m is left as it was).
func withInputShapes(m *onnxpb.ModelProto, ix *graphIndex, shapes map[string][]int64) ([]byte, error) {
	saved := make([]*onnxpb.TypeProto, len(ix.inputs))
	for k, vi := range ix.inputs {
		saved[k] = vi.GetType()
		t, ok := proto.Clone(vi.GetType()).(*onnxpb.TypeProto)
		if !ok || t.GetTensorType() == nil {
			continue // concreteShape refused it already
		}
		sh := &onnxpb.TensorShapeProto{}
		for _, d := range shapes[vi.GetName()] {
			sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
		}
		t.GetTensorType().Shape = sh
		vi.Type = t
	}
	defer func() {
		for k, vi := range ix.inputs {
			vi.Type = saved[k]
		}
	}()
	return marshal(m)
}

// runner runs a model whose inputs are all fixed (a variant of the model for one batch size).
type runner struct {
	s       *onnx.Session
	shapes  map[string][]int64 // input shapes
	inputs  []onnx.TensorInfo
	outputs []onnx.TensorInfo
}

// openRunner opens m with its batched inputs (axes) given n rows and every other dimension fixed.
func openRunner(ctx context.Context, m *onnxpb.ModelProto, ix *graphIndex, axes map[string]int, n int64, cfg onnx.Config) (*runner, error) {
	shapes := map[string][]int64{}
	for _, vi := range ix.inputs {
		ax, ok := axes[vi.GetName()]
		if !ok {
			ax = none
		}
		s, err := concreteShape(vi, ax, n, cfg.Shapes)
		if err != nil {
			return nil, err
		}
		shapes[vi.GetName()] = s
	}
	data, err := withInputShapes(m, ix, shapes)
	if err != nil {
		return nil, err
	}
	cfg.Shapes, cfg.MaxBatch = nil, 0
	s, err := onnx.New(ctx, data, cfg)
	if err != nil {
		return nil, err
	}
	return &runner{s: s, shapes: shapes, inputs: s.Inputs(), outputs: s.Outputs()}, nil
}

func (r *runner) close() error { return r.s.Close() }

// run feeds the named tensors and returns the outputs by name.
func (r *runner) run(feeds map[string]*tensor) (map[string]*tensor, error) {
	for i, info := range r.inputs {
		t := feeds[info.Name]
		if t == nil {
			return nil, fmt.Errorf("edit: no data for input %q", info.Name)
		}
		if err := feed(r.s, i, t); err != nil {
			return nil, err
		}
	}
	batch := r.s.MaxBatch()
	if err := r.s.Run(batch); err != nil {
		return nil, err
	}
	outs := make(map[string]*tensor, len(r.outputs))
	for i, info := range r.outputs {
		t, err := fetch(r.s, i, info, batch)
		if err != nil {
			return nil, err
		}
		outs[info.Name] = t
	}
	return outs, nil
}

// tensor holds a host tensor of any DType a Session reads: floating-point elements in f,
// integer ones in i.
type tensor struct {
	dt    onnx.DType
	shape []int64
	f     []float64
	i     []int64
}

func (t *tensor) isFloat() bool { return t.dt == onnx.Float32 || t.dt == onnx.Float64 }

func (t *tensor) size() int { return int(prod(t.shape)) }

func convert[T, U float32 | float64 | int32 | int64 | uint8](src []U) []T {
	out := make([]T, len(src))
	for k, v := range src {
		out[k] = T(v)
	}
	return out
}

func feed(s *onnx.Session, i int, t *tensor) error {
	var err error
	switch t.dt {
	case onnx.Float32:
		_, err = onnx.Feed(s, i, t.shape, convert[float32](t.f))
	case onnx.Float64:
		_, err = onnx.Feed(s, i, t.shape, t.f)
	case onnx.Int32:
		_, err = onnx.Feed(s, i, t.shape, convert[int32](t.i))
	case onnx.Int64:
		_, err = onnx.Feed(s, i, t.shape, t.i)
	case onnx.Uint8:
		_, err = onnx.Feed(s, i, t.shape, convert[uint8](t.i))
	default:
		err = fmt.Errorf("%w: element type %s", onnx.ErrDType, t.dt)
	}
	return err
}

// fetch copies output i of a session that ran a batch out of its buffer.
func fetch(s *onnx.Session, i int, info onnx.TensorInfo, batch int) (*tensor, error) {
	t := &tensor{dt: info.DType, shape: info.Shape(batch)}
	n := t.size()
	var err error
	switch info.DType {
	case onnx.Float32:
		t.f, err = outputAs[float32, float64](s, i, n)
	case onnx.Float64:
		t.f, err = outputAs[float64, float64](s, i, n)
	case onnx.Int32:
		t.i, err = outputAs[int32, int64](s, i, n)
	case onnx.Int64:
		t.i, err = outputAs[int64, int64](s, i, n)
	case onnx.Uint8:
		t.i, err = outputAs[uint8, int64](s, i, n)
	default:
		err = fmt.Errorf("%w: element type %s", onnx.ErrDType, info.DType)
	}
	return t, err
}

func outputAs[T onnx.Element, U float64 | int64](s *onnx.Session, i, n int) ([]U, error) {
	b, err := onnx.Output[T](s, i)
	if err != nil {
		return nil, err
	}
	return convert[U](b[:n]), nil
}

// around views shape as [outer, shape[axis], inner].
func around(shape []int64, axis int) (outer, rows, inner int) {
	return int(prod(shape[:axis])), int(shape[axis]), int(prod(shape[axis+1:]))
}

// take returns rows [lo, hi) of t along axis.
func (t *tensor) take(axis, lo, hi int) *tensor {
	outer, rows, inner := around(t.shape, axis)
	out := &tensor{dt: t.dt, shape: slices.Clone(t.shape)}
	out.shape[axis] = int64(hi - lo)
	for o := range outer {
		from, to := (o*rows+lo)*inner, (o*rows+hi)*inner
		if t.isFloat() {
			out.f = append(out.f, t.f[from:to]...)
		} else {
			out.i = append(out.i, t.i[from:to]...)
		}
	}
	return out
}

// join concatenates ts along axis.
func join(ts []*tensor, axis int) *tensor {
	out := &tensor{dt: ts[0].dt, shape: slices.Clone(ts[0].shape)}
	out.shape[axis] = 0
	for _, t := range ts {
		out.shape[axis] += t.shape[axis]
	}
	outer, _, _ := around(out.shape, axis)
	for o := range outer {
		for _, t := range ts {
			_, rows, inner := around(t.shape, axis)
			from, to := o*rows*inner, (o+1)*rows*inner
			if t.isFloat() {
				out.f = append(out.f, t.f[from:to]...)
			} else {
				out.i = append(out.i, t.i[from:to]...)
			}
		}
	}
	return out
}

// randomTensor fills a tensor of the given shape: floats uniform in [-1, 1), uint8 in 0..255,
// other integers 0 or 1 (valid indices and flags).
func randomTensor(dt onnx.DType, shape []int64, rng *rand.Rand) *tensor {
	t := &tensor{dt: dt, shape: slices.Clone(shape)}
	n := t.size()
	switch {
	case t.isFloat():
		t.f = make([]float64, n)
		for k := range t.f {
			t.f[k] = 2*rng.Float64() - 1
		}
	default:
		t.i = make([]int64, n)
		for k := range t.i {
			if dt == onnx.Uint8 {
				t.i[k] = rng.Int64N(256)
			} else {
				t.i[k] = rng.Int64N(2)
			}
		}
	}
	return t
}

func zeroTensor(dt onnx.DType, shape []int64) *tensor {
	t := &tensor{dt: dt, shape: slices.Clone(shape)}
	if t.isFloat() {
		t.f = make([]float64, t.size())
	} else {
		t.i = make([]int64, t.size())
	}
	return t
}

// givenTensor makes a tensor from caller-given values.
func givenTensor(dt onnx.DType, shape []int64, vals []float64) *tensor {
	t := &tensor{dt: dt, shape: slices.Clone(shape)}
	if t.isFloat() {
		t.f = slices.Clone(vals)
		return t
	}
	t.i = make([]int64, len(vals))
	for k, v := range vals {
		t.i[k] = int64(math.Round(v))
	}
	return t
}

// errMismatch marks a rewrite that ONNX Runtime refused or that did not reproduce the original.
var errMismatch = errors.New("the rewritten model does not reproduce the original")

// compare checks got against want element by element: floating-point values within
// tol·max(1, |want|) (NaN equal to NaN), integers exactly. It returns the largest absolute
// difference and a description of the first element out of tolerance ("" when none).
func compare(want, got *tensor, tol float64) (float64, string) {
	if !slices.Equal(want.shape, got.shape) {
		return math.Inf(1), fmt.Sprintf("shape %v, the original's %v", got.shape, want.shape)
	}
	worst := 0.0
	bad := ""
	for k := range want.size() {
		var w, g float64
		if want.isFloat() {
			w, g = want.f[k], got.f[k]
		} else {
			w, g = float64(want.i[k]), float64(got.i[k])
		}
		if math.IsNaN(w) && math.IsNaN(g) || w == g {
			continue
		}
		d := math.Abs(w - g)
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		worst = max(worst, d)
		lim := tol * max(1, math.Abs(w))
		if !want.isFloat() {
			lim = 0
		}
		if d > lim && bad == "" {
			bad = fmt.Sprintf("element %d is %g, the original's %g", k, g, w)
		}
	}
	return worst, bad
}

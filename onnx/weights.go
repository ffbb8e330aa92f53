package onnx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	ort "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Weights is one set of caller-owned buffers holding every weight a [Session] feeds
// (Config.Weights), made by [Session.NewWeights] and selected with [Session.UseWeights].
//
// The session reads the buffers during every Run after UseWeights(w), until another set is
// used: write them only while no such Run is in flight (between two Runs of the goroutine
// that owns the session, or from another goroutine while the session runs another set). To
// change the weights, write a set not in use and switch to it: on CPU a write to the set in
// use is seen by the next Run, but another provider may hold a device copy made when the set
// was bound. A set belongs to the session that made it and is released by its Close.
type Weights struct {
	s      *Session
	bufs   [][]float32
	values []ort.Value // tensors viewing bufs, bound by Run
}

// Buffers returns the set's buffers, in Config.Weights order (the caller's own slices).
func (w *Weights) Buffers() [][]float32 { return w.bufs }

// Weights describes the weights the session feeds from caller memory (Config.Weights, in
// that order): float32 tensors without a batch dimension, Row their whole shape.
func (s *Session) Weights() []TensorInfo { return infos(s.weights) }

// NewWeights makes a set of buffers for the session's fed weights from bufs, one per name of
// Config.Weights in that order, each holding exactly RowSize elements of [Session.Weights]
// (row-major). The buffers are used as they are, not copied: they stay the caller's memory.
// Sets are cheap to select, so make them once (two for double buffering) and switch with
// [Session.UseWeights]; each lives until Close.
func (s *Session) NewWeights(bufs [][]float32) (*Weights, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if len(s.weights) == 0 {
		return nil, fmt.Errorf("%w: the session feeds no weights; name the initializers in Config.Weights", ErrConfig)
	}
	if len(bufs) != len(s.weights) {
		return nil, fmt.Errorf("%w: %d weight buffers for the %d weights the session feeds (Config.Weights)", ErrShape, len(bufs), len(s.weights))
	}
	w := &Weights{s: s, bufs: slices.Clone(bufs)}
	for i, buf := range bufs {
		p := &s.weights[i]
		if n := p.RowSize(); len(buf) != n {
			return nil, errors.Join(fmt.Errorf("%w: weight %q has shape %v (%d elements), its buffer holds %d",
				ErrShape, p.Name, p.Row, n, len(buf)), w.destroy())
		}
		v, err := ort.NewTensor(ort.NewShape(p.Row...), buf)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("onnx: weight %q: %w", p.Name, err), w.destroy())
		}
		w.values = append(w.values, v)
	}
	s.sets = append(s.sets, w)
	return w, nil
}

// UseWeights makes every later Run read the fed weights from w, a set this session made.
// It is cheap (each batch size's I/O binding takes the new set at its next Run; on CUDA that
// Run copies the set to the GPU, also when w was selected before) and belongs, like Run, to
// the goroutine that owns the session.
func (s *Session) UseWeights(w *Weights) error {
	if s.closed {
		return ErrClosed
	}
	if w == nil || w.s != s {
		return fmt.Errorf("%w: UseWeights takes a set this session made with NewWeights", ErrConfig)
	}
	s.current = w
	s.uses++
	return nil
}

func (w *Weights) destroy() error {
	var errs []error
	for _, v := range w.values {
		errs = append(errs, v.Destroy())
	}
	w.values = nil
	return errors.Join(errs...)
}

// bindWeights binds the current weight set into b, when b holds another or, on a provider
// that copies inputs when they are bound (CUDA), when the set was selected again since b bound
// it: a binding of another batch size may hold the set's copy from an earlier selection,
// written over since (the double-buffered publishing of the batcher does that).
func (s *Session) bindWeights(b *binding) error {
	if b.weights == s.current && (!s.rebind || b.use == s.uses) {
		return nil
	}
	for i, v := range s.current.values {
		if err := b.io.BindInput(s.weights[i].Name, v); err != nil {
			return fmt.Errorf("onnx: binding weight %q: %w", s.weights[i].Name, err)
		}
	}
	b.weights, b.use = s.current, s.uses
	return nil
}

// feedWeights rewrites m so that ONNX Runtime reads each named initializer as a graph input
// with a default value (an "overridable initializer": the initializer is also listed among
// the graph's inputs, from IR version 4 on), and describes them. Only float32 initializers of
// rank ≥ 1 in the main graph can be fed.
func feedWeights(m *onnxpb.ModelProto, names []string) ([]byte, []port, error) {
	g := m.GetGraph()
	inits := make(map[string]*onnxpb.TensorProto, len(g.GetInitializer()))
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = t
	}
	listed := make(map[string]bool, len(g.GetInput()))
	for _, in := range g.GetInput() {
		listed[in.GetName()] = true
	}
	ps := make([]port, len(names))
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		t, ok := inits[name]
		switch {
		case seen[name]:
			return nil, nil, fmt.Errorf("%w: Config.Weights names %q twice", ErrConfig, name)
		case !ok:
			return nil, nil, fmt.Errorf("%w: Config.Weights names %q, which is not an initializer of the model; its float32 initializers are %s",
				ErrInput, name, floatInitializers(g))
		case onnxpb.TensorProto_DataType(t.GetDataType()) != onnxpb.TensorProto_FLOAT:
			return nil, nil, fmt.Errorf("%w: Config.Weights names %q, which holds %v; only float32 initializers can be fed",
				ErrDType, name, onnxpb.TensorProto_DataType(t.GetDataType()))
		case len(t.GetDims()) == 0:
			return nil, nil, fmt.Errorf("%w: Config.Weights names %q, a scalar; only initializers of rank 1 or more can be fed", ErrShape, name)
		}
		if _, ok := rowElems(t.GetDims()); !ok {
			return nil, nil, fmt.Errorf("%w: weight %q has dimensions %v, which multiply past 2^63", ErrTooLarge, name, t.GetDims())
		}
		seen[name] = true
		ps[i].TensorInfo = TensorInfo{Name: name, DType: Float32, Declared: slices.Clone(t.GetDims()), Row: slices.Clone(t.GetDims())}
		if !listed[name] {
			g.Input = append(g.Input, &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
				Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
					ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: fixedShape(t.GetDims())}}}})
		}
	}
	// Before IR version 4 every initializer is a graph input and ONNX Runtime holds them
	// constant; from 4 on, an initializer listed as an input is overridable.
	if m.GetIrVersion() < 4 {
		m.IrVersion = proto.Int64(4)
	}
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("onnx: writing the model with fed weights: %w", err)
	}
	return data, ps, nil
}

func fixedShape(dims []int64) *onnxpb.TensorShapeProto {
	sh := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		sh.Dim = append(sh.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return sh
}

// floatInitializers lists the names of g's float32 initializers of rank ≥ 1 for a message
// (the first 20, then a count).
func floatInitializers(g *onnxpb.GraphProto) string {
	var names []string
	for _, t := range g.GetInitializer() {
		if onnxpb.TensorProto_DataType(t.GetDataType()) == onnxpb.TensorProto_FLOAT && len(t.GetDims()) > 0 {
			names = append(names, fmt.Sprintf("%q", t.GetName()))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 20 {
		return strings.Join(names[:20], ", ") + fmt.Sprintf(" and %d more", len(names)-20)
	}
	return strings.Join(names, ", ")
}

// WeightValues reads the values of the named float32 initializers of a serialized model, in
// names' order: what a Session feeding them (Config.Weights) computes with until its caller
// sets other values.
func WeightValues(model []byte, names []string) ([][]float32, error) {
	m, err := Parse(model)
	if err != nil {
		return nil, err
	}
	return m.WeightValues(names)
}

// WeightValues is the package function WeightValues for a parsed model.
func (mod *Model) WeightValues(names []string) ([][]float32, error) {
	m := mod.pb
	var err error
	inits := make(map[string]*onnxpb.TensorProto, len(m.GetGraph().GetInitializer()))
	for _, t := range m.GetGraph().GetInitializer() {
		inits[t.GetName()] = t
	}
	out := make([][]float32, len(names))
	for i, name := range names {
		t, ok := inits[name]
		if !ok {
			return nil, fmt.Errorf("%w: the model has no initializer %q; its float32 initializers are %s", ErrInput, name, floatInitializers(m.GetGraph()))
		}
		if out[i], err = float32Data(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// float32Data decodes a float32 tensor's values from raw_data or float_data.
func float32Data(t *onnxpb.TensorProto) ([]float32, error) {
	if onnxpb.TensorProto_DataType(t.GetDataType()) != onnxpb.TensorProto_FLOAT {
		return nil, fmt.Errorf("%w: initializer %q holds %v, not float32", ErrDType, t.GetName(), onnxpb.TensorProto_DataType(t.GetDataType()))
	}
	n, ok := rowElems(t.GetDims())
	raw := t.GetRawData()
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: initializer %q has dimensions %v, which multiply past 2^63", ErrTooLarge, t.GetName(), t.GetDims())
	case raw != nil && int64(len(raw)) != 4*n, raw == nil && int64(len(t.GetFloatData())) != n:
		return nil, fmt.Errorf("%w: initializer %q of shape %v does not hold %d float32 values", ErrModel, t.GetName(), t.GetDims(), n)
	}
	out := make([]float32, n)
	if raw != nil {
		for k := range out {
			out[k] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:]))
		}
		return out, nil
	}
	copy(out, t.GetFloatData())
	return out, nil
}

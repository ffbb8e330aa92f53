package layout

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// tensor is what the index knows of one tensor of the graph.
type tensor struct {
	name     string
	dtype    head.DType
	shape    []int64 // nil when unknown; -1 marks a dynamic dimension
	producer int     // index of the node writing it; -1 for inputs and initializers
	value    *onnxpb.TensorProto
	init     bool // an initializer (a parameter or a folded constant)
	input    bool // a graph input the caller feeds
	output   bool // a graph output
	declared bool // dtype and shape come from the graph or the caller, not inference
}

// known reports whether the tensor's shape is known.
func (t *tensor) known() bool { return t != nil && t.shape != nil }

// width is the size of the last dimension, or -1 when unknown.
func (t *tensor) width() int64 {
	if !t.known() || len(t.shape) == 0 {
		if t.known() {
			return 1
		}
		return -1
	}
	return t.shape[len(t.shape)-1]
}

// elements is the number of elements of a tensor with a fully known shape, else -1.
func (t *tensor) elements() int64 {
	if !t.known() {
		return -1
	}
	n := int64(1)
	for _, d := range t.shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

// describe is "name float32[?,2]", as head.Tensor prints itself.
func (t *tensor) describe() string {
	if !t.known() {
		return fmt.Sprintf("%s %s[shape unknown]", t.name, t.dtype)
	}
	return head.Tensor{Name: t.name, DType: t.dtype, Declared: t.shape}.String()
}

// index is a read-only view of a model's graph: tensors with their shapes, producers and
// consumers. Shapes come from the caller's TensorInfo, the graph's declarations and
// value_info, and a light inference over the ops policies use.
type index struct {
	nodes     []*onnxpb.NodeProto
	tensors   map[string]*tensor
	consumers map[string][]int
	inputs    []string // graph inputs the caller feeds (not initializers)
	outputs   []string
	meta      map[string]string
	batch     int64    // the observation input's dimension 0: -1 dynamic, 0 unknown
	lin       []linear // memo of linears
}

func newIndex(m *onnxpb.ModelProto, infos []head.Tensor) (*index, error) {
	g := m.GetGraph()
	if g == nil {
		return nil, fmt.Errorf("%w: the model has no graph", ErrModel)
	}
	x := &index{nodes: g.GetNode(), tensors: map[string]*tensor{}, consumers: map[string][]int{}, meta: map[string]string{}}
	for _, p := range m.GetMetadataProps() {
		x.meta[p.GetKey()] = p.GetValue()
	}
	get := func(name string) *tensor {
		t, ok := x.tensors[name]
		if !ok {
			t = &tensor{name: name, producer: -1, dtype: head.Float32}
			x.tensors[name] = t
		}
		return t
	}
	for _, in := range g.GetInitializer() {
		t := get(in.GetName())
		t.init, t.value, t.dtype = true, in, dtypeOf(in.GetDataType())
		t.shape = slices.Clone(in.GetDims())
		if t.shape == nil {
			t.shape = []int64{}
		}
	}
	declare := func(vi *onnxpb.ValueInfoProto) *tensor {
		t := get(vi.GetName())
		tt := vi.GetType().GetTensorType()
		if tt == nil {
			return t
		}
		t.dtype, t.declared = dtypeOf(tt.GetElemType()), true
		if sh := tt.GetShape(); sh != nil && !t.init {
			t.shape = make([]int64, len(sh.GetDim()))
			for i, d := range sh.GetDim() {
				t.shape[i] = -1
				if v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && v.DimValue > 0 {
					t.shape[i] = v.DimValue
				}
			}
		}
		return t
	}
	for _, vi := range g.GetInput() {
		if t := declare(vi); !t.init {
			t.input = true
			x.inputs = append(x.inputs, t.name)
		}
	}
	for _, vi := range g.GetOutput() {
		declare(vi).output = true
		x.outputs = append(x.outputs, vi.GetName())
	}
	for _, vi := range g.GetValueInfo() {
		declare(vi)
	}
	for i, n := range x.nodes {
		for _, in := range n.GetInput() {
			if in != "" {
				x.consumers[in] = append(x.consumers[in], i)
			}
		}
		for _, out := range n.GetOutput() {
			if out == "" {
				continue
			}
			t := get(out)
			if t.producer >= 0 && t.producer != i {
				return nil, fmt.Errorf("%w: tensor %q is written by nodes %q and %q", ErrModel, out, x.nodes[t.producer].GetName(), n.GetName())
			}
			t.producer = i
		}
		if n.GetOpType() == "Constant" && len(n.GetOutput()) == 1 {
			t := get(n.GetOutput()[0])
			t.value = n.ConstantTensor()
			if t.value != nil {
				t.dtype, t.shape = dtypeOf(t.value.GetDataType()), slices.Clone(t.value.GetDims())
				if t.shape == nil {
					t.shape = []int64{}
				}
			}
		}
	}
	// The caller's shapes are concrete (a session's): they win.
	for _, info := range infos {
		t := get(info.Name)
		t.dtype, t.declared = info.DType, true
		if info.Batched {
			t.shape = append([]int64{-1}, info.Row...)
		} else {
			t.shape = slices.Clone(info.Row)
			if t.shape == nil {
				t.shape = []int64{}
			}
		}
	}
	for i, n := range x.nodes {
		x.infer(i, n)
	}
	return x, nil
}

// unsupported is the element type of a tensor no head reads (bool, string, float16...).
const unsupported head.DType = "unsupported"

// dtypeOf maps an ONNX element type onto its name; unsupported for the types a session does
// not read.
func dtypeOf(dt int32) head.DType {
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_FLOAT:
		return head.Float32
	case onnxpb.TensorProto_DOUBLE:
		return head.Float64
	case onnxpb.TensorProto_INT32:
		return head.Int32
	case onnxpb.TensorProto_INT64:
		return head.Int64
	case onnxpb.TensorProto_UINT8:
		return head.Uint8
	}
	return unsupported
}

// values decodes a small constant tensor (float, double, int32 or int64) as float64s; ok is
// false for other types, external data or more than limit elements.
func values(t *onnxpb.TensorProto, limit int) (v []float64, ok bool) {
	if t == nil || len(t.GetExternalData()) > 0 {
		return nil, false
	}
	n := 1
	for _, d := range t.GetDims() {
		n *= int(d)
	}
	if n > limit || n < 0 {
		return nil, false
	}
	raw := t.GetRawData()
	v = make([]float64, 0, n)
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_FLOAT:
		if raw == nil {
			for _, f := range t.GetFloatData() {
				v = append(v, float64(f))
			}
		}
		for k := 0; k+4 <= len(raw); k += 4 {
			v = append(v, float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[k:]))))
		}
	case onnxpb.TensorProto_DOUBLE:
		v = append(v, t.GetDoubleData()...)
		for k := 0; k+8 <= len(raw); k += 8 {
			v = append(v, math.Float64frombits(binary.LittleEndian.Uint64(raw[k:])))
		}
	case onnxpb.TensorProto_INT64:
		for _, i := range t.GetInt64Data() {
			v = append(v, float64(i))
		}
		for k := 0; k+8 <= len(raw); k += 8 {
			v = append(v, float64(int64(binary.LittleEndian.Uint64(raw[k:]))))
		}
	case onnxpb.TensorProto_INT32:
		for _, i := range t.GetInt32Data() {
			v = append(v, float64(i))
		}
		for k := 0; k+4 <= len(raw); k += 4 {
			v = append(v, float64(int32(binary.LittleEndian.Uint32(raw[k:]))))
		}
	default:
		return nil, false
	}
	if len(v) != n {
		return nil, false
	}
	return v, true
}

// constant returns the values of a tensor that is an initializer or a Constant's output.
func (x *index) constant(name string, limit int) ([]float64, bool) {
	t := x.tensors[name]
	if t == nil || t.value == nil {
		return nil, false
	}
	return values(t.value, limit)
}

// isConst reports whether name is an initializer or a Constant's output.
func (x *index) isConst(name string) bool {
	t := x.tensors[name]
	return t != nil && t.value != nil
}

func (x *index) tensor(name string) *tensor { return x.tensors[name] }

func (x *index) producer(name string) *onnxpb.NodeProto {
	if t := x.tensors[name]; t != nil && t.producer >= 0 {
		return x.nodes[t.producer]
	}
	return nil
}

// attr and attrInt are onnxpb's lookups, under the names this package's code uses.
func attr(n *onnxpb.NodeProto, name string) *onnxpb.AttributeProto { return n.Attr(name) }

func attrInt(n *onnxpb.NodeProto, name string, def int64) int64 { return n.AttrInt(name, def) }

// intsOf is an attribute's ints, or else the constant input k's values (opset 13+ moved axes
// and shapes from attributes to inputs).
func (x *index) intsOf(n *onnxpb.NodeProto, name string, k int) ([]int64, bool) {
	if a := attr(n, name); a != nil {
		return a.GetInts(), true
	}
	if k < len(n.GetInput()) {
		if v, ok := x.constant(n.GetInput()[k], 64); ok {
			out := make([]int64, len(v))
			for i, f := range v {
				out[i] = int64(f)
			}
			return out, true
		}
	}
	return nil, false
}

// unary ops keep their first input's shape.
var unary = map[string]bool{
	"Relu": true, "Tanh": true, "Sigmoid": true, "Exp": true, "Log": true, "Neg": true, "Abs": true,
	"Sqrt": true, "Clip": true, "Elu": true, "LeakyRelu": true, "Selu": true, "Softplus": true,
	"Identity": true, "Cast": true, "Softmax": true, "LogSoftmax": true, "Erf": true,
	"Reciprocal": true, "Floor": true, "Ceil": true, "Round": true, "Sign": true,
	"HardSigmoid": true, "HardSwish": true, "Mish": true, "Dropout": true, "Gelu": true,
	"Celu": true, "ThresholdedRelu": true, "Softsign": true, "LayerNormalization": true,
	"BatchNormalization": true, "InstanceNormalization": true, "PRelu": true, "Not": true,
}

// binaryOps broadcast their inputs.
var binaryOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Max": true, "Min": true,
	"Equal": true, "Less": true, "Greater": true, "And": true, "Or": true, "Where": true,
}

// infer fills in the shapes and types of node i's outputs that are still unknown.
func (x *index) infer(i int, n *onnxpb.NodeProto) {
	outs := n.GetOutput()
	if len(outs) == 0 {
		return
	}
	in := func(k int) *tensor {
		if k < len(n.GetInput()) {
			return x.tensors[n.GetInput()[k]]
		}
		return nil
	}
	set := func(k int, dt head.DType, shape []int64) {
		if k >= len(outs) || outs[k] == "" {
			return
		}
		t := x.tensors[outs[k]]
		switch {
		case t.shape == nil:
			t.shape = shape
		case len(shape) == len(t.shape):
			// A declared shape's unnamed dimensions (exporters name them "Expandx_dim_1")
			// take what inference knows, the batch dimension excepted.
			for i := 1; i < len(shape); i++ {
				if t.shape[i] < 0 && shape[i] >= 0 {
					t.shape[i] = shape[i]
				}
			}
		}
		if !t.declared && t.value == nil {
			t.dtype = dt
		}
	}
	a := in(0)
	dt := head.Float32
	if a != nil {
		dt = a.dtype
	}
	var sa []int64
	if a.known() {
		sa = slices.Clone(a.shape)
	}
	op := n.GetOpType()
	switch {
	case op == "Constant":
		return
	case unary[op]:
		if op == "Cast" {
			dt = dtypeOf(int32(attrInt(n, "to", 1)))
		}
		set(0, dt, sa)
	case binaryOps[op]:
		if op == "Where" {
			a = in(1)
			if a != nil {
				dt = a.dtype
			}
		}
		shape := sa
		for k := 1; k < len(n.GetInput()); k++ {
			shape = broadcast(shape, in(k))
		}
		switch op {
		case "Equal", "Less", "Greater", "And", "Or":
			dt = unsupported
		}
		set(0, dt, shape)
	case op == "Gemm":
		w := in(1)
		if !w.known() || len(w.shape) != 2 || sa == nil || len(sa) != 2 {
			set(0, dt, nil)
			return
		}
		rows := sa[0]
		if attrInt(n, "transA", 0) != 0 {
			rows = sa[1]
		}
		cols := w.shape[1]
		if attrInt(n, "transB", 0) != 0 {
			cols = w.shape[0]
		}
		set(0, dt, []int64{rows, cols})
	case op == "MatMul":
		w := in(1)
		if !w.known() || sa == nil || len(w.shape) < 2 || len(sa) < 1 {
			set(0, dt, nil)
			return
		}
		set(0, dt, append(sa[:len(sa)-1:len(sa)-1], w.shape[len(w.shape)-1]))
	case op == "Flatten":
		if sa == nil {
			set(0, dt, nil)
			return
		}
		ax := int(attrInt(n, "axis", 1))
		if ax < 0 {
			ax += len(sa)
		}
		set(0, dt, []int64{prod(sa[:min(ax, len(sa))]), prod(sa[min(ax, len(sa)):])})
	case op == "Squeeze" || op == "Unsqueeze":
		axes, ok := x.intsOf(n, "axes", 1)
		if sa == nil || (!ok && op == "Unsqueeze") {
			set(0, dt, nil)
			return
		}
		set(0, dt, squeeze(op, sa, axes, ok))
	case op == "Reshape":
		shape, ok := x.intsOf(n, "", 1)
		if !ok {
			set(0, dt, nil)
			return
		}
		set(0, dt, reshape(sa, shape))
	case op == "Concat":
		ax := attrInt(n, "axis", 0)
		var shape []int64
		for k := range n.GetInput() {
			t := in(k)
			if !t.known() || len(t.shape) == 0 {
				set(0, dt, nil)
				return
			}
			r := int64(len(t.shape))
			ax := (ax%r + r) % r
			if shape == nil {
				shape = slices.Clone(t.shape)
				continue
			}
			if shape[ax] < 0 || t.shape[ax] < 0 {
				shape[ax] = -1
			} else {
				shape[ax] += t.shape[ax]
			}
		}
		set(0, dt, shape)
	case op == "ArgMax" || op == "ArgMin" || strings.HasPrefix(op, "Reduce"):
		if op == "ArgMax" || op == "ArgMin" {
			dt = head.Int64
		}
		if sa == nil {
			set(0, dt, nil)
			return
		}
		var axes []int64
		if op == "ArgMax" || op == "ArgMin" {
			axes = []int64{attrInt(n, "axis", 0)}
		} else if v, ok := x.intsOf(n, "axes", 1); ok {
			axes = v
		}
		set(0, dt, reduce(sa, axes, attrInt(n, "keepdims", 1) != 0))
	case op == "Expand":
		shape, ok := x.intsOf(n, "", 1)
		if !ok || sa == nil {
			set(0, dt, sa)
			return
		}
		set(0, dt, broadcast(sa, &tensor{shape: shape}))
	case op == "Transpose":
		if sa == nil {
			set(0, dt, nil)
			return
		}
		perm := attr(n, "perm").GetInts()
		out := make([]int64, len(sa))
		for k := range out {
			p := len(sa) - 1 - k
			if len(perm) == len(sa) {
				p = int(perm[k])
			}
			out[k] = sa[p]
		}
		set(0, dt, out)
	case op == "LSTM" || op == "GRU" || op == "RNN":
		h := attrInt(n, "hidden_size", -1)
		dirs := int64(1)
		if string(attr(n, "direction").GetS()) == "bidirectional" {
			dirs = 2
		}
		if sa == nil || len(sa) != 3 || h < 0 {
			return
		}
		seq, batch := sa[0], sa[1]
		if attrInt(n, "layout", 0) != 0 {
			seq, batch = sa[1], sa[0]
		}
		set(0, dt, []int64{seq, dirs, batch, h})
		set(1, dt, []int64{dirs, batch, h})
		set(2, dt, []int64{dirs, batch, h})
	case op == "Shape":
		if sa != nil {
			set(0, head.Int64, []int64{int64(len(sa))})
		}
	case op == "Slice" || op == "Gather" || op == "Split" || op == "Multinomial":
		if op == "Multinomial" && sa != nil && len(sa) == 2 {
			set(0, dtypeOf(int32(attrInt(n, "dtype", int64(onnxpb.TensorProto_INT32)))), []int64{sa[0], attrInt(n, "sample_size", 1)})
		}
	}
}

func prod(s []int64) int64 {
	p := int64(1)
	for _, d := range s {
		if d < 0 {
			return -1
		}
		p *= d
	}
	return p
}

// broadcast is numpy's broadcast of shape a with tensor b's shape; nil when either is unknown.
func broadcast(a []int64, b *tensor) []int64 {
	if a == nil || !b.known() {
		return nil
	}
	s := b.shape
	n := max(len(a), len(s))
	out := make([]int64, n)
	for k := range n {
		da, db := int64(1), int64(1)
		if j := k - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := k - (n - len(s)); j >= 0 {
			db = s[j]
		}
		switch {
		case da == 1:
			out[k] = db
		case db == 1:
			out[k] = da
		case da < 0 || db < 0:
			out[k] = max(da, db)
		default:
			out[k] = da
		}
	}
	return out
}

func squeeze(op string, s, axes []int64, haveAxes bool) []int64 {
	if op == "Squeeze" {
		out := []int64{}
		for k, d := range s {
			drop := false
			if !haveAxes {
				drop = d == 1
			}
			for _, a := range axes {
				if (a+int64(len(s)))%int64(len(s)) == int64(k) {
					drop = true
				}
			}
			if !drop {
				out = append(out, d)
			}
		}
		return out
	}
	r := int64(len(s) + len(axes))
	out := make([]int64, 0, r)
	add := map[int64]bool{}
	for _, a := range axes {
		add[(a+r)%r] = true
	}
	j := 0
	for k := range r {
		if add[k] {
			out = append(out, 1)
		} else if j < len(s) {
			out = append(out, s[j])
			j++
		}
	}
	return out
}

func reshape(in, shape []int64) []int64 {
	out := slices.Clone(shape)
	infer := -1
	for k, d := range out {
		switch {
		case d == 0 && in != nil && k < len(in):
			out[k] = in[k]
		case d == 0:
			out[k] = -1
		case d == -1:
			infer = k
		}
	}
	if infer >= 0 {
		total, rest := prod(in), int64(1)
		for k, d := range out {
			if k != infer {
				if d < 0 {
					rest = -1
					break
				}
				rest *= d
			}
		}
		out[infer] = -1
		if total > 0 && rest > 0 && total%rest == 0 {
			out[infer] = total / rest
		}
	}
	return out
}

func reduce(s, axes []int64, keep bool) []int64 {
	r := int64(len(s))
	drop := map[int64]bool{}
	for _, a := range axes {
		drop[(a+r)%r] = true
	}
	all := len(axes) == 0
	out := []int64{}
	for k, d := range s {
		if all || drop[int64(k)] {
			if keep {
				out = append(out, 1)
			}
			continue
		}
		out = append(out, d)
	}
	return out
}

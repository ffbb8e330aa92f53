package edit

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/internal/names"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// parse reads a serialized ONNX model.
func parse(data []byte) (*onnxpb.ModelProto, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: the model is empty (0 bytes)", onnx.ErrModel)
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		return nil, fmt.Errorf("%w: not a readable ONNX model: %v", onnx.ErrModel, err)
	}
	if mp.GetGraph() == nil {
		return nil, fmt.Errorf("%w: not an ONNX model (no graph)", onnx.ErrModel)
	}
	if opset(&mp) == 0 {
		return nil, fmt.Errorf("%w: the model imports no version of the default ONNX operator set", onnx.ErrModel)
	}
	return &mp, nil
}

func marshal(m *onnxpb.ModelProto) ([]byte, error) {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("edit: writing the model: %w", err)
	}
	return data, nil
}

// opset is the version of the default operator set the model imports (0 when none).
func opset(m *onnxpb.ModelProto) int64 {
	var v int64
	for _, o := range m.GetOpsetImport() {
		if d := o.GetDomain(); d == "" || d == "ai.onnx" {
			v = o.GetVersion()
		}
	}
	return v
}

// graphIndex is a read-only index over a graph.
type graphIndex struct {
	g      *onnxpb.GraphProto
	opset  int64
	inits  map[string]*onnxpb.TensorProto
	inputs []*onnxpb.ValueInfoProto // graph inputs that no initializer backs
	// computed holds every name a node outputs, in node order.
	computed []string
	producer map[string]*onnxpb.NodeProto
	// uses counts how often a name is read: by node inputs (subgraphs included) and graph outputs.
	uses map[string]int
	// names holds every tensor and node name, for making fresh ones.
	names map[string]bool
}

func newIndex(m *onnxpb.ModelProto) *graphIndex {
	g := m.GetGraph()
	ix := &graphIndex{
		g:        g,
		opset:    opset(m),
		inits:    map[string]*onnxpb.TensorProto{},
		producer: map[string]*onnxpb.NodeProto{},
		uses:     map[string]int{},
		names:    map[string]bool{},
	}
	for _, t := range g.GetInitializer() {
		ix.inits[t.GetName()] = t
		ix.names[t.GetName()] = true
	}
	for _, vi := range g.GetInput() {
		ix.names[vi.GetName()] = true
		if _, ok := ix.inits[vi.GetName()]; !ok {
			ix.inputs = append(ix.inputs, vi)
		}
	}
	for _, vi := range g.GetOutput() {
		ix.uses[vi.GetName()]++
	}
	for _, n := range g.GetNode() {
		ix.names[n.GetName()] = true
		for _, out := range n.GetOutput() {
			if out == "" || ix.names[out] {
				continue
			}
			ix.names[out] = true
			ix.producer[out] = n
			ix.computed = append(ix.computed, out)
		}
	}
	countUses(g, ix.uses)
	return ix
}

// countUses counts the node inputs of g and its subgraphs.
func countUses(g *onnxpb.GraphProto, uses map[string]int) {
	for _, n := range g.GetNode() {
		for _, in := range n.GetInput() {
			if in != "" {
				uses[in]++
			}
		}
		for _, a := range n.GetAttribute() {
			if a.GetG() != nil {
				countUses(a.GetG(), uses)
			}
			for _, sg := range a.GetGraphs() {
				countUses(sg, uses)
			}
		}
	}
}

// fresh returns a name not used in the graph, starting from base, and reserves it.
func (ix *graphIndex) fresh(base string) string {
	name := base
	for k := 1; ix.names[name]; k++ {
		name = base + "_" + strconv.Itoa(k)
	}
	ix.names[name] = true
	return name
}

// nodeName names a node for messages: its name, else its first output.
func nodeName(n *onnxpb.NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	if len(n.GetOutput()) > 0 {
		return n.GetOutput()[0]
	}
	return "(unnamed)"
}

func nodeRef(n *onnxpb.NodeProto) string {
	return fmt.Sprintf("%s %q", n.GetOpType(), nodeName(n))
}

// attr and attrInt are onnxpb's lookups, under the names this package's code uses.
func attr(n *onnxpb.NodeProto, name string) *onnxpb.AttributeProto { return n.Attr(name) }

func attrInt(n *onnxpb.NodeProto, name string, def int64) int64 { return n.AttrInt(name, def) }

func input(n *onnxpb.NodeProto, i int) string {
	if i < len(n.GetInput()) {
		return n.GetInput()[i]
	}
	return ""
}

// maxConstElems bounds the integer constants read by value (shapes, axes, indices).
const maxConstElems = 1 << 12

// intsOf decodes a small integer tensor (int64, int32, int16, int8, uint8, uint16, bool).
func intsOf(t *onnxpb.TensorProto) ([]int64, bool) {
	if t == nil || t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(t.GetExternalData()) > 0 || t.GetSegment() != nil {
		return nil, false
	}
	n := 1
	for _, d := range t.GetDims() {
		if d < 0 || d > maxConstElems {
			return nil, false
		}
		n *= int(d)
		if n > maxConstElems {
			return nil, false
		}
	}
	raw := t.GetRawData()
	out := make([]int64, n)
	switch dt := onnxpb.TensorProto_DataType(t.GetDataType()); dt {
	case onnxpb.TensorProto_INT64:
		if raw == nil {
			if len(t.GetInt64Data()) != n {
				return nil, false
			}
			copy(out, t.GetInt64Data())
			return out, true
		}
		if len(raw) != 8*n {
			return nil, false
		}
		for k := range out {
			out[k] = int64(binary.LittleEndian.Uint64(raw[8*k:]))
		}
	case onnxpb.TensorProto_INT32, onnxpb.TensorProto_INT16, onnxpb.TensorProto_INT8,
		onnxpb.TensorProto_UINT8, onnxpb.TensorProto_UINT16, onnxpb.TensorProto_BOOL:
		if raw == nil {
			if len(t.GetInt32Data()) != n {
				return nil, false
			}
			for k, v := range t.GetInt32Data() {
				out[k] = int64(v)
			}
			return out, true
		}
		width := map[onnxpb.TensorProto_DataType]int{onnxpb.TensorProto_INT32: 4, onnxpb.TensorProto_INT16: 2, onnxpb.TensorProto_UINT16: 2}[dt]
		if width == 0 {
			width = 1
		}
		if len(raw) != width*n {
			return nil, false
		}
		for k := range out {
			switch dt {
			case onnxpb.TensorProto_INT32:
				out[k] = int64(int32(binary.LittleEndian.Uint32(raw[4*k:])))
			case onnxpb.TensorProto_INT16:
				out[k] = int64(int16(binary.LittleEndian.Uint16(raw[2*k:])))
			case onnxpb.TensorProto_UINT16:
				out[k] = int64(binary.LittleEndian.Uint16(raw[2*k:]))
			case onnxpb.TensorProto_INT8:
				out[k] = int64(int8(raw[k]))
			default:
				out[k] = int64(raw[k])
			}
		}
	default:
		return nil, false
	}
	return out, true
}

// intTensor makes a tensor of the given integer element type (int64 or int32) holding vals.
func intTensor(name string, dt int32, dims []int64, vals []int64) *onnxpb.TensorProto {
	t := &onnxpb.TensorProto{Name: proto.String(name), Dims: slices.Clone(dims), DataType: proto.Int32(dt)}
	if dt == int32(onnxpb.TensorProto_INT32) {
		t.RawData = make([]byte, 4*len(vals))
		for k, v := range vals {
			binary.LittleEndian.PutUint32(t.RawData[4*k:], uint32(int32(v)))
		}
		return t
	}
	t.DataType = proto.Int32(int32(onnxpb.TensorProto_INT64))
	t.RawData = make([]byte, 8*len(vals))
	for k, v := range vals {
		binary.LittleEndian.PutUint64(t.RawData[8*k:], uint64(v))
	}
	return t
}

// constValue returns the tensor a Constant node holds (onnxpb's ConstantTensor), or nil.
func constValue(n *onnxpb.NodeProto) *onnxpb.TensorProto { return n.ConstantTensor() }

// closest returns up to three of candidates nearest to want (names.Nearest).
func closest(want string, candidates []string) []string {
	return names.Nearest(want, candidates, 3)
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for k, n := range names {
		q[k] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

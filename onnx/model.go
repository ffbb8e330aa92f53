package onnx

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/towerrl/towerrl/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// maxGraphDepth bounds how deeply subgraphs (the bodies of If, Loop, Scan) may nest.
const maxGraphDepth = 64

// Model is a serialized ONNX model parsed and checked once ([Parse]): its bytes and its
// message, handed on to whatever reads the model next (sessions, package onnx/edit, package
// bind) so that none of them parses or checks the same bytes again. It is immutable and safe
// for concurrent use: do not modify its bytes or its message (proto.Clone the message to edit
// it, and Parse or [FromProto] the result).
type Model struct {
	data []byte
	pb   *onnxpb.ModelProto
}

// Parse parses a serialized model and refuses, with an [ErrModel] error, what is not a
// plausible ONNX ModelProto (see New). The bytes are kept, not copied.
func Parse(data []byte) (*Model, error) {
	pb, err := checkModel(data)
	if err != nil {
		return nil, err
	}
	return &Model{data: data, pb: pb}, nil
}

// FromProto serializes m, a message the caller built or edited and no longer modifies, and
// checks it as Parse does.
func FromProto(m *onnxpb.ModelProto) (*Model, error) {
	data, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: writing the model: %v", ErrModel, err)
	}
	if err := checkParsed(m, data); err != nil {
		return nil, err
	}
	return &Model{data: data, pb: m}, nil
}

// Bytes is the serialized model (shared: do not modify it).
func (m *Model) Bytes() []byte { return m.data }

// Proto is the parsed model (shared: do not modify it).
func (m *Model) Proto() *onnxpb.ModelProto { return m.pb }

// Metadata is the model's metadata_props as a new map (a later duplicate key wins).
func (m *Model) Metadata() map[string]string { return metadata(m.pb) }

// checkModel parses a serialized model with the Go protobuf types and refuses what is not a
// plausible ONNX ModelProto before ONNX Runtime sees the bytes: no IR version, no graph, no
// operator set, a graph without outputs, nodes without an operator, and declared shapes or
// initializers whose dimensions are negative, overflow a 64-bit size, or disagree with the
// data they hold. It returns the parsed model.
func checkModel(data []byte) (*onnxpb.ModelProto, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: the model is empty (0 bytes)", ErrModel)
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%w: not a readable ONNX model (%d bytes that do not parse as an ONNX ModelProto: %v)", ErrModel, len(data), err)
	}
	if err := checkParsed(m, data); err != nil {
		return nil, err
	}
	return m, nil
}

// checkParsed is checkModel's check of the parsed message m of data.
func checkParsed(m *onnxpb.ModelProto, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: the model is empty (0 bytes)", ErrModel)
	}
	if m.GetIrVersion() <= 0 {
		return fmt.Errorf("%w: not a readable ONNX model: it declares no IR version (ir_version %d); is the file an ONNX model?", ErrModel, m.GetIrVersion())
	}
	if m.GetGraph() == nil {
		return fmt.Errorf("%w: not a readable ONNX model: it has no graph", ErrModel)
	}
	if len(m.GetOpsetImport()) == 0 {
		return fmt.Errorf("%w: the model imports no operator set (opset_import is empty); re-export it naming an opset", ErrModel)
	}
	for _, o := range m.GetOpsetImport() {
		if o.GetVersion() <= 0 {
			return fmt.Errorf("%w: the model imports operator set %q at version %d", ErrModel, o.GetDomain(), o.GetVersion())
		}
	}
	if len(m.GetGraph().GetOutput()) == 0 {
		return fmt.Errorf("%w: the model's graph declares no outputs", ErrModel)
	}
	return checkGraph(m.GetGraph(), 0)
}

// checkGraph checks one graph and the subgraphs its nodes' attributes hold.
func checkGraph(g *onnxpb.GraphProto, depth int) error {
	if depth > maxGraphDepth {
		return fmt.Errorf("%w: subgraphs nest more than %d deep", ErrModel, maxGraphDepth)
	}
	for _, vis := range [][]*onnxpb.ValueInfoProto{g.GetInput(), g.GetOutput(), g.GetValueInfo()} {
		for _, vi := range vis {
			if err := checkDeclared(vi); err != nil {
				return err
			}
		}
	}
	for _, t := range g.GetInitializer() {
		if err := checkTensor(t, "initializer"); err != nil {
			return err
		}
	}
	for i, n := range g.GetNode() {
		if n.GetOpType() == "" {
			return fmt.Errorf("%w: node %d (%q) has no operator type", ErrModel, i, n.GetName())
		}
		for _, a := range n.GetAttribute() {
			what := fmt.Sprintf("attribute %q of node %q", a.GetName(), n.GetName())
			for _, t := range append([]*onnxpb.TensorProto{a.GetT()}, a.GetTensors()...) {
				if t != nil {
					if err := checkTensor(t, what); err != nil {
						return err
					}
				}
			}
			for _, sg := range append([]*onnxpb.GraphProto{a.GetG()}, a.GetGraphs()...) {
				if sg != nil {
					if err := checkGraph(sg, depth+1); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// checkDeclared refuses a declared tensor shape with a dimension below -1 (some exporters
// write -1 for a dynamic dimension) or whose static dimensions multiply past int64.
func checkDeclared(vi *onnxpb.ValueInfoProto) error {
	shape := vi.GetType().GetTensorType().GetShape()
	n := int64(1)
	for k, d := range shape.GetDim() {
		v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue)
		if !ok {
			continue
		}
		if v.DimValue < -1 {
			return fmt.Errorf("%w: %q declares dimension %d as %d", ErrModel, vi.GetName(), k, v.DimValue)
		}
		if v.DimValue < 0 {
			continue
		}
		var ok2 bool
		if n, ok2 = mulSize(n, v.DimValue); !ok2 {
			return fmt.Errorf("%w: %q declares a shape whose static dimensions multiply past 2^63 (dimension %d is %d)",
				ErrModel, vi.GetName(), k, v.DimValue)
		}
	}
	return nil
}

// checkTensor refuses a stored tensor with negative dimensions, a size past int64, data kept
// outside the model, or raw data of the wrong length for its shape.
func checkTensor(t *onnxpb.TensorProto, what string) error {
	name := fmt.Sprintf("%s %q", what, t.GetName())
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(t.GetExternalData()) > 0 {
		return fmt.Errorf("%w: %s keeps its data in an external file, which towerrl does not load; save the model with its weights inside (onnx.save(model, path, save_as_external_data=False))",
			ErrModel, name)
	}
	n := int64(1)
	for k, d := range t.GetDims() {
		var ok bool
		if d < 0 {
			return fmt.Errorf("%w: %s has dimension %d of %d", ErrModel, name, k, d)
		}
		if n, ok = mulSize(n, d); !ok {
			return fmt.Errorf("%w: %s has dimensions %v, which multiply past 2^63", ErrModel, name, t.GetDims())
		}
	}
	size := storedSize(onnxpb.TensorProto_DataType(t.GetDataType()))
	if raw := t.GetRawData(); raw != nil && size > 0 {
		if want, ok := mulSize(n, size); !ok || int64(len(raw)) != want {
			return fmt.Errorf("%w: %s has shape %v of %v (%d elements, %d bytes each) but holds %d bytes of raw data",
				ErrModel, name, t.GetDims(), onnxpb.TensorProto_DataType(t.GetDataType()), n, size, len(raw))
		}
	}
	return nil
}

// storedSize is the raw_data size of one element of type dt, or 0 for types without a fixed
// size (strings, and types this check leaves to ONNX Runtime).
func storedSize(dt onnxpb.TensorProto_DataType) int64 {
	switch dt {
	case onnxpb.TensorProto_BOOL, onnxpb.TensorProto_INT8, onnxpb.TensorProto_UINT8:
		return 1
	case onnxpb.TensorProto_INT16, onnxpb.TensorProto_UINT16, onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16:
		return 2
	case onnxpb.TensorProto_FLOAT, onnxpb.TensorProto_INT32, onnxpb.TensorProto_UINT32:
		return 4
	case onnxpb.TensorProto_DOUBLE, onnxpb.TensorProto_INT64, onnxpb.TensorProto_UINT64, onnxpb.TensorProto_COMPLEX64:
		return 8
	case onnxpb.TensorProto_COMPLEX128:
		return 16
	}
	return 0
}

// metadata returns the model's metadata_props as a map (a later duplicate key wins, as in
// ONNX Runtime).
func metadata(m *onnxpb.ModelProto) map[string]string {
	meta := make(map[string]string, len(m.GetMetadataProps()))
	for _, p := range m.GetMetadataProps() {
		meta[p.GetKey()] = p.GetValue()
	}
	return meta
}

// mulSize multiplies two non-negative sizes; ok is false when the product passes
// math.MaxInt64.
func mulSize(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

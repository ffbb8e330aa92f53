package graph

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// VersionKey is the metadata key of the policy version ([WriteOptions.Version] sets it).
const VersionKey = "towerrl.version"

// WriteOptions tunes [Model.WriteBack]. The zero value changes nothing but the weights.
type WriteOptions struct {
	// Version, when not empty, becomes the value of the towerrl.version metadata entry (added
	// when the model has none). Default: metadata is kept as it is.
	Version string
	// BumpVersion adds one to an integer towerrl.version already present (ignored when
	// Version is set or the entry is absent or not an integer). Default false.
	BumpVersion bool
}

// WriteBack returns the original ONNX model with p's values as its weights: the graph, node
// and tensor names, opset imports, producer and metadata_props are kept, and only the
// initializers' data changes (written as little-endian raw_data, with the original dims and
// element type). A parameter made by the untie rule is written as an initializer named after
// the Identity's output, and that Identity node is dropped, so the written graph computes
// with untied weights and keeps every name the original had. p may be float32 or float64.
func (m *Model) WriteBack(p *Params, opts WriteOptions) ([]byte, error) {
	mp, err := m.WriteBackProto(p, opts)
	if err != nil {
		return nil, err
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(mp)
	if err != nil {
		return nil, fmt.Errorf("graph: writing the model: %w", err)
	}
	return data, nil
}

// WriteBackProto is [Model.WriteBack] returning the message instead of its bytes; the message
// is the caller's.
func (m *Model) WriteBackProto(p *Params, opts WriteOptions) (*onnxpb.ModelProto, error) {
	if err := m.checkParams(p); err != nil {
		return nil, err
	}
	out := proto.Clone(m.proto).(*onnxpb.ModelProto)
	g := out.GetGraph()
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = t
	}
	listsInits := false // IR < 4 lists every initializer among the graph inputs
	for _, vi := range g.GetInput() {
		if _, ok := inits[vi.GetName()]; ok {
			listsInits = true
		}
	}
	drop := map[string]bool{} // outputs of the untied Identity nodes
	for _, pa := range m.params {
		vals := floatsOf(p.vals[pa.name])
		if !pa.untied {
			t := inits[pa.name]
			t.RawData = encodeFloats(t.GetDataType(), vals)
			t.FloatData, t.DoubleData = nil, nil
			continue
		}
		src := inits[pa.init.GetName()]
		t := &onnxpb.TensorProto{
			Name:     proto.String(pa.name),
			Dims:     append([]int64(nil), src.GetDims()...),
			DataType: proto.Int32(src.GetDataType()),
			RawData:  encodeFloats(src.GetDataType(), vals),
		}
		g.Initializer = append(g.Initializer, t)
		drop[pa.name] = true
		if listsInits {
			g.Input = append(g.Input, tensorValueInfo(t))
		}
	}
	if len(drop) > 0 {
		kept := g.Node[:0]
		for _, n := range g.GetNode() {
			if n.GetOpType() == "Identity" && len(n.GetOutput()) == 1 && drop[n.GetOutput()[0]] {
				continue
			}
			kept = append(kept, n)
		}
		g.Node = kept
	}
	setVersion(out, opts)
	return out, nil
}

func tensorValueInfo(t *onnxpb.TensorProto) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range t.GetDims() {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{
			Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{
		Name: proto.String(t.GetName()),
		Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{
			ElemType: proto.Int32(t.GetDataType()), Shape: shape}}},
	}
}

func setVersion(m *onnxpb.ModelProto, opts WriteOptions) {
	var entry *onnxpb.StringStringEntryProto
	for _, kv := range m.GetMetadataProps() {
		if kv.GetKey() == VersionKey {
			entry = kv
		}
	}
	switch {
	case opts.Version != "" && entry != nil:
		entry.Value = proto.String(opts.Version)
	case opts.Version != "":
		m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{
			Key: proto.String(VersionKey), Value: proto.String(opts.Version)})
	case opts.BumpVersion && entry != nil:
		if v, err := strconv.ParseInt(entry.GetValue(), 10, 64); err == nil {
			entry.Value = proto.String(strconv.FormatInt(v+1, 10))
		}
	}
}

package edit

import (
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Element types (onnxpb.TensorProto_DataType values) used by the type propagation.
const (
	tUnknown = int32(onnxpb.TensorProto_UNDEFINED)
	tFloat   = int32(onnxpb.TensorProto_FLOAT)
	tUint8   = int32(onnxpb.TensorProto_UINT8)
	tInt32   = int32(onnxpb.TensorProto_INT32)
	tInt64   = int32(onnxpb.TensorProto_INT64)
	tBool    = int32(onnxpb.TensorProto_BOOL)
	tDouble  = int32(onnxpb.TensorProto_DOUBLE)
)

// sessionDType maps an ONNX element type onto the DType a Session reads (Unsupported for others).
func sessionDType(t int32) onnx.DType {
	switch t {
	case tFloat:
		return onnx.Float32
	case tDouble:
		return onnx.Float64
	case tInt32:
		return onnx.Int32
	case tInt64:
		return onnx.Int64
	case tUint8:
		return onnx.Uint8
	}
	return onnx.Unsupported
}

// Ops whose outputs all have a fixed element type.
var fixedTypeOps = map[string]int32{
	"Shape": tInt64, "Size": tInt64, "ArgMax": tInt64, "ArgMin": tInt64, "NonZero": tInt64,
	"NonMaxSuppression": tInt64, "Equal": tBool, "Less": tBool, "Greater": tBool,
	"LessOrEqual": tBool, "GreaterOrEqual": tBool, "And": tBool, "Or": tBool, "Xor": tBool,
	"Not": tBool, "IsNaN": tBool, "IsInf": tBool, "RegexFullMatch": tBool,
	"MatMulInteger": tInt32, "ConvInteger": tInt32, "TfIdfVectorizer": tFloat, "ImageDecoder": tUint8,
}

// Ops the propagation does not follow: control flow, sequences, optionals, strings.
var untypedOps = map[string]bool{
	"If": true, "Loop": true, "Scan": true, "SequenceAt": true, "SequenceConstruct": true,
	"SequenceEmpty": true, "SequenceErase": true, "SequenceInsert": true, "SequenceLength": true,
	"SequenceMap": true, "SplitToSequence": true, "ConcatFromSequence": true, "Optional": true,
	"OptionalGetElement": true, "OptionalHasElement": true, "StringNormalizer": true,
	"StringSplit": true, "StringConcat": true, "BlackmanWindow": true, "HannWindow": true,
	"HammingWindow": true, "MelWeightMatrix": true, "Multinomial": true,
}

// tensorType returns the element type a ValueInfoProto declares, or tUnknown.
func tensorType(vi *onnxpb.ValueInfoProto) int32 {
	if tt := vi.GetType().GetTensorType(); tt != nil {
		return tt.GetElemType()
	}
	return tUnknown
}

// inferTypes returns the element type of every tensor of the graph it can tell: declared ones
// (inputs, initializers, value_info, outputs) and, for the rest, the type each node's operator
// gives its outputs. Tensors it cannot tell are absent.
func inferTypes(ix *graphIndex) map[string]int32 {
	types := map[string]int32{}
	declared := func(vi *onnxpb.ValueInfoProto) {
		if t := tensorType(vi); t != tUnknown {
			types[vi.GetName()] = t
		}
	}
	for _, t := range ix.g.GetInitializer() {
		types[t.GetName()] = t.GetDataType()
	}
	for _, vi := range ix.g.GetInput() {
		declared(vi)
	}
	for _, vi := range ix.g.GetValueInfo() {
		declared(vi)
	}
	for _, vi := range ix.g.GetOutput() {
		declared(vi)
	}
	for _, n := range topoOrder(ix) {
		outs := opTypes(n, types)
		for k, out := range n.GetOutput() {
			if _, ok := types[out]; ok || out == "" || k >= len(outs) || outs[k] == tUnknown {
				continue
			}
			types[out] = outs[k]
		}
	}
	return types
}

// opTypes returns the element types of n's outputs given its inputs' (tUnknown where unknown).
func opTypes(n *onnxpb.NodeProto, types map[string]int32) []int32 {
	outs := make([]int32, len(n.GetOutput()))
	if d := n.GetDomain(); d != "" && d != "ai.onnx" {
		return outs
	}
	in := func(i int) int32 {
		if name := input(n, i); name != "" {
			return types[name]
		}
		return tUnknown
	}
	all := func(t int32) []int32 {
		for k := range outs {
			outs[k] = t
		}
		return outs
	}
	dtypeAttr := func(def int32) int32 {
		if a := attr(n, "dtype"); a != nil {
			return int32(a.GetI())
		}
		return def
	}
	op := n.GetOpType()
	if t, ok := fixedTypeOps[op]; ok {
		return all(t)
	}
	if untypedOps[op] || len(outs) == 0 {
		return outs
	}
	switch op {
	case "Constant":
		if t := constValue(n); t != nil {
			outs[0] = t.GetDataType()
		}
		return outs
	case "Cast":
		return all(int32(attrInt(n, "to", 0)))
	case "CastLike":
		return all(in(1))
	case "ConstantOfShape":
		if a := attr(n, "value"); a != nil && a.GetT() != nil {
			return all(a.GetT().GetDataType())
		}
		return all(tFloat)
	case "RandomNormal", "RandomUniform":
		return all(dtypeAttr(tFloat))
	case "RandomNormalLike", "RandomUniformLike", "EyeLike", "Bernoulli":
		return all(dtypeAttr(in(0)))
	case "Where":
		return all(in(1))
	case "OneHot":
		return all(in(2))
	case "QuantizeLinear":
		if t := in(2); t != tUnknown {
			return all(t)
		}
		return all(int32(attrInt(n, "output_dtype", int64(tUint8))))
	case "DequantizeLinear":
		return all(in(1))
	case "DynamicQuantizeLinear":
		copy(outs, []int32{tUint8, tFloat, tUint8})
		return outs
	case "QLinearConv", "QLinearMatMul":
		return all(in(7))
	case "TopK", "MaxPool":
		outs[0] = in(0)
		for k := 1; k < len(outs); k++ {
			outs[k] = tInt64
		}
		return outs
	case "Unique":
		all(tInt64)
		outs[0] = in(0)
		return outs
	case "Dropout":
		all(tBool)
		outs[0] = in(0)
		return outs
	case "LayerNormalization":
		all(int32(attrInt(n, "stash_type", int64(tFloat))))
		outs[0] = in(0)
		return outs
	}
	// Every other standard operator gives its outputs the type of its first input.
	return all(in(0))
}

// topoOrder returns the graph's nodes in an order where every node comes after the producers
// of its inputs (the graph's own order when it already is one). Nodes in a cycle or reading
// undefined names keep their relative order at the end.
func topoOrder(ix *graphIndex) []*onnxpb.NodeProto {
	nodes := ix.g.GetNode()
	done := make(map[*onnxpb.NodeProto]bool, len(nodes))
	ready := func(n *onnxpb.NodeProto) bool {
		for _, in := range n.GetInput() {
			if p := ix.producer[in]; p != nil && p != n && !done[p] {
				return false
			}
		}
		return true
	}
	order := make([]*onnxpb.NodeProto, 0, len(nodes))
	for progress := true; progress && len(order) < len(nodes); {
		progress = false
		for _, n := range nodes {
			if !done[n] && ready(n) {
				done[n] = true
				order = append(order, n)
				progress = true
			}
		}
	}
	for _, n := range nodes {
		if !done[n] {
			order = append(order, n)
		}
	}
	return order
}

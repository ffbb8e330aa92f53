package onnxpb

// Attr returns the node's attribute called name, or nil. (Hand-written beside the generated
// code: the lookups every reader of graphs makes.)
func (x *NodeProto) Attr(name string) *AttributeProto {
	for _, a := range x.GetAttribute() {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// AttrInt returns the node's integer attribute called name, or def when it has none.
func (x *NodeProto) AttrInt(name string, def int64) int64 {
	if a := x.Attr(name); a != nil {
		return a.GetI()
	}
	return def
}

// ConstantTensor is the tensor a Constant node holds: its "value" attribute, or a 1-element
// (value_float, value_int) or 1-D (value_floats, value_ints) tensor made from the others, with
// the values in the typed fields (FloatData, Int64Data). nil when the node holds none of them
// (a sparse_value, or a string).
func (x *NodeProto) ConstantTensor() *TensorProto {
	f32, i64 := int32(TensorProto_FLOAT), int32(TensorProto_INT64)
	for _, a := range x.GetAttribute() {
		switch a.GetName() {
		case "value":
			return a.GetT()
		case "value_float":
			return &TensorProto{DataType: &f32, FloatData: []float32{a.GetF()}}
		case "value_floats":
			return &TensorProto{DataType: &f32, Dims: []int64{int64(len(a.GetFloats()))}, FloatData: append([]float32(nil), a.GetFloats()...)}
		case "value_int":
			return &TensorProto{DataType: &i64, Int64Data: []int64{a.GetI()}}
		case "value_ints":
			return &TensorProto{DataType: &i64, Dims: []int64{int64(len(a.GetInts()))}, Int64Data: append([]int64(nil), a.GetInts()...)}
		}
	}
	return nil
}

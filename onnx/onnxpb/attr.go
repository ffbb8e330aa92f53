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

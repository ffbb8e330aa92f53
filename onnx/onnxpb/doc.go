// Package onnxpb holds the ONNX protobuf messages (ModelProto, GraphProto, NodeProto,
// TensorProto, ...) generated from ONNX 1.12's onnx-ml.proto with protoc-gen-go. Use
// google.golang.org/protobuf/proto to Marshal and Unmarshal them. The proto package is
// towerrl.onnx; the wire format is ONNX's.
//
// Regenerate with `go generate ./onnx/onnxpb` (needs protoc); a test fails when the .proto
// changed without regeneration.
package onnxpb

//go:generate bash ../../scripts/gen-onnxpb.sh

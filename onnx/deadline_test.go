package onnx

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// loopProto is out = obs passed through a Loop of trip count trips (none when trips < 0: the
// loop runs while its condition, always true, holds), whose body adds nothing: a model that
// runs for ever, as a hostile or broken policy may.
func loopProto(trips int64) *onnxpb.ModelProto {
	scalar := func(name string, dt onnxpb.TensorProto_DataType) *onnxpb.ValueInfoProto {
		return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
			TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt)), Shape: &onnxpb.TensorShapeProto{}}}}}
	}
	body := &onnxpb.GraphProto{
		Name:   proto.String("body"),
		Input:  []*onnxpb.ValueInfoProto{scalar("i", onnxpb.TensorProto_INT64), scalar("cond_in", onnxpb.TensorProto_BOOL), valueInfo("v_in", -1, 3)},
		Output: []*onnxpb.ValueInfoProto{scalar("cond_out", onnxpb.TensorProto_BOOL), valueInfo("v_out", -1, 3)},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Identity"), Input: []string{"cond_in"}, Output: []string{"cond_out"}, Name: proto.String("c")},
			{OpType: proto.String("Identity"), Input: []string{"v_in"}, Output: []string{"v_out"}, Name: proto.String("v")},
		},
	}
	m := identityProto(-1, 3)
	g := m.Graph
	g.Initializer = []*onnxpb.TensorProto{{Name: proto.String("cond"), DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Int32Data: []int32{1}}}
	trip := ""
	if trips >= 0 {
		trip = "trips"
		g.Initializer = append(g.Initializer, &onnxpb.TensorProto{Name: proto.String("trips"), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{trips}})
	}
	g.Node = []*onnxpb.NodeProto{{OpType: proto.String("Loop"), Input: []string{trip, "cond", "obs"}, Output: []string{"out"}, Name: proto.String("loop"),
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("body"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: body}}}}
	return m
}

// TestProbeDeadline: a model whose Loop runs 10^15 times, or with no trip count, hung for
// good in New (the probe that learns the output shapes): infer, eval and batcher never
// returned. The probe now ends at Config.SetupTimeout with ErrTimeout, and when New's ctx
// ends; a Loop of 3 trips is a model like any other.
func TestProbeDeadline(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, marshal(t, loopProto(3)), Config{MaxBatch: 2})
	if err != nil {
		t.Fatalf("a Loop of 3 trips: %v", err)
	}
	s.Close()
	for _, trips := range []int64{1_000_000_000_000_000, -1} {
		start := time.Now()
		_, err := New(ctx, marshal(t, loopProto(trips)), Config{MaxBatch: 2, SetupTimeout: 500 * time.Millisecond})
		took := time.Since(start)
		wantErr(t, err, ErrTimeout, "zero batch", "500ms", "SetupTimeout")
		if took > 5*time.Second {
			t.Errorf("trips %d: New returned after %v, its deadline was 500ms", trips, took)
		}
	}
	cut, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = New(cut, marshal(t, loopProto(-1)), Config{MaxBatch: 2})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("a cancelled New: %v after %v", err, time.Since(start))
	}
}

package remote

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// reweighted is model with every float32 weight of rank ≥ 1 scaled by k and the version
// metadata set to v: the same graph with other weights, as the learner's next version.
func reweighted(t *testing.T, model []byte, k float32, v string) []byte {
	t.Helper()
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(model, m); err != nil {
		t.Fatal(err)
	}
	for _, init := range m.GetGraph().GetInitializer() {
		if onnxpb.TensorProto_DataType(init.GetDataType()) != onnxpb.TensorProto_FLOAT || len(init.GetDims()) == 0 {
			continue
		}
		if raw := init.GetRawData(); raw != nil {
			for i := 0; i+4 <= len(raw); i += 4 {
				binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(k*math.Float32frombits(binary.LittleEndian.Uint32(raw[i:]))))
			}
		}
		for i := range init.FloatData {
			init.FloatData[i] *= k
		}
	}
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String("towerrl.version"), Value: proto.String(v)})
	m.ModelVersion = proto.Int64(int64(len(v)) + 41) // as the learner's export sets it
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadWeights: the weights of a policy are its float32 initializers of rank ≥ 1 in
// graph order, as onnx.WeightValues reads them; another version of the same graph has the
// same layout and digest; another graph does not.
func TestReadWeights(t *testing.T) {
	model := readFile(t, policyV1)
	w, err := readWeights(model)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.names) == 0 || len(w.names) != len(w.sizes) {
		t.Fatalf("names %v sizes %v", w.names, w.sizes)
	}
	values, err := onnx.WeightValues(model, w.names)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(slices.Concat(values...), w.flat); diff != "" {
		t.Errorf("flat weights (-onnx.WeightValues +readWeights):\n%s", diff)
	}
	for i, v := range values {
		if len(v) != w.sizes[i] {
			t.Errorf("%s: %d values, size %d", w.names[i], len(v), w.sizes[i])
		}
	}
	next, err := readWeights(reweighted(t, model, 0.5, "7"))
	if err != nil {
		t.Fatal(err)
	}
	if !w.sameLayout(next) {
		t.Error("the same graph with other weights and another version has another layout")
	}
	for i := range w.flat {
		if next.flat[i] != 0.5*w.flat[i] {
			t.Fatalf("weight %d: %v, want %v", i, next.flat[i], 0.5*w.flat[i])
		}
	}
	other, err := readWeights(readFile(t, policyV2))
	if err != nil {
		t.Fatal(err)
	}
	if w.sameLayout(other) {
		t.Error("another graph has the same layout")
	}
	if _, err := readWeights([]byte("not onnx")); err == nil {
		t.Error("garbage read as a model")
	}
}

// TestSwapInPlace: a remote batcher's swap to a version that differs only in its weights
// copies them in place, and collects what a batcher built from that version collects; a
// swap to another graph builds new sessions.
func TestSwapInPlace(t *testing.T) {
	ctx := context.Background()
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		t.Fatal(err)
	}
	v1 := readFile(t, policyV1)
	v2 := reweighted(t, v1, 0.7, "2")
	cfg := batcher.Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 8, Workers: 2, Steps: 64, Seed: 5}

	ps := &policies{spec: spec, log: zap.NewNop()}
	first, err := ps.build(ctx, Policy{Version: 1, ONNX: v1}, ps.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ps.w == nil {
		t.Fatal("the towerrl policy's weights are not laid out for in-place swaps")
	}
	swapped := newBatcher(t, cfg, first)
	inPlace, err := ps.swap(ctx, swapped, Policy{Version: 2, ONNX: v2})
	if err != nil || !inPlace {
		t.Fatalf("swap to version 2: in place %v, %v", inPlace, err)
	}
	got, err := swapped.Collect(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := bind.New(ctx, v2, 2, spec, bind.Config{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := newBatcher(t, cfg, direct).Collect(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(meaningful(want), meaningful(got), cmpopts.EquateApprox(0, 1e-5)); diff != "" {
		t.Errorf("collected after the in-place swap (-built from version 2 +swapped in place):\n%s", diff)
	}

	// Another graph: new sessions.
	inPlace, err = ps.swap(ctx, swapped, Policy{Version: 3, ONNX: readFile(t, policyV2)})
	if err != nil || inPlace {
		t.Fatalf("swap to another graph: in place %v, %v", inPlace, err)
	}
	r, err := swapped.Collect(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version[0] != 3 {
		t.Errorf("collected with version %d after the swap to 3", r.Version[0])
	}
}

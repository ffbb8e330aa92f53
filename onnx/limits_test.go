package onnx

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// dim is a declared dimension: a size, or -1 for a dynamic one named "batch".
func dim(d int64) *onnxpb.TensorShapeProto_Dimension {
	if d < 0 {
		return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}}
	}
	return &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
}

func valueInfo(name string, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, dim(d))
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}}
}

// identityProto is a one-node model, out = Identity(obs), both float32 of the given declared
// shape (-1: dynamic). Tests break it in one place to make the malformed models users meet.
func identityProto(dims ...int64) *onnxpb.ModelProto {
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(13)}},
		Graph: &onnxpb.GraphProto{
			Name:   proto.String("identity"),
			Input:  []*onnxpb.ValueInfoProto{valueInfo("obs", dims...)},
			Output: []*onnxpb.ValueInfoProto{valueInfo("out", dims...)},
			Node:   []*onnxpb.NodeProto{{OpType: proto.String("Identity"), Input: []string{"obs"}, Output: []string{"out"}, Name: proto.String("id")}},
		},
	}
}

func marshal(t testing.TB, m *onnxpb.ModelProto) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantErr fails unless err wraps is and mentions every string in want.
func wantErr(t *testing.T, err, is error, want ...string) {
	t.Helper()
	if !errors.Is(err, is) {
		t.Fatalf("error %v, want errors.Is %v", err, is)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %s", err, w)
		}
	}
}

// TestIdentityModelRuns: the hand-built fixture is a working model, so the refusals below are
// about the one thing each case breaks.
func TestIdentityModelRuns(t *testing.T) {
	s, err := New(context.Background(), marshal(t, identityProto(-1, 3)), Config{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := Feed(s, 0, []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(n); err != nil {
		t.Fatal(err)
	}
	out, _ := Output[float32](s, 0)
	if got := out[:6]; got[0] != 1 || got[5] != 6 {
		t.Fatalf("identity gave %v", got)
	}
}

// TestHugeDeclaredShapes: a model declaring an observation dimension or a fixed batch of 2^40
// (a fatal out-of-memory crash before), rows past 2^63 elements, or a MaxBatch whose buffers
// cannot fit is refused with ErrTooLarge naming the tensor and the value, before any buffer
// is allocated.
func TestHugeDeclaredShapes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dims []int64
		cfg  Config
		want []string
	}{
		{"observation dim 2^40", []int64{-1, 1 << 40}, Config{}, []string{`input "obs"`, "batch × [1099511627776]", "4.0 PiB", "batch of 1024 (Config.MaxBatch)", "memory is available"}},
		{"fixed batch 2^40", []int64{1 << 40, 4}, Config{}, []string{`input "obs"`, "16.0 TiB", "batch of 1099511627776 the model fixes", "re-export"}},
		{"rows past 2^63 elements", []int64{-1, -1, -1}, Config{Shapes: map[string][]int64{"obs": {-1, 1 << 32, 1 << 32}}},
			[]string{`input "obs"`, "[4294967296 4294967296]", "2^63"}},
		{"bytes past 2^63", []int64{-1, 1 << 31, 1 << 31}, Config{MaxBatch: 1}, []string{`input "obs"`, "more than 2^63 bytes"}},
		{"MaxBatch 2^62", []int64{-1, 4}, Config{MaxBatch: 1 << 62}, []string{`input "obs"`, "more than 2^63 bytes", "4611686018427387904 (Config.MaxBatch)"}},
		{"MaxBatch 2^40", []int64{-1, 4}, Config{MaxBatch: 1 << 40}, []string{`input "obs"`, "16.0 TiB", "1099511627776 (Config.MaxBatch)", "lower Config.MaxBatch"}},
		{"MaxBatch MaxInt", []int64{-1, 4}, Config{MaxBatch: math.MaxInt}, []string{"more than 2^63 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(ctx, marshal(t, identityProto(tc.dims...)), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			wantErr(t, err, ErrTooLarge, tc.want...)
		})
	}
}

// TestMemoryLimit: a buffer that fits in no memory the process may use is refused, the limit
// being the Go memory limit when it is below MemAvailable: a fixed batch of 2^31 rows of 4
// float32 (32 GiB; it allocated 8.5 GB before failing), and an output buffer that only
// passes the limit once the inputs' are counted. The probe run on a batch of 2 is guarded
// too.
func TestMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(64 << 20))
	ctx := context.Background()
	_, err := New(ctx, marshal(t, identityProto(1<<31, 4)), Config{})
	wantErr(t, err, ErrTooLarge, `input "obs"`, "32.0 GiB", "batch of 2147483648 the model fixes", "64.0 MiB", "GOMEMLIMIT")

	// 20 MB rows: two fit as input, not with the output beside them.
	_, err = New(ctx, marshal(t, identityProto(-1, 5_000_000)), Config{MaxBatch: 2})
	wantErr(t, err, ErrTooLarge, `output "out"`, "38.1 MiB for a batch of 2", "with the 38.1 MiB the other buffers take")

	// 36 MB rows: MaxBatch 1 fits, the probe's batch of 2 does not.
	_, err = New(ctx, marshal(t, identityProto(-1, 9_000_000)), Config{MaxBatch: 1})
	wantErr(t, err, ErrTooLarge, `input "obs"`, "68.7 MiB", "for a batch of 2 that learns the output shapes")
}

// TestMemoryFigures: the figures the size checks use (package internal/bounded tests how
// they are read).
func TestMemoryFigures(t *testing.T) {
	if m := availableMemory(); m.avail <= 0 || m.source == "" {
		t.Errorf("availableMemory() = %+v", m)
	}
	for n, want := range map[int64]string{512: "512 B", 1536: "1.5 KiB", 4 << 40: "4.0 TiB", math.MaxInt64: "8.0 EiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestConfigValidation: thread counts outside -1 or 1..NumCPU, Config.Shapes naming an input
// the model lacks (ignored before) or contradicting its declared shape, and the other invalid
// fields are refused naming the field and the allowed values.
func TestConfigValidation(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(fixtures, "mlp_tanh.onnx")
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"intra -7", Config{IntraOpThreads: -7}, []string{"IntraOpThreads is -7", "want 1 to", "-1 to let ONNX Runtime choose"}},
		{"intra 1000", Config{IntraOpThreads: 1000}, []string{"IntraOpThreads is 1000", "want 1 to"}},
		{"inter -2", Config{InterOpThreads: -2}, []string{"InterOpThreads is -2"}},
		{"inter 1000", Config{InterOpThreads: 1000}, []string{"InterOpThreads is 1000"}},
		{"shapes unknown input", Config{Shapes: map[string][]int64{"observations": {-1, 4}}}, []string{`no input "observations"`, `its inputs are "obs"`, "Config.Shapes"}},
		{"shapes contradict", Config{Shapes: map[string][]int64{"obs": {-1, 5}}}, []string{`Config.Shapes["obs"] sets dimension 1 to 5; the model declares 4`}},
		{"shapes negative", Config{Shapes: map[string][]int64{"obs": {-1, -3}}}, []string{`Config.Shapes["obs"] dimension 1 is -3`}},
		{"shapes rank", Config{Shapes: map[string][]int64{"obs": {-1}}}, []string{`Config.Shapes["obs"] has rank 1`}},
		{"MaxBatch -1", Config{MaxBatch: -1}, []string{"MaxBatch is -1"}},
		{"provider", Config{Provider: "tpu"}, []string{`Provider "tpu"; choose cpu, cuda or auto`}},
		{"cuda option name", Config{CUDAOptions: map[string]string{"use_tf32=0": ""}}, []string{`Config.CUDAOptions has the name "use_tf32=0"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, path, tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			wantErr(t, err, ErrConfig, tc.want...)
		})
	}
	// -1 lets ONNX Runtime choose, and the session runs.
	s := open(t, "mlp_tanh", Config{IntraOpThreads: -1, InterOpThreads: -1, MaxBatch: 2})
	if err := s.Run(2); err != nil {
		t.Fatal(err)
	}
	if err := (Config{IntraOpThreads: 1000}).Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("Validate: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate of the zero Config: %v", err)
	}
}

// TestFeedRepeat: FeedRepeat fills a batch with the given rows repeated cyclically, and the
// outputs equal running the same rows tiled by hand through Feed.
func TestFeedRepeat(t *testing.T) {
	in := readNPY(t, filepath.Join(fixtures, "mlp_tanh.input.npy")) // 16 rows of 4
	a := open(t, "mlp_tanh", Config{MaxBatch: 40})
	b := open(t, "mlp_tanh", Config{MaxBatch: 40})
	for _, batch := range []int{1, 16, 23, 40} {
		n, err := FeedRepeat(a, 0, []int64{16, 4}, in.F32, batch)
		if err != nil || n != batch {
			t.Fatalf("batch %d: %d, %v", batch, n, err)
		}
		tiled := make([]float32, 0, batch*4)
		for r := range batch {
			tiled = append(tiled, in.F32[(r%16)*4:(r%16)*4+4]...)
		}
		if _, err := Feed(b, 0, []int64{int64(batch), 4}, tiled); err != nil {
			t.Fatal(err)
		}
		for _, s := range []*Session{a, b} {
			if err := s.Run(batch); err != nil {
				t.Fatal(err)
			}
		}
		for k := range 2 {
			got, _ := Output[float32](a, k)
			want, _ := Output[float32](b, k)
			for j := range batch * []int{2, 1}[k] {
				if got[j] != want[j] {
					t.Fatalf("batch %d output %d element %d: %v, by hand %v", batch, k, j, got[j], want[j])
				}
			}
		}
	}
	for _, tc := range []struct {
		batch int
		shape []int64
		data  int
		is    error
	}{
		{41, []int64{16, 4}, 64, ErrBatch},
		{0, []int64{16, 4}, 64, ErrBatch},
		{8, []int64{0, 4}, 0, ErrShape},
		{8, []int64{1 << 62, 4}, 64, ErrShape},
		{8, []int64{16, 3}, 48, ErrShape},
	} {
		if _, err := FeedRepeat(a, 0, tc.shape, make([]float32, tc.data), tc.batch); !errors.Is(err, tc.is) {
			t.Errorf("FeedRepeat(%v, batch %d): %v, want %v", tc.shape, tc.batch, err, tc.is)
		}
	}
}

// TestCheckModel: bytes that are not a plausible ONNX model are refused in Go, with an error
// saying what is missing or wrong, before ONNX Runtime sees them; the fixtures pass.
func TestCheckModel(t *testing.T) {
	for _, name := range []string{"mlp_tanh", "gaussian_relu", "nature_cnn", "matmul_opset17"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name+".onnx"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checkModel(b); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, tc := range []struct {
		name  string
		spoil func(m *onnxpb.ModelProto)
		want  string
	}{
		{"no IR version", func(m *onnxpb.ModelProto) { m.IrVersion = nil }, "declares no IR version"},
		{"no graph", func(m *onnxpb.ModelProto) { m.Graph = nil }, "it has no graph"},
		{"no opset", func(m *onnxpb.ModelProto) { m.OpsetImport = nil }, "imports no operator set"},
		{"opset 0", func(m *onnxpb.ModelProto) { m.OpsetImport[0].Version = proto.Int64(0) }, `operator set "" at version 0`},
		{"no outputs", func(m *onnxpb.ModelProto) { m.Graph.Output = nil }, "declares no outputs"},
		{"node without op", func(m *onnxpb.ModelProto) { m.Graph.Node[0].OpType = nil }, `node 0 ("id") has no operator type`},
		{"dim -5", func(m *onnxpb.ModelProto) {
			m.Graph.Input[0].Type.GetTensorType().Shape.Dim[1].Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: -5}
		}, `"obs" declares dimension 1 as -5`},
		{"dims past 2^63", func(m *onnxpb.ModelProto) { m.Graph.Output[0] = valueInfo("out", 1<<40, 1<<40) }, `"out" declares a shape whose static dimensions multiply past 2^63`},
		{"initializer dim -1", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = []*onnxpb.TensorProto{{Name: proto.String("w"), Dims: []int64{-1}, DataType: proto.Int32(1)}}
		}, `initializer "w" has dimension 0 of -1`},
		{"initializer past 2^63", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = []*onnxpb.TensorProto{{Name: proto.String("w"), Dims: []int64{1 << 32, 1 << 32}, DataType: proto.Int32(1)}}
		}, "multiply past 2^63"},
		{"raw data short", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = []*onnxpb.TensorProto{{Name: proto.String("w"), Dims: []int64{1 << 40}, DataType: proto.Int32(1), RawData: make([]byte, 8)}}
		}, `initializer "w" has shape [1099511627776] of FLOAT (1099511627776 elements, 4 bytes each) but holds 8 bytes`},
		{"external data", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = []*onnxpb.TensorProto{{Name: proto.String("w"), Dims: []int64{4}, DataType: proto.Int32(1),
				DataLocation: onnxpb.TensorProto_EXTERNAL.Enum()}}
		}, "external file"},
		{"subgraph tensor", func(m *onnxpb.ModelProto) {
			sub := identityProto(-1).Graph
			sub.Initializer = []*onnxpb.TensorProto{{Name: proto.String("c"), Dims: []int64{-3}, DataType: proto.Int32(1)}}
			m.Graph.Node[0].Attribute = []*onnxpb.AttributeProto{{Name: proto.String("then_branch"), G: sub}}
		}, `initializer "c" has dimension 0 of -3`},
		{"attribute tensor", func(m *onnxpb.ModelProto) {
			m.Graph.Node[0].Attribute = []*onnxpb.AttributeProto{{Name: proto.String("value"),
				T: &onnxpb.TensorProto{Dims: []int64{3}, DataType: proto.Int32(7), RawData: make([]byte, 3)}}}
		}, `attribute "value" of node "id" ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := identityProto(-1, 4)
			tc.spoil(m)
			s, err := New(context.Background(), marshal(t, m), Config{})
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			wantErr(t, err, ErrModel, tc.want)
			// Parse and FromProto make the same check, once, for whatever reads the model next.
			_, err = Parse(marshal(t, m))
			wantErr(t, err, ErrModel, tc.want)
			_, err = FromProto(m)
			wantErr(t, err, ErrModel, tc.want)
		})
	}
	_, err := checkModel([]byte("\x08\x08garbage that is not protobuf"))
	wantErr(t, err, ErrModel, "not a readable ONNX model", "bytes that do not parse")
}

// FuzzNew: whatever bytes New is given, the Go-side check it makes before ONNX Runtime sees
// them returns a model or an ErrModel error, never a panic; what it accepts has a graph with
// outputs and an operator set.
func FuzzNew(f *testing.F) {
	for _, name := range []string{"mlp_tanh", "gaussian_relu", "matmul_opset17"} {
		b, err := os.ReadFile(filepath.Join(fixtures, name+".onnx"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(marshal(f, identityProto(1<<40, 4)))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := checkModel(data)
		if err != nil {
			if !errors.Is(err, ErrModel) {
				t.Fatalf("error %v does not wrap ErrModel", err)
			}
			return
		}
		if m.GetGraph() == nil || len(m.GetGraph().GetOutput()) == 0 || len(m.GetOpsetImport()) == 0 || m.GetIrVersion() <= 0 {
			t.Fatalf("accepted a model without a graph, outputs, opset or IR version")
		}
		metadata(m)
	})
}

// TestParsedModelSessions: sessions made from one parse (NewSession) compute what New's do from
// the bytes, with fed weights too (which edit a copy, never the shared message), and the
// model's metadata and weight values read back without parsing again.
func TestParsedModelSessions(t *testing.T) {
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(fixtures, "mlp_tanh.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	before := proto.Clone(m.Proto())
	obs := []float32{0.01, 0.02, 0.03, 0.04, -0.01, -0.02, -0.03, -0.04}
	outputs := func(s *Session) []float32 {
		t.Helper()
		defer s.Close()
		n, err := Feed(s, 0, []int64{2, 4}, obs)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(n); err != nil {
			t.Fatal(err)
		}
		out, err := Output[float32](s, 0)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(out[:4])
	}
	fromBytes, err := New(ctx, data, Config{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := outputs(fromBytes)
	for _, cfg := range []Config{{MaxBatch: 2}, {MaxBatch: 2, Weights: []string{m.Proto().GetGraph().GetInitializer()[0].GetName()}}} {
		s, err := NewSession(ctx, m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := outputs(s); !slices.Equal(got, want) {
			t.Errorf("weights %v: parsed once %v, from the bytes %v", cfg.Weights, got, want)
		}
	}
	if !proto.Equal(before, m.Proto()) {
		t.Error("a session modified the shared parsed model")
	}
	if m.Metadata()["towerrl.env_id"] != "CartPole-v1" {
		t.Errorf("metadata %v", m.Metadata())
	}
	name := m.Proto().GetGraph().GetInitializer()[0].GetName()
	a, err := m.WeightValues([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	b, err := WeightValues(data, []string{name})
	if err != nil || !slices.Equal(a[0], b[0]) {
		t.Errorf("weight %q: %v from the parsed model, %v (%v) from the bytes", name, a[0][:2], b[0][:2], err)
	}
}

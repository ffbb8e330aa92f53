package edit

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// TestInferTypesMatchesONNX checks the type propagation against the value_info that ONNX's
// own shape inference wrote into the fixtures made with value_info=True: with value_info
// removed, every entry's element type must be propagated again.
func TestInferTypesMatchesONNX(t *testing.T) {
	checked := 0
	for _, name := range []string{"fixed8", "sb3_discrete", "rppo_lstm", "uint8_cnn", "view_cnn_value_info"} {
		data, err := readFixture(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := parse(data)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int32{}
		for _, vi := range m.GetGraph().GetValueInfo() {
			want[vi.GetName()] = tensorType(vi)
		}
		if len(want) == 0 {
			t.Fatalf("%s has no value_info", name)
		}
		m.GetGraph().ValueInfo = nil
		got := inferTypes(newIndex(m))
		for tensor, wt := range want {
			if got[tensor] != wt {
				t.Errorf("%s: %q has type %v, ONNX says %v", name, tensor, onnxpb.TensorProto_DataType(got[tensor]), onnxpb.TensorProto_DataType(wt))
			}
			checked++
		}
	}
	t.Logf("%d tensors' element types agree with ONNX shape inference", checked)
}

func outputNames(t *testing.T, model []byte) []string {
	t.Helper()
	m, err := parse(model)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, vi := range m.GetGraph().GetOutput() {
		names = append(names, vi.GetName())
	}
	return names
}

// TestExposeLogits exposes the logits inside an SB3-style export (which outputs only actions,
// values and log-probabilities) and checks, row by row, that they are the logits: their
// argmax is PyTorch's action and their log-softmax at it PyTorch's log-probability.
func TestExposeLogits(t *testing.T) {
	fx := &fixture{name: "sb3_gaussian", dir: "testdata"}
	for _, f := range loadFixtures(t, "testdata") {
		if f.name == "sb3_discrete" {
			fx = f
		}
	}
	model := fx.model(t)
	const logits = "/action_net/Gemm_output_0"
	out, err := Expose(model, logits, "/ArgMax_output_0", "actions", logits)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"actions", "values", "log_prob", logits, "/ArgMax_output_0"}
	if diff := cmp.Diff(want, outputNames(t, out)); diff != "" {
		t.Fatalf("outputs (-want +got):\n%s", diff)
	}
	checkPreserved(t, model, out, 2)
	s, err := onnx.New(context.Background(), out, onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if o := s.Outputs(); o[3].DType != onnx.Float32 || !slices.Equal(o[3].Row, []int64{2}) || o[4].DType != onnx.Int64 {
		t.Fatalf("exposed outputs %v", o)
	}
	obs := values(fx.array(t, "observation"))
	actions, logp := values(fx.array(t, "actions")), values(fx.array(t, "log_prob"))
	for row := range fx.Rows {
		if _, err := onnx.Feed(s, 0, []int64{1, 4}, convert[float32](obs[4*row:4*row+4])); err != nil {
			t.Fatal(err)
		}
		if err := s.Run(1); err != nil {
			t.Fatal(err)
		}
		l, err := onnx.Output[float32](s, 3)
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		if l[1] > l[0] {
			best = 1
		}
		lse := math.Log(math.Exp(float64(l[0])) + math.Exp(float64(l[1])))
		if float64(best) != actions[row] || math.Abs(float64(l[best])-lse-logp[row]) > 1e-5 {
			t.Errorf("row %d: logits %v give action %d, log-prob %g; PyTorch %g, %g", row, l[:2], best, float64(l[best])-lse, actions[row], logp[row])
		}
	}
}

func TestExposeTypes(t *testing.T) {
	fixed8, err := readFixture("fixed8")
	if err != nil {
		t.Fatal(err)
	}
	vi, err := readFixture("view_cnn_value_info")
	if err != nil {
		t.Fatal(err)
	}
	// fixed8's value_info is removed so that types come from the propagation.
	m, err := parse(fixed8)
	if err != nil {
		t.Fatal(err)
	}
	m.GetGraph().ValueInfo = nil
	bare, err := marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		model []byte
		name  string
		elem  onnxpb.TensorProto_DataType
		dims  []int64 // declared shape; nil: none
	}{
		{bare, "/Equal_output_0", onnxpb.TensorProto_BOOL, nil},
		{bare, "/Cast_output_0", onnxpb.TensorProto_INT64, nil},
		{bare, "/ArgMax_output_0", onnxpb.TensorProto_INT64, nil},
		{bare, "/Where_output_0", onnxpb.TensorProto_INT64, nil},
		{bare, "/ConstantOfShape_1_output_0", onnxpb.TensorProto_FLOAT, nil},
		{bare, "/Shape_output_0", onnxpb.TensorProto_INT64, nil},
		{bare, "/Tanh_output_0", onnxpb.TensorProto_FLOAT, nil},
		{vi, "/Reshape_output_0", onnxpb.TensorProto_FLOAT, []int64{1, 64}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := Expose(c.model, c.name)
			if err != nil {
				t.Fatal(err)
			}
			m, err := parse(out)
			if err != nil {
				t.Fatal(err)
			}
			outs := m.GetGraph().GetOutput()
			last := outs[len(outs)-1]
			if last.GetName() != c.name || onnxpb.TensorProto_DataType(tensorType(last)) != c.elem || !slices.Equal(dims(last), c.dims) {
				t.Errorf("exposed %v, want %q of type %v and shape %v", last, c.name, c.elem, c.dims)
			}
		})
	}
}

func TestExposeErrors(t *testing.T) {
	model, err := readFixture("sb3_discrete")
	if err != nil {
		t.Fatal(err)
	}
	custom := newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
		node("Gelu", ins("x"), ins("g")).node("Relu", ins("g"), ins("y")).bytes(t)
	cases := []struct {
		name     string
		model    []byte
		tensor   string
		sentinel error
		msg      string
	}{
		{"empty", nil, "x", onnx.ErrModel, "empty"},
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff}, "x", onnx.ErrModel, "not a readable ONNX model"},
		{"truncated", model[:len(model)*2/3], "x", onnx.ErrModel, "not a readable ONNX model"},
		{"misspelt", model, "action_net", ErrNoTensor, `the closest computed tensors are "/action_net/Gemm_output_0"`},
		{"typo", model, "/Argmax_output_0", ErrNoTensor, `"/ArgMax_output_0"`},
		{"initializer", model, "action_net.weight", ErrNoTensor, "is an initializer"},
		{"graph input", model, "observation", ErrNoTensor, "is a graph input"},
		{"no type", custom, "g", ErrNoType, `tensor "g" (output of Gelu "Gelu:g")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := Expose(c.model, c.tensor)
			if out != nil || !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %d bytes, error %v; want %v saying %q", len(out), err, c.sentinel, c.msg)
			}
		})
	}
}

// TestTensors lists the tensors of a fixed-batch and of a dynamic-batch model.
func TestTensors(t *testing.T) {
	ctx := context.Background()
	t.Run("fixed batch", func(t *testing.T) {
		model, err := readFixture("view_cnn")
		if err != nil {
			t.Fatal(err)
		}
		got, err := Tensors(ctx, model, onnx.Config{})
		if err != nil {
			t.Fatal(err)
		}
		want := []onnx.TensorInfo{
			{Name: "logits", DType: onnx.Float32, Declared: []int64{1, 3}, Batched: true, Row: []int64{3}},
			{Name: "value", DType: onnx.Float32, Declared: []int64{1, 1}, Batched: true, Row: []int64{1}},
			// Declared: ONNX Runtime's inferred shapes, as the exposed outputs declare none.
			{Name: "/conv/Conv_output_0", DType: onnx.Float32, Declared: []int64{1, 4, 4, 4}, Batched: true, Row: []int64{4, 4, 4}},
			{Name: "/Relu_output_0", DType: onnx.Float32, Declared: []int64{1, 4, 4, 4}, Batched: true, Row: []int64{4, 4, 4}},
			{Name: "/Constant_output_0", DType: onnx.Int64, Declared: []int64{2}, Batched: false, Row: []int64{2}},
			{Name: "/Reshape_output_0", DType: onnx.Float32, Declared: []int64{1, 64}, Batched: true, Row: []int64{64}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("tensors (-want +got):\n%s", diff)
		}
	})
	t.Run("scalars left out", func(t *testing.T) {
		got, names := tensorsOf(t, "sf_gru")
		// -5 and 5 of the clamp are scalars; the GRU's output is [seq, dirs, batch, hidden].
		if _, ok := names["/Constant_output_0"]; ok {
			t.Error("scalar /Constant_output_0 listed")
		}
		if info := names["/core/GRU_output_0"]; !slices.Equal(info.Row, []int64{1, 1, 16}) || !info.Batched {
			t.Errorf("GRU output %+v: with the batch fixed at 1, dimension 0 (its sequence) counts as batched", info)
		}
		if info := names["output_actions"]; info.DType != onnx.Int64 || got[0].Name != "output_actions" {
			t.Errorf("graph outputs come first: %v", got[:2])
		}
	})
	t.Run("dynamic batch, batch on other axes left out", func(t *testing.T) {
		_, names := tensorsOf(t, "dynamic_gru")
		for _, off := range []string{"/core/GRU_output_0", "/core/GRU_output_1", "/Unsqueeze_output_0", "/Unsqueeze_1_output_0"} {
			if _, ok := names[off]; ok {
				t.Errorf("%s (batch not on axis 0) listed", off)
			}
		}
		for _, on := range []string{"output_actions", "output_rnn_states", "/encoder/encoder.1/Elu_output_0", "/Squeeze_output_0"} {
			if info, ok := names[on]; !ok || !info.Batched {
				t.Errorf("%s: %+v, want it listed and batched", on, info)
			}
		}
	})
}

// tensorsOf lists a fixture's tensors, in order and by name.
func tensorsOf(t *testing.T, fixture string) ([]onnx.TensorInfo, map[string]onnx.TensorInfo) {
	t.Helper()
	model, err := readFixture(fixture)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Tensors(context.Background(), model, onnx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]onnx.TensorInfo{}
	for _, info := range got {
		names[info.Name] = info
	}
	return got, names
}

// TestConcurrent runs Tensors, Expose and DynamicBatch on shared model bytes from several
// goroutines (run with -race) and checks they give what a lone call gives.
func TestConcurrent(t *testing.T) {
	model, err := readFixture("gru_view_seq")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want, _, err := DynamicBatch(ctx, model, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	errs := make(chan error, 3*n)
	for range n {
		go func() {
			out, _, err := DynamicBatch(ctx, model, Options{})
			if err == nil && !slices.Equal(out, want) {
				err = errors.New("DynamicBatch gave different bytes")
			}
			errs <- err
		}()
		go func() {
			_, err := Tensors(ctx, model, onnx.Config{})
			errs <- err
		}()
		go func() {
			_, err := Expose(model, "/gru/GRU_output_0")
			errs <- err
		}()
	}
	for range 3 * n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(model, &m); err != nil {
		t.Fatal(err)
	}
}

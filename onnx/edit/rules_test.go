package edit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// TestDynamicBatchRules runs DynamicBatch on small hand-built graphs, one per batch rule. Each
// rewrite is checked by DynamicBatch's own verification against ONNX Runtime running the
// original row by row; here we check what was rewritten, or why it was refused.
func TestDynamicBatchRules(t *testing.T) {
	w4x3 := make([]float32, 12)
	for k := range w4x3 {
		w4x3[k] = float32(k%5) - 2
	}
	rows8 := make([]float32, 32)
	for k := range rows8 {
		rows8[k] = float32(k%4) * 0.5 // 8 equal rows of 4
	}
	cases := []struct {
		name  string
		model *builder
		axes  map[string]int
		// want: substrings of the report (rewrite lines, "output NAME=AXIS", "assumed"); refuse:
		// a substring of the ErrFixedBatch error.
		want   []string
		refuse string
	}{
		{name: "squeeze without axes, opset 11",
			model: newBuilder(11).input("x", tFloat, 1, 1, 4).output("y", tFloat, 4).
				node("Squeeze", ins("x"), ins("s")).node("Relu", ins("s"), ins("y")),
			want: []string{"squeezes axes [1], not the batch axis 0", "output y=0", "shapes removed"}},
		{name: "squeeze without axes, opset 13",
			model: newBuilder(13).input("x", tFloat, 1, 1, 4).output("y", tFloat, 4).
				node("Squeeze", ins("x"), ins("s")).node("Relu", ins("s"), ins("y")),
			want: []string{"squeezes axes [1], not the batch axis 0", "output y=0"}},
		{name: "value.squeeze() to a scalar",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("v", tFloat).floats("w", []int64{1, 4}, 0.5, -1, 2, 0.25).
				node("Gemm", ins("x", "w"), ins("g"), aInt("transB", 1)).node("Squeeze", ins("g"), ins("v")),
			want: []string{"squeezes axes [1], not the batch axis 0", "output v=0"}},
		{name: "squeeze of the batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 4).ints("ax", 0).
				node("Squeeze", ins("x", "ax"), ins("y")),
			refuse: "squeezes the batch away"},
		{name: "slice x[:1] on the batch, opset 13",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
				ints("s", 0).ints("e", 1).ints("a", 0).
				node("Slice", ins("x", "s", "e", "a"), ins("t")).node("Relu", ins("t"), ins("y")),
			want: []string{"end 1 on the batch axis → 9223372036854775807"}},
		{name: "slice x[:1] on the batch, opset 9 attributes",
			model: newBuilder(9).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
				node("Slice", ins("x"), ins("t"), aInts("starts", 0), aInts("ends", 1), aInts("axes", 0)).
				node("Relu", ins("t"), ins("y")),
			want: []string{"end 1 on the batch axis"}},
		{name: "slice from the last row",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
				ints("s", -1).ints("e", 1<<40).ints("a", 0).node("Slice", ins("x", "s", "e", "a"), ins("y")),
			refuse: "slices the batch"},
		{name: "flatten folds the batch",
			model: newBuilder(13).input("x", tFloat, 1, 2, 3).output("y", tFloat, 1, 6).
				node("Flatten", ins("x"), ins("y"), aInt("axis", 0)),
			refuse: "folds the batch"},
		{name: "reshape folds the batch",
			model: newBuilder(13).input("x", tFloat, 1, 2, 3).output("y", tFloat, 2, 3).ints("shape", 2, 3).
				node("Reshape", ins("x", "shape"), ins("y")),
			refuse: "folds the batch into other dimensions ([1 2 3] → [2 3])"},
		{name: "matmul contracts over the batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 4, 4).
				node("Transpose", ins("x"), ins("xt")).node("MatMul", ins("xt", "x"), ins("y")),
			refuse: "contracts over the batch"},
		{name: "softmax across the batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
				node("Softmax", ins("x"), ins("y"), aInt("axis", 0)),
			refuse: "normalises across the batch"},
		{name: "nonzero of batched data",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tInt64, 2, -1).
				node("NonZero", ins("x"), ins("y")),
			refuse: "depends on the batch's contents"},
		{name: "tile along features",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 8).ints("r", 1, 2).
				node("Tile", ins("x", "r"), ins("y")),
			want: []string{"output y=0"}},
		{name: "tile along the batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 2, 4).ints("r", 2, 1).
				node("Tile", ins("x", "r"), ins("y")),
			refuse: "repeats the batch"},
		{name: "einsum keeps the batch label",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 3).floats("w", []int64{4, 3}, w4x3...).
				node("Einsum", ins("x", "w"), ins("y"), aStr("equation", "bi,ij->bj")),
			want: []string{"output y=0"}},
		{name: "einsum sums over the batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 4).
				node("Einsum", ins("x", "x"), ins("y"), aStr("equation", "bi,bi->i")),
			refuse: "sums over the batch"},
		{name: "transpose moves the batch to axis 1",
			model: newBuilder(13).input("x", tFloat, 1, 4, 3).output("y", tFloat, 3, 1, 4).
				node("Transpose", ins("x"), ins("y"), aInts("perm", 2, 0, 1)),
			want: []string{"output y=1", `output "y": dimension 1 (1) → batch`}},
		{name: "ConstantOfShape row concatenated",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 7).ints("shape", 1, 3).
				node("ConstantOfShape", ins("shape"), ins("c"), aTensor("value", floatTensor(0.5))).
				node("Concat", ins("x", "c"), ins("y"), aInt("axis", 1)),
			want: []string{`input "c" (the same for every row, batch on axis 0) repeated to the batch at run time`}},
		{name: "operator unknown to the analysis",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
				node("Gelu", ins("x"), ins("y")),
			want: []string{`assumed: Gelu "Gelu:y" keeps the batch on axis 0`}},
		{name: "reduce over features, opset 13 axes input",
			model: newBuilder(13).input("x", tFloat, 1, 3, 4).output("y", tFloat, 1, 3).ints("ax", -1).
				node("ReduceSum", ins("x", "ax"), ins("y"), aInt("keepdims", 0)),
			want: []string{"output y=0"}},
		{name: "reduce over every axis",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 1).
				node("ReduceMax", ins("x"), ins("y")),
			refuse: "reduces over every axis"},
		{name: "batch 8 constant with equal rows",
			model: newBuilder(13).input("x", tFloat, 8, 4).output("y", tFloat, 8, 4).floats("c", []int64{8, 4}, rows8...).
				node("Add", ins("x", "c"), ins("y")),
			want: []string{`input "c" (the same for every row, batch on axis 0) its first row kept`}},
		{name: "reshape target built by Concat",
			model: newBuilder(13).input("x", tFloat, 1, 2, 3).output("y", tFloat, 1, 6).ints("one", 1).ints("rest", -1).
				node("Concat", ins("one", "rest"), ins("shape"), aInt("axis", 0)).
				node("Reshape", ins("x", "shape"), ins("y")),
			want: []string{"target shape [1 -1] → [0 -1]"}},
		{name: "reshape constant shared by two reshapes",
			model: newBuilder(13).input("x", tFloat, 1, 2, 3).output("y", tFloat, 1, 6).output("z", tFloat, 1, 6).ints("shape", 1, 6).
				node("Reshape", ins("x", "shape"), ins("y")).node("Reshape", ins("x", "shape"), ins("z")),
			want: []string{`Reshape "Reshape:y": target shape [1 6] → [-1 6]`, `Reshape "Reshape:z": target shape [1 6] → [-1 6]`}},
		{name: "pad features",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 6).ints("pads", 0, 1, 0, 1).
				node("Pad", ins("x", "pads"), ins("y")),
			want: []string{"output y=0"}},
		{name: "pad the batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 2, 4).ints("pads", 1, 0, 0, 0).
				node("Pad", ins("x", "pads"), ins("y")),
			refuse: "pads the batch"},
		{name: "matmul of a rank-3 batch by weights",
			model: newBuilder(13).input("x", tFloat, 1, 2, 4).output("y", tFloat, 1, 2, 3).floats("w", []int64{4, 3}, w4x3...).
				node("MatMul", ins("x", "w"), ins("y")),
			want: []string{"output y=0"}},
		{name: "matmul with the batch on the right",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 3, 1).floats("w", []int64{3, 4}, w4x3...).
				node("Transpose", ins("x"), ins("xt")).node("MatMul", ins("w", "xt"), ins("y")),
			want: []string{"output y=1"}},
		{name: "gemm with transA",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 3).floats("w", []int64{4, 3}, w4x3...).
				node("Transpose", ins("x"), ins("xt")).node("Gemm", ins("xt", "w"), ins("y"), aInt("transA", 1)),
			want: []string{"output y=0"}},
		{name: "gather columns",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 2).ints("idx", 0, 2).
				node("Gather", ins("x", "idx"), ins("y"), aInt("axis", 1)),
			want: []string{"output y=0"}},
		{name: "gather elements with a constant index row",
			model: newBuilder(13).input("x", tFloat, 1, 3).output("y", tFloat, 1, 1).ints("i1", 2).ints("shape", 1, 1).
				node("Reshape", ins("i1", "shape"), ins("idx")).
				node("GatherElements", ins("x", "idx"), ins("y"), aInt("axis", 1)),
			want: []string{`input "idx" (the same for every row, batch on axis 0) repeated to the batch at run time`}},
		{name: "split features",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("a", tFloat, 1, 2).output("b", tFloat, 1, 2).ints("split", 2, 2).
				node("Split", ins("x", "split"), ins("a", "b"), aInt("axis", 1)),
			want: []string{"output a=0", "output b=0"}},
		{name: "topk of features",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("v", tFloat, 1, 2).output("i", tInt64, 1, 2).ints("k", 2).
				node("TopK", ins("x", "k"), ins("v", "i")),
			want: []string{"output v=0", "output i=0"}},
		{name: "one-hot of an integer observation",
			model: newBuilder(13).input("s", tInt64, 1).output("y", tFloat, 1, 3).ints("depth", 3).floats("vals", []int64{2}, 0, 1).
				node("OneHot", ins("s", "depth", "vals"), ins("y")),
			want: []string{"output y=0"}},
		{name: "cumulative sum of features",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).ints("ax", 1).
				node("CumSum", ins("x", "ax"), ins("y")),
			want: []string{"output y=0"}},
		{name: "layer normalisation, opset 17",
			model: newBuilder(17).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).
				floats("g", []int64{4}, 1, 2, 0.5, 1).floats("b", []int64{4}, 0, 0.1, 0, -0.1).
				node("LayerNormalization", ins("x", "g", "b"), ins("y")),
			want: []string{"output y=0"}},
		{name: "resize to fixed sizes",
			model: newBuilder(13).input("x", tFloat, 1, 1, 2, 2).output("y", tFloat, 1, 1, 4, 4).ints("sizes", 1, 1, 4, 4).
				node("Resize", ins("x", "", "", "sizes"), ins("y")),
			refuse: "resizes to fixed sizes [1 1 4 4]"},
		{name: "where on a comparison",
			model: newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).floats("zero", nil, 0).floats("half", nil, 0.5).
				node("Greater", ins("x", "zero"), ins("c")).node("Where", ins("c", "x", "half"), ins("y")),
			want: []string{"output y=0"}},
		{name: "max pool with indices",
			model: newBuilder(13).input("x", tFloat, 1, 1, 4, 4).output("y", tFloat, 1, 1, 2, 2).output("i", tInt64, 1, 1, 2, 2).
				node("MaxPool", ins("x"), ins("y", "i"), aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)),
			refuse: "its Indices output counts positions across the whole batch"},
		{name: "max pool",
			model: newBuilder(13).input("x", tFloat, 1, 1, 4, 4).output("y", tFloat, 1, 1, 2, 2).
				node("MaxPool", ins("x"), ins("y"), aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)),
			want: []string{"output y=0"}},
		{name: "input with the batch mistaken on the wrong axis",
			model: newBuilder(13).input("x", tFloat, 1, 4).input("scale", tFloat, 1).output("y", tFloat, 1, 4).
				node("Mul", ins("x", "scale"), ins("y")),
			refuse: "its inputs carry the batch on different axes"},
		{name: "input marked without batch",
			model: newBuilder(13).input("x", tFloat, 1, 4).input("scale", tFloat, 1).output("y", tFloat, 1, 4).
				node("Mul", ins("x", "scale"), ins("y")),
			axes: map[string]int{"scale": -1},
			want: []string{`input "x": dimension 0 (1) → batch`, "output y=0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model := c.model.bytes(t)
			out, rep, err := DynamicBatch(context.Background(), model, Options{BatchAxes: c.axes})
			if c.refuse != "" {
				if !errors.Is(err, ErrFixedBatch) || !strings.Contains(err.Error(), c.refuse) {
					t.Fatalf("got %v, want ErrFixedBatch saying %q", err, c.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			text := rep.String()
			for name, ax := range rep.Outputs {
				text += "\noutput " + name + "=" + string(rune('0'+ax))
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("report lacks %q:\n%s", w, text)
				}
			}
			if rep.Rows == 0 || rep.MaxDiff > DefaultTolerance {
				t.Errorf("report %+v: not verified", rep)
			}
			checkPreserved(t, model, out, 0)
			if _, ok := rep.Inputs["scale"]; ok && c.axes != nil {
				t.Errorf("input scale was marked unbatched, report %v", rep.Inputs)
			}
		})
	}
}

func floatTensor(v float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{DataType: proto.Int32(tFloat), Dims: []int64{1}, FloatData: []float32{v}}
}

func readFixture(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", name+".onnx"))
}

// TestDynamicBatchErrors covers bad models and bad options: never a panic, always an error
// that says what is wrong, wrapping ErrFixedBatch only when the batch is what cannot be done.
func TestDynamicBatchErrors(t *testing.T) {
	fixed8, err := readFixture("fixed8")
	if err != nil {
		t.Fatal(err)
	}
	rppo, err := readFixture("rppo_lstm")
	if err != nil {
		t.Fatal(err)
	}
	scalar := newBuilder(13).input("x", tFloat, 1, 4).output("y", tFloat, 1, 4).output("c", tFloat).
		node("Relu", ins("x"), ins("y")).node("Constant", nil, ins("c"), aTensor("value", &onnxpb.TensorProto{DataType: proto.Int32(tFloat), FloatData: []float32{2}}))
	noInputs := newBuilder(13).output("y", tInt64, 2).ints("c", 1, 2).node("Identity", ins("c"), ins("y"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name     string
		ctx      context.Context
		model    []byte
		opts     Options
		fixed    bool // wraps ErrFixedBatch
		sentinel error
		msg      string
	}{
		{name: "empty", model: nil, sentinel: onnx.ErrModel, msg: "empty"},
		{name: "not ONNX", model: []byte("this is not a protobuf at all"), sentinel: onnx.ErrModel, msg: "ONNX"},
		{name: "truncated", model: fixed8[:len(fixed8)/2], sentinel: onnx.ErrModel, msg: "not a readable ONNX model"},
		{name: "no inputs", model: noInputs.bytes(t), fixed: true, msg: "no inputs"},
		{name: "scalar output without a batch", model: scalar.bytes(t), sentinel: onnx.ErrShape, msg: `output "c" is a scalar (rank 0) without a batch`},
		{name: "rows not a multiple of the batch", model: fixed8, opts: Options{Rows: 12}, msg: "not a multiple of the model's fixed batch 8"},
		{name: "negative rows", model: fixed8, opts: Options{Rows: -1}, msg: "must not be negative"},
		{name: "batch axis of an unknown input", model: fixed8, opts: Options{BatchAxes: map[string]int{"obs": 0}}, msg: `names "obs", which is not an input`},
		{name: "batch axis out of range", model: fixed8, opts: Options{BatchAxes: map[string]int{"x": 3}}, msg: "has rank 3"},
		{name: "batch axis of the wrong size", model: rppo, opts: Options{BatchAxes: map[string]int{"h": 2}}, msg: "that dimension of the input is 8, not the fixed batch 1"},
		{name: "inputs for an unknown input", model: fixed8, opts: Options{Inputs: map[string][]float64{"obs": {1}}}, msg: `Options.Inputs names "obs"`},
		{name: "inputs of the wrong size", model: fixed8, opts: Options{Inputs: map[string][]float64{"x": {1, 2, 3}}}, msg: `Options.Inputs["x"] holds 3 values; the input takes 96`},
		{name: "states forced onto the wrong axis", model: rppo, opts: Options{BatchAxes: map[string]int{"h": 0, "c": 0}}, fixed: true, msg: "different axes"},
		{name: "cancelled", ctx: ctx, model: fixed8, sentinel: context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.ctx == nil {
				c.ctx = context.Background()
			}
			out, _, err := DynamicBatch(c.ctx, c.model, c.opts)
			if err == nil || out != nil {
				t.Fatalf("got a model (%d bytes) and error %v", len(out), err)
			}
			if errors.Is(err, ErrFixedBatch) != c.fixed {
				t.Errorf("errors.Is(err, ErrFixedBatch) = %v: %v", !c.fixed, err)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("error %v does not wrap %v", err, c.sentinel)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
		})
	}
}

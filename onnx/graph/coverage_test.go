package graph

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// coverageCases are small graphs, one per operator family the exporters emit, each checked
// against ONNX Runtime (forward) and finite differences (gradients) by runCase.
func coverageCases() map[string]opCase {
	rng := rand.New(rand.NewPCG(4, 2))
	return map[string]opCase{
		// An Atari-style CNN on uint8 pixels: Cast to float, divide by 255, convolve.
		"uint8_cnn": {opset: 13, inputs: []port{u8("pixels", -1, 2, 6, 6)}, outputs: []port{f32("y", -1, 18)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "W", 2, 2, 3, 3), floatInit(rng, "B", 2)},
			nodes: []*onnxpb.NodeProto{
				node("Cast", ins("pixels"), ins("xf"), aInt("to", int64(onnxpb.TensorProto_FLOAT))),
				node("Constant", nil, ins("c255"), aTensor("value", scalarInit("", 255))),
				node("Div", ins("xf", "c255"), ins("xs")),
				node("Conv", ins("xs", "W", "B"), ins("c"), aInts("strides", 2, 2)),
				node("Relu", ins("c"), ins("r")),
				node("Flatten", ins("r"), ins("y")),
			}},
		// Casts between float types, to integers (truncation) and back, of int64 inputs.
		"cast": {opset: 13, inputs: []port{f32("x", -1, 5), i64("k", -1, 5)}, outputs: []port{f32("y", -1, 5), f32("t", -1, 5), f32("kf", -1, 5)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 5)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Cast", ins("xs"), ins("xd"), aInt("to", int64(onnxpb.TensorProto_DOUBLE))),
				node("Cast", ins("xd"), ins("y"), aInt("to", int64(onnxpb.TensorProto_FLOAT))),
				node("Constant", nil, ins("c3"), aTensor("value", scalarInit("", 3))),
				node("Mul", ins("x", "c3"), ins("x3")),
				node("Cast", ins("x3"), ins("ti"), aInt("to", int64(onnxpb.TensorProto_INT32))),
				node("Cast", ins("ti"), ins("t"), aInt("to", int64(onnxpb.TensorProto_FLOAT))),
				node("Cast", ins("k"), ins("kf"), aInt("to", int64(onnxpb.TensorProto_FLOAT))),
			}, noGrad: []string{"t"}},
		// VecNormalize baked in: (obs - mean) / sqrt(var + eps), clipped, then a Gemm.
		"clip_normaliser": {opset: 13, inputs: []port{f32("obs", -1, 4)}, outputs: []port{f32("y", -1, 3), f32("z", -1, 4)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "mean", 4), positiveInit(rng, "var", 4), scalarInit("eps", 1e-8),
				scalarInit("lo", -0.6), scalarInit("hi", 0.7), floatInit(rng, "W", 3, 4), floatInit(rng, "b", 3)},
			nodes: []*onnxpb.NodeProto{
				node("Sub", ins("obs", "mean"), ins("d")),
				node("Add", ins("var", "eps"), ins("ve")),
				node("Sqrt", ins("ve"), ins("sd")),
				node("Div", ins("d", "sd"), ins("n")),
				node("Clip", ins("n", "lo", "hi"), ins("c")),
				node("Gemm", ins("c", "W", "b"), ins("y"), aInt("transB", 1)),
				node("Clip", ins("n", "", "hi"), ins("z")),
			}},
		"clip_opset10": {opset: 10, inputs: []port{f32("x", -1, 4)}, outputs: []port{f32("y", -1, 4)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 4)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Clip", ins("xs"), ins("y"), aFloat("min", -0.3), aFloat("max", 0.2)),
			}},
		"log_pow_sqrt": {opset: 13, inputs: []port{f32("x", -1, 4)},
			outputs: []port{f32("log", -1, 4), f32("sq", -1, 4), f32("pw", -1, 4), f32("rt", -1, 4), f32("rc", -1, 4), f32("ab", -1, 4)},
			inits:   []*onnxpb.TensorProto{positiveInit(rng, "S", 4), scalarInit("two", 2), floatsInit("e", []int64{4}, 0.5, 1.5, -1, 3)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Log", ins("xs"), ins("log")),
				node("Pow", ins("xs", "two"), ins("sq")),
				node("Pow", ins("xs", "e"), ins("pw")),
				node("Sqrt", ins("xs"), ins("rt")),
				node("Reciprocal", ins("xs"), ins("rc")),
				node("Neg", ins("xs"), ins("nx")),
				node("Abs", ins("nx"), ins("ab")),
			}, gen: positive},
		"activations": {opset: 14, inputs: []port{f32("x", -1, 6)},
			outputs: []port{f32("elu", -1, 6), f32("lrelu", -1, 6), f32("softplus", -1, 6), f32("selu", -1, 6), f32("erf", -1, 6),
				f32("silu", -1, 6), f32("hsig", -1, 6), f32("ssign", -1, 6), f32("hswish", -1, 6)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 6)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Elu", ins("xs"), ins("elu"), aFloat("alpha", 0.7)),
				node("LeakyRelu", ins("xs"), ins("lrelu"), aFloat("alpha", 0.1)),
				node("Softplus", ins("xs"), ins("softplus")),
				node("Selu", ins("xs"), ins("selu")),
				node("Erf", ins("xs"), ins("erf")),
				node("Sigmoid", ins("xs"), ins("sg")),
				node("Mul", ins("xs", "sg"), ins("silu")),
				node("HardSigmoid", ins("xs"), ins("hsig")),
				node("Softsign", ins("xs"), ins("ssign")),
				node("HardSwish", ins("xs"), ins("hswish")),
			}, gen: func(rng *rand.Rand, _, n int) []float64 {
				out := make([]float64, n)
				for i := range out {
					out[i] = 4 * (rng.Float64() - 0.5)
				}
				return out
			}},
		"min_max_sum_mean": {opset: 13, inputs: []port{f32("x", -1, 3, 4)},
			outputs: []port{f32("mn", -1, 3, 4), f32("mx", -1, 3, 4), f32("sm", -1, 3, 4), f32("me", -1, 3, 4)},
			inits:   []*onnxpb.TensorProto{floatInit(rng, "A", 4), floatInit(rng, "B", 3, 1), floatInit(rng, "S", 3, 4)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Min", ins("xs", "A", "B"), ins("mn")),
				node("Max", ins("xs", "A"), ins("mx")),
				node("Sum", ins("xs", "A", "B"), ins("sm")),
				node("Mean", ins("xs", "B"), ins("me")),
			}},
		"where_equal_not": {opset: 13, inputs: []port{f32("x", -1, 4)}, outputs: []port{f32("y", -1, 4), f32("z", -1, 4)},
			inits: []*onnxpb.TensorProto{boolInit("cond", true, false, false, true), floatInit(rng, "A", 4), floatInit(rng, "S", 4),
				intInit("k1", 1, 2, 3, 4), intInit("k2", 1, 0, 3, 0)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Where", ins("cond", "xs", "A"), ins("y")),
				node("Equal", ins("k1", "k2"), ins("eq")),
				node("Not", ins("eq"), ins("ne")),
				node("Where", ins("ne", "A", "xs"), ins("z")),
			}},
		"reduce_opset13": {opset: 13, inputs: []port{f32("x", -1, 3, 4)},
			outputs: []port{f32("sum", -1, 4), f32("sumk", -1, 3, 1), f32("mean", -1, 1, 4), f32("max", -1, 3), f32("lse", -1, 3, 1),
				f32("min", -1, 4), f32("l2", -1, 1, 1), f32("ssq", -1, 3, 1), f32("all", 1, 1, 1)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 3, 4), intInit("ax1", 1), intInit("ax2", -1)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("ReduceSum", ins("xs", "ax1"), ins("sum"), aInt("keepdims", 0)),
				node("ReduceSum", ins("xs", "ax2"), ins("sumk")),
				node("ReduceMean", ins("xs"), ins("mean"), aInts("axes", 1)),
				node("ReduceMax", ins("xs"), ins("max"), aInts("axes", 2), aInt("keepdims", 0)),
				node("ReduceLogSumExp", ins("xs"), ins("lse"), aInts("axes", -1)),
				node("ReduceMin", ins("xs"), ins("min"), aInts("axes", 1), aInt("keepdims", 0)),
				node("ReduceL2", ins("xs"), ins("l2"), aInts("axes", 1, 2)),
				node("ReduceSumSquare", ins("xs"), ins("ssq"), aInts("axes", 2)),
				node("ReduceMean", ins("xs"), ins("all")),
			}},
		"reduce_opset18": {opset: 18, inputs: []port{f32("x", -1, 3, 4)},
			outputs: []port{f32("mean", -1, 4), f32("lse", -1, 3), f32("max", -1, 1, 1), f32("scalar", 1)},
			inits:   []*onnxpb.TensorProto{floatInit(rng, "S", 3, 4), intInit("ax1", 1), intInit("ax2", 2), intInit("ax12", 1, 2), intInit("ax0", 0)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("ReduceMean", ins("xs", "ax1"), ins("mean"), aInt("keepdims", 0)),
				node("ReduceLogSumExp", ins("xs", "ax2"), ins("lse"), aInt("keepdims", 0)),
				node("ReduceMax", ins("xs", "ax12"), ins("max")),
				node("ReduceSum", ins("xs"), ins("s0"), aInt("keepdims", 0)),
				node("Unsqueeze", ins("s0", "ax0"), ins("scalar")),
			}},
		"layernorm_opset17": {opset: 17, inputs: []port{f32("x", -1, 2, 5)},
			outputs: []port{f32("y", -1, 2, 5), f32("z", -1, 2, 5)},
			inits:   []*onnxpb.TensorProto{floatInit(rng, "W", 5, 5), floatInit(rng, "g", 5), floatInit(rng, "b", 5), floatInit(rng, "g2", 2, 5)},
			nodes: []*onnxpb.NodeProto{
				node("MatMul", ins("x", "W"), ins("h")),
				node("LayerNormalization", ins("h", "g", "b"), ins("y"), aFloat("epsilon", 1e-3)),
				node("LayerNormalization", ins("h", "g2"), ins("z"), aInt("axis", 1)),
			}},
		// nn.LayerNorm as torch 1.13 exports it below opset 17.
		"layernorm_decomposed": {opset: 13, inputs: []port{f32("x", -1, 5)}, outputs: []port{f32("y", -1, 5)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "W", 5, 5), floatInit(rng, "g", 5), floatInit(rng, "b", 5)},
			nodes: []*onnxpb.NodeProto{
				node("MatMul", ins("x", "W"), ins("h")),
				node("ReduceMean", ins("h"), ins("mu"), aInts("axes", -1)),
				node("Sub", ins("h", "mu"), ins("d")),
				node("Constant", nil, ins("two"), aTensor("value", scalarInit("", 2))),
				node("Pow", ins("d", "two"), ins("d2")),
				node("ReduceMean", ins("d2"), ins("var"), aInts("axes", -1)),
				node("Constant", nil, ins("eps"), aTensor("value", scalarInit("", 1e-5))),
				node("Add", ins("var", "eps"), ins("ve")),
				node("Sqrt", ins("ve"), ins("sd")),
				node("Div", ins("d", "sd"), ins("n")),
				node("Mul", ins("n", "g"), ins("ng")),
				node("Add", ins("ng", "b"), ins("y")),
			}},
		"shapes": {opset: 13, inputs: []port{f32("x", -1, 4, 6)},
			outputs: []port{f32("cos", -1, 4, 6), f32("rng", -1, 4, 6), f32("sl", -1, 2, 3), f32("slneg", -1, 4, 2), f32("tr", -1, 6, 4),
				f32("s0", -1, 4, 2), f32("s1", -1, 4, 4), f32("e0", -1, 2, 6), f32("e1", -1, 2, 6), f32("tile", -1, 8, 6)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 4, 6), intInit("st", 1, 0), intInit("en", 4, 6), intInit("axs", 1, 2), intInit("stp", 2, 2),
				intInit("st2", -1), intInit("en2", -100), intInit("ax2", 2), intInit("stp2", -3), intScalar("r0", 0), intScalar("r6", 6), intScalar("r1", 1),
				intInit("split", 2, 4), intInit("reps", 1, 2, 1)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Shape", ins("xs"), ins("shp")),
				node("ConstantOfShape", ins("shp"), ins("ones"), aTensor("value", floatsInit("", []int64{1}, 1.5))),
				node("Add", ins("xs", "ones"), ins("cos")),
				node("Range", ins("r0", "r6", "r1"), ins("ar")),
				node("Cast", ins("ar"), ins("arf"), aInt("to", int64(onnxpb.TensorProto_FLOAT))),
				node("Mul", ins("xs", "arf"), ins("rng")),
				node("Slice", ins("xs", "st", "en", "axs", "stp"), ins("sl")),
				node("Slice", ins("xs", "st2", "en2", "ax2", "stp2"), ins("slneg")),
				node("Transpose", ins("xs"), ins("tr"), aInts("perm", 0, 2, 1)),
				node("Split", ins("xs", "split"), ins("s0", "s1"), aInt("axis", 2)),
				node("Split", ins("xs"), ins("e0", "e1"), aInt("axis", 1)),
				node("Tile", ins("xs", "reps"), ins("tile")),
			}},
		"split_opset11": {opset: 11, inputs: []port{f32("x", -1, 6)}, outputs: []port{f32("a", -1, 1), f32("b", -1, 5)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 6)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Split", ins("xs"), ins("a", "b"), aInt("axis", 1), aInts("split", 1, 5)),
			}},
		// SB3's log-probability of the greedy action: ArgMax, then GatherElements on the
		// log-softmax; and a Gather of one column of a computed tensor.
		"argmax_gather": {opset: 13, inputs: []port{f32("x", -1, 4)},
			outputs: []port{i64("act", -1), f32("logp", -1, 1), f32("col", -1), i64("amin", -1, 1)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "W", 4, 5), floatInit(rng, "b", 5), intInit("one", 1),
				{Name: proto.String("twoScalar"), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{2}}},
			nodes: []*onnxpb.NodeProto{
				node("Gemm", ins("x", "W", "b"), ins("logits")),
				node("ArgMax", ins("logits"), ins("am"), aInt("axis", 1)),
				node("LogSoftmax", ins("logits"), ins("ls"), aInt("axis", 1)),
				node("GatherElements", ins("ls", "am"), ins("logp"), aInt("axis", 1)),
				node("Squeeze", ins("am", "one"), ins("act")),
				node("Gather", ins("logits", "twoScalar"), ins("col"), aInt("axis", 1)),
				node("ArgMin", ins("logits"), ins("amin"), aInt("axis", -1), aInt("select_last_index", 1)),
			}},
		// torch's squeeze(dim) of a dynamic dimension: an If on a shape test.
		"if_shape_test": {opset: 13, inputs: []port{f32("x", -1, 1)}, outputs: []port{f32("y", -1)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 1), intScalar("zero", 0), intScalar("one", 1), intInit("axes1", 1)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Shape", ins("xs"), ins("shp")),
				node("Gather", ins("shp", "one"), ins("d1")),
				node("Equal", ins("d1", "one"), ins("cond")),
				node("If", ins("cond"), ins("y"),
					aGraph("then_branch", []*onnxpb.NodeProto{node("Squeeze", ins("xs", "axes1"), ins("t"))}, f32("t", -1)),
					aGraph("else_branch", []*onnxpb.NodeProto{node("Identity", ins("xs"), ins("e"))}, f32("e", -1, 1))),
			}},
		"if_else_branch": {opset: 13, inputs: []port{f32("x", -1, 1)}, outputs: []port{f32("y", -1, 1)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "S", 1), intScalar("zero", 0), intScalar("one", 1), intInit("axes1", 1)},
			nodes: []*onnxpb.NodeProto{
				node("Mul", ins("x", "S"), ins("xs")),
				node("Shape", ins("xs"), ins("shp")),
				node("Gather", ins("shp", "one"), ins("d1")),
				node("Equal", ins("d1", "zero"), ins("cond")),
				node("If", ins("cond"), ins("y"),
					aGraph("then_branch", []*onnxpb.NodeProto{node("Squeeze", ins("xs", "axes1"), ins("t"))}, f32("t", -1)),
					aGraph("else_branch", []*onnxpb.NodeProto{node("Identity", ins("xs"), ins("e"))}, f32("e", -1, 1))),
			}},
		"lstm": {opset: 14, inputs: []port{f32("X", 5, 3, 4), f32("h0", 1, 3, 6), f32("c0", 1, 3, 6)},
			outputs: []port{f32("Y", 5, 1, 3, 6), f32("Yh", 1, 3, 6), f32("Yc", 1, 3, 6)},
			inits:   []*onnxpb.TensorProto{floatInit(rng, "W", 1, 24, 4), floatInit(rng, "R", 1, 24, 6), floatInit(rng, "B", 1, 48)},
			nodes: []*onnxpb.NodeProto{
				node("LSTM", ins("X", "W", "R", "B", "", "h0", "c0"), ins("Y", "Yh", "Yc"), aInt("hidden_size", 6)),
			}},
		"lstm_peephole_bidirectional": {opset: 14, inputs: []port{f32("X", 4, 2, 3)},
			outputs: []port{f32("Y", 4, 2, 2, 5), f32("Yh", 2, 2, 5), f32("Yc", 2, 2, 5)},
			inits:   []*onnxpb.TensorProto{floatInit(rng, "W", 2, 20, 3), floatInit(rng, "R", 2, 20, 5), floatInit(rng, "B", 2, 40), floatInit(rng, "P", 2, 15)},
			nodes: []*onnxpb.NodeProto{
				node("LSTM", ins("X", "W", "R", "B", "", "", "", "P"), ins("Y", "Yh", "Yc"), aInt("hidden_size", 5), aString("direction", "bidirectional")),
			}},
		"gru_linear_before_reset": {opset: 14, inputs: []port{f32("X", 5, 3, 4), f32("h0", 1, 3, 6)},
			outputs: []port{f32("Y", 5, 1, 3, 6), f32("Yh", 1, 3, 6)},
			inits:   []*onnxpb.TensorProto{floatInit(rng, "W", 1, 18, 4), floatInit(rng, "R", 1, 18, 6), floatInit(rng, "B", 1, 36)},
			nodes: []*onnxpb.NodeProto{
				node("GRU", ins("X", "W", "R", "B", "", "h0"), ins("Y", "Yh"), aInt("hidden_size", 6), aInt("linear_before_reset", 1)),
			}},
		"gru_reverse": {opset: 14, inputs: []port{f32("X", 4, 2, 3)}, outputs: []port{f32("Y", 4, 1, 2, 5)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "W", 1, 15, 3), floatInit(rng, "R", 1, 15, 5), floatInit(rng, "B", 1, 30)},
			nodes: []*onnxpb.NodeProto{
				node("GRU", ins("X", "W", "R", "B"), ins("Y"), aInt("hidden_size", 5), aString("direction", "reverse")),
			}},
		"rnn": {opset: 14, inputs: []port{f32("X", 3, 2, 3), f32("h0", 1, 2, 4)}, outputs: []port{f32("Y", 3, 1, 2, 4), f32("Yh", 1, 2, 4)},
			inits: []*onnxpb.TensorProto{floatInit(rng, "W", 1, 4, 3), floatInit(rng, "R", 1, 4, 4), floatInit(rng, "B", 1, 8)},
			nodes: []*onnxpb.NodeProto{
				node("RNN", ins("X", "W", "R", "B", "", "h0"), ins("Y", "Yh"), aInt("hidden_size", 4)),
			}},
	}
}

func positiveInit(rng *rand.Rand, name string, dims ...int64) *onnxpb.TensorProto {
	t := floatInit(rng, name, dims...)
	for k, v := range t.FloatData {
		if v < 0 {
			v = -v
		}
		t.FloatData[k] = v + 0.3
	}
	return t
}

// TestCoverageAgainstORT runs every coverage case: forward against ONNX Runtime, gradients
// against finite differences.
func TestCoverageAgainstORT(t *testing.T) {
	for name, c := range coverageCases() {
		t.Run(name, func(t *testing.T) { runCase(t, c) })
	}
}

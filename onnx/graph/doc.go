// Package graph imports ONNX policies into gorgonia graphs for fine-tuning, and writes the
// trained weights back into the original ONNX model.
//
// # Lifecycle
//
//	m, err := graph.Parse(onnxBytes)      // check the model's structure once
//	outs := []string{"logits", "value"}   // graph outputs or inner tensors
//	err = m.Check(outs...)                // every unsupported node on their path, in one error
//	params, err := m.NewParamsFor(graph.TrainOptions{Outputs: outs})  // float32 weights, by name
//	flat, err := params.Flat()            // the trainable ones in one vector, for the optimiser
//	for each tower {                      // one gorgonia graph per goroutine
//		g := gorgonia.NewGraph()
//		gr, err := m.Build(g, params, towerBatch, outs...)  // parameter nodes bound to params' tensors
//		cost := ... gr.Output("logits") ...
//		_, err = gorgonia.Grad(cost, gr.Learnables()...)
//		vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(gr.Learnables()...))
//	}
//	// each step: gorgonia.Let(gr.Inputs()[0], slice) and vm.RunAll() per tower (in parallel),
//	// gr.Gradients(grads) into the flat layout, average the towers' gradients and update flat
//	// in place, between runs.
//	data, err := m.WriteBack(params, graph.WriteOptions{BumpVersion: true})  // new ONNX bytes
//
// Gorgonia graphs have static shapes, so a graph is built for one batch size; the ONNX
// model's dynamic batch dimension (dimension 0 of each input) is fixed by Build, and
// [BuildOptions.Shapes] gives the full shape of inputs whose batch is elsewhere or that have
// other dynamic dimensions (a recurrent state [layers, batch, hidden], a sequence length).
// Shape arithmetic (Shape, Gather, Unsqueeze, Concat, Reshape targets, Constant,
// ConstantOfShape, Range, an If on a shape test) is evaluated at Build time; what remains
// becomes gorgonia nodes with derivatives. Graphs compute in the element type of their Params:
// float32, or float64 after [Params.As] (used by the finite-difference gradient checks).
//
// # Outputs on demand and pruning
//
// A trainer often needs tensors inside the graph rather than its outputs: Stable-Baselines3's
// documented export outputs int64 actions (an ArgMax) and log-probabilities, while PPO needs
// the action net's logits. [Model.Build] and [Model.BuildWith] take the names of the tensors
// to compute, graph outputs or any inner tensor ([Model.Tensors] lists them, [Model.Producer]
// says which operator computes each) or even an initializer (SB3's log_std); the default is
// the graph outputs. Only the nodes those tensors depend on are built: an ArgMax, a
// log-probability or an unsupported operator on another branch costs nothing and is never
// reported. [Graph.Output] returns the node of each name asked for. An unknown name is an
// [ErrNoTensor] error naming the nearest tensor names.
//
// [Parse] checks the structure only. [Model.Check] and Build report every node on the path to
// the asked-for tensors whose operator the importer lacks, together, in one
// [*UnsupportedError] (node names, op types and counts, with what to do next: ask for a
// tensor before them, or re-export with the supported operators).
//
// # Parameters, freezing and the untie rule
//
// Every FLOAT or DOUBLE initializer of rank ≥ 1 is a parameter, keyed by its name (rank-0 and
// integer initializers are constants). Each parameter is trainable or frozen, chosen once
// when the Params are made ([Model.NewParamsFor] and its [TrainOptions]):
//   - By default an initializer that only feeds the input preprocessing is frozen: one whose
//     every path to the outputs enters a layer (Gemm, MatMul, Conv, ConvTranspose, a
//     normalisation, LSTM, GRU, RNN, or a LayerNorm exported as primitives) through its data
//     input while no layer precedes it yet. That is an observation normaliser's mean and
//     variance (VecNormalize, Sample Factory) and the clip bounds. A layer's weights and
//     biases, a LayerNorm's scale and shift, and parameters that reach an output without
//     any layer (SB3's log_std) train.
//   - Parameters none of the asked-for outputs depends on are frozen.
//   - TrainOptions.Train and TrainOptions.Freeze are regular expressions over parameter
//     names that override the default; Freeze is applied last.
//
// Frozen parameters are still graph nodes bound to the Params (they compute, and
// [Params.CopyFrom] sets them), but they are not among [Graph.Learnables], get no gradient,
// and stay out of [Params.Flat], whose layout is [Params.TrainableNames]. WriteBack writes
// every parameter, frozen ones unchanged. gorgonia.Grad refuses parameters the cost does not
// depend on: differentiate with respect to Learnables, which holds exactly the trainable
// parameters the built tensors use ([Graph.Gradients] writes zeros for the others).
//
// PyTorch's exporter deduplicates initializers with equal values: several zero-initialised
// biases become one initializer read through Identity nodes (Identity(critic.0.bias) →
// actor.0.bias, ...). Imported naively they would be one tied parameter, which is not what
// PyTorch trained. So an Identity whose input is a parameter initializer becomes a parameter of
// its own, named after the Identity's output and initialised with a copy of the shared value
// ([Model.Untied] lists them). [Model.WriteBack] writes each as an initializer of that name and
// drops the Identity node: the written graph keeps every original input, output and tensor name
// and computes the same function, with untied weights.
//
// # Inputs of integer type
//
// Inputs may be float, double or integer (uint8 pixels, int64 indices); [Input.ElemType]
// says which. Every graph node holds floats, so feed an integer input's values converted to
// the graph's float type: an Atari CNN taking uint8 [B,4,84,84] is fed 0..255 as float32, and
// its Cast and Div by 255 compute as in ONNX Runtime. A Cast to an integer type truncates
// towards zero and has no gradient.
//
// # Recurrent layers
//
// LSTM (gates iofc, optional peepholes), GRU (gates zrh, linear_before_reset either way) and
// RNN follow ONNX's semantics with the default activations: layout 0 ([seq, batch, input])
// or 1 ([batch, seq, input]), forward, reverse or bidirectional, initial_h and initial_c as
// inputs or absent (zeros). The layer is unrolled over the whole sequence into gorgonia nodes,
// so gradients flow through time over every step (the learner feeds whole sequences).
// sequence_lens must be full: constant lengths shorter than the sequence are refused, and
// lengths fed at run time are taken to be full. Cell clipping, input_forget and other
// activations are refused with [ErrUnsupported].
//
// # Supported operators
//
// Arithmetic: Add, Sub, Mul, Div (numpy broadcasting on up to 4 dimensions), Pow, Min, Max,
// Sum, Mean (any rank of broadcasting), Neg, Abs, Reciprocal, Sqrt, Exp, Log, Erf, Sign,
// Floor, Ceil, Round, Clip (bounds as attributes before opset 11, as inputs from 11).
// Activations: Relu, LeakyRelu, Elu, Selu, Sigmoid, HardSigmoid, HardSwish, Tanh, Softplus,
// Softsign (SiLU exports as Sigmoid and Mul, GELU through Erf), Softmax and LogSoftmax (the
// opset's axis rule: from opset 13 along `axis` alone, default -1; before 13 over the input
// coerced to 2-D at `axis`, default 1). Layers: Gemm (alpha, beta, transA, transB, broadcast
// C), MatMul (2-D, N-D by 2-D, and batched N-D by N-D with equal batch dimensions), Conv (2-D,
// NCHW, group 1, symmetric pads, strides, dilations, auto_pad), LayerNormalization (opset 17,
// axis, epsilon; output Y only), LSTM, GRU, RNN. Reductions: ReduceSum, ReduceMean,
// ReduceMax, ReduceMin, ReduceLogSumExp, ReduceLogSum, ReduceSumSquare, ReduceL1, ReduceL2
// (axes as attribute or input per opset, keepdims, noop_with_empty_axes). Shapes and
// indexing: Flatten, Reshape (0 and -1, allowzero), Concat, Identity, Constant,
// ConstantOfShape, Range, Unsqueeze and Squeeze (axes as attribute before opset 13, as input
// from 13), Shape (start/end), Expand, Transpose, Slice (any steps), Split, Tile, Gather,
// GatherElements, Cast. Selection and logic: Where, Equal, Greater, GreaterOrEqual, Less,
// LessOrEqual, And, Or, Xor, Not, and If whose condition is known when the graph is built.
// Forward only (no gradient): ArgMax, ArgMin (as behind an actions output), the comparisons
// and logic, Cast to an integer type; Where, Gather and GatherElements pass gradients to
// their data, not to the condition or indices. [SupportedOps] lists them. Attribute values
// outside these limits (grouped or asymmetric Conv, run-time shapes, a condition computed at
// run time) make Build fail with an error wrapping [ErrUnsupported].
//
// Gorgonia lacks most of these operators; the importer computes them with ops of its own whose
// forward pass and gradient are Go functions (in float64, whatever the graph's type), checked
// against ONNX Runtime and finite differences.
//
// # Fused dense layers
//
// A Gemm (alpha 1, beta 1, no transA) or a 2-D MatMul followed by an Add of a bias row,
// then a Tanh or Relu, whose intermediate tensors nothing else reads (and none is asked for),
// is built as one op y = act(x·op(W) + b) over the float32 matrix kernels of
// internal/kernels that the native policies use, with an analytic gradient (activation
// derivative, two products, the bias's column sum); float64 graphs run plain loops. On the
// CleanRL CartPole actor-critic this brings an imported training step close to the native
// one's speed instead of an order of magnitude slower (BenchmarkTrainStep runs both).
// [BuildOptions.NoFusion] builds every node on its own. Gorgonia's tape machine may overwrite a value in
// place after its last reader, so the importer copies where that would be unsafe: reshapes copy
// rather than share memory, and an asked-for tensor that other nodes read is returned as a copy.
//
// # Threading and ownership
//
// A [Model] is immutable and safe for concurrent use. A [Graph], its gorgonia graph and the
// tape machine running it belong to one goroutine. [Params] is shared: every graph built over
// it reads the same tensors (no copies), which must not be written while any of those graphs
// runs; update them in place between runs (an optimiser step, [Params.CopyFrom]) and every
// graph sees the new values at its next run. Running a graph never writes the parameters.
// WriteBack reads Params, so it too must not overlap an update. The Model keeps its own copy
// of the ONNX message; WriteBack returns new bytes and changes nothing.
//
// # Errors
//
// Errors wrap the sentinels [ErrModel], [ErrUnsupported], [ErrShape], [ErrParams] and
// [ErrNoTensor] with the node or tensor concerned. Bad models, shapes and parameters are
// errors, never panics (FuzzParse checks Parse, Check, NewParamsFor, Build and WriteBack on
// arbitrary bytes): Build recovers gorgonia's panics and returns them as [ErrShape] errors
// naming the node, and no tensor of more than 2^28 values is made.
package graph

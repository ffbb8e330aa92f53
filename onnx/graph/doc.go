// Package graph imports ONNX policies into gorgonia graphs for fine-tuning, and writes the
// trained weights back into the original ONNX model.
//
// # Lifecycle
//
//	m, err := graph.Parse(onnxBytes)      // check the model once: ops, names, initializers
//	params := m.NewParams()               // one shared set of float32 weights, by initializer name
//	for each tower {                      // one gorgonia graph per goroutine
//		g := gorgonia.NewGraph()
//		gr, err := m.Build(g, params, towerBatch)  // parameter nodes bound to params' tensors
//		cost := ... gr.Outputs() ...
//		grads, err := gorgonia.Grad(cost, gr.Learnables()...)
//		vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(gr.Learnables()...))
//	}
//	// each step: gorgonia.Let(gr.Inputs()[0], slice) and vm.RunAll() per tower (in parallel),
//	// then average the towers' gradients and update params' tensors in place, between runs.
//	data, err := m.WriteBack(params, graph.WriteOptions{BumpVersion: true})  // new ONNX bytes
//
// gorgonia.Grad refuses parameters the cost does not depend on: differentiate with respect
// to the learnables that reach it (a policy loss over every output reaches all of them).
//
// [Import] does Parse, NewParams and Build in one call for a single graph.
//
// Gorgonia graphs have static shapes, so a graph is built for one batch size; the ONNX
// model's dynamic batch dimension (dimension 0 of each input) is fixed by Build. Shape
// arithmetic (Shape, Gather, Unsqueeze, Concat, Reshape targets, Constant) is evaluated at
// Build time; what remains becomes gorgonia nodes with derivatives. Graphs compute in the
// element type of their Params: float32, or float64 after [Params.As] (used by the
// finite-difference gradient checks).
//
// # Parameters and the untie rule
//
// Every FLOAT or DOUBLE initializer of rank ≥ 1 is a parameter, keyed by its name (rank-0 and
// integer initializers are constants). That includes buffers such as observation-normalisation
// statistics, which PyTorch exports as initializers too: leave their nodes out of the set you
// optimise if they must stay fixed.
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
// # Supported operators
//
// Add, Sub, Mul, Div (numpy broadcasting on up to 4 dimensions), Gemm (alpha, beta, transA,
// transB, broadcast C), MatMul (2-D, N-D by 2-D, and batched N-D by N-D with equal batch
// dimensions), Relu, Tanh, Sigmoid, Exp, Neg, Softmax and LogSoftmax (the opset's axis rule:
// from opset 13 along `axis` alone, default -1; before 13 over the input coerced to 2-D at
// `axis`, default 1), Conv (2-D, NCHW, group 1, symmetric pads, strides, dilations, auto_pad),
// Flatten, Reshape (0 and -1, allowzero), Concat, Identity, Constant, Unsqueeze and Squeeze
// (axes as attribute before opset 13, as input from 13), Shape (start/end), Expand, and Gather
// on constants only. [SupportedOps] lists them. Any other operator, or one from another domain,
// makes [Parse] fail with an [*UnsupportedError] naming the node, its op type and this list;
// attribute values outside these limits (grouped or asymmetric Conv, run-time shapes) make
// Build fail with an error wrapping [ErrUnsupported].
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
// Errors wrap the sentinels [ErrModel], [ErrUnsupported], [ErrShape] and [ErrParams] with the
// node or tensor concerned. Bad models, shapes and parameters are errors, never panics: Build
// recovers gorgonia's panics and returns them as [ErrShape] errors naming the node.
package graph

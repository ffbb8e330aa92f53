// Package edit edits ONNX models before a session is made: it exposes inner tensors as graph
// outputs and makes a fixed batch dimension dynamic.
//
// # Exposing tensors
//
// [Expose] appends named inner tensors (outputs of any node) to the graph's outputs, after the
// existing ones, so that an [onnx.Session] returns them too: a policy that outputs actions still
// computes logits or a mean inside, and binding a head to them needs them as outputs. Each new
// output's type comes from the graph's value_info or, failing that, from a small element-type
// propagation over the nodes (Cast gives its "to", ArgMax and Shape int64, comparisons bool,
// most operators their first input's type). [Tensors] lists every tensor the graph computes,
// with element type and shape, by exposing them all and reading the session's outputs; error
// messages offer them as candidates and layout recognition matches shapes against them.
//
// # Fixed batch
//
// Exporters that trace without dynamic axes (Stable-Baselines3's documented recipe, Sample
// Factory's exporter for recurrent policies) fix the batch at the export batch, usually 1.
// [DynamicBatch] rewrites such a model so the batch is dynamic. It measures the shape of every
// tensor at the fixed batch with ONNX Runtime, then propagates the batch axis from the inputs
// through the graph operator by operator, following shape arithmetic (Shape, Gather, Concat...)
// by value. Where the batch is tied to a constant it rewrites it: graph input, output and
// value_info dimensions, Reshape targets (to 0 or -1), Expand shapes, Slice ends, Squeeze
// without axes (given explicit axes). Constants that must grow with the batch (torch.zeros(1, h)
// joined to batched rows, an internal zero recurrent state) are expanded to the run-time batch by
// nodes it inserts. Which input axis is the batch (a recurrent state shaped [layers, batch,
// hidden] has it on axis 1) and which dimension of a Reshape's output carries it are inferred:
// the analysis tries the candidates in turn until the graph is consistent.
//
// Then the rewrite is verified: the original runs on K rows one fixed batch at a time, the
// rewritten model on all K rows at once and on each row alone, and every output row must agree
// (within 1e-5 by default). When the batch cannot be freed (it is reduced over, indexed away,
// folded into another dimension, counted by MaxPool's indices) or verification fails, the error
// wraps [ErrFixedBatch] and says why, so the caller can run the original at its fixed batch and
// tell the user. Names, opset, metadata_props, initializers and node order are kept; new nodes
// and constants are named under "dynbatch/" or after the tensor they replace.
//
// # Lifecycle and threading
//
// Every function is a pure function of its arguments: it reads the model bytes, never modifies
// them, returns new bytes owned by the caller and keeps no state between calls. All are safe
// for concurrent use. [Tensors] and [DynamicBatch] create ONNX Runtime sessions (loading the
// library on first use, see [onnx.Init]) and close them before returning; they check the
// context between steps.
package edit

// Package models defines policy architectures as gorgonia graphs (MLP and Nature CNN trunks,
// categorical and Gaussian heads, value heads), their export to ONNX, and the checkpoint format
// of parameters and optimiser state. It never runs environments.
//
// # Architectures
//
// A [Config] names the head and spaces (a [head.Spec], whose ObsShape is required), the trunk
// ([MLP] or [NatureCNN]), the hidden widths, the activation and whether actor and critic
// share a trunk. The zero value plus a Spec is CleanRL's MLP agent: separate 64×64 tanh trunks.
// Parameters carry PyTorch state_dict names as CleanRL's agents do:
//
//	MLP, separate trunks:  critic.{0,2,4}.{weight,bias}, actor.{0,2,4}.{weight,bias}
//	                       (actor_mean.* and actor_logstd for a Gaussian head)
//	MLP, shared trunk:     network.{0,2,...}.*, critic.*, actor.* (or actor_mean.*, actor_logstd)
//	NatureCNN:             network.{0,2,4}.* (convolutions), network.7.* (linear 512),
//	                       actor.* (or actor_mean.*, actor_logstd), critic.*
//
// (An MLP over observations of rank > 1 starts with a flatten, which shifts the indices by one.)
// [NewParams] initialises them as CleanRL's layer_init: orthogonal weights
// (torch.nn.init.orthogonal_, seeded by the caller's *rand.Rand) with gain √2 for hidden layers
// and convolutions, 0.01 for the policy output, 1 for the value output; zero biases; the
// Gaussian log_std at Config.LogStdInit.
//
// # Weight layout
//
// All parameters are float32, row-major. Linear weights are stored [in, out], the transpose of
// PyTorch's [out, in], so a layer is x·W + b (ONNX Gemm with transB=0). Convolution weights are
// [out, in, kh, kw] as in PyTorch and ONNX Conv; images are NCHW [batch, C, H, W] holding
// 0..255, divided by 255 inside the graph. Biases are [out]; actor_logstd is [1, d]. A
// [Params] lays all parameters back to back in one flat slice ([Params.Data]) in
// [Params.Names] order; [Params.Offset] and [Params.Shape] locate each.
//
// # Lifecycle
//
//  1. NewParams(cfg, rng): the one shared copy of the parameters.
//  2. Build(G.NewGraph(), params, batch): a [Policy] for a fixed batch size (gorgonia graphs
//     have static shapes); one per tower. Its nodes (Obs, Logits or Mean/LogStd, Value) are
//     the forward outputs.
//  3. Optionally grow the graph for learning: LogProb and Entropy (head-specific nodes of shape
//     [batch]), Input for the loss's own data (advantages, returns), any gorgonia ops for the
//     loss (engine/ owns the losses), Watch for nodes to Read, and Backward(loss).
//  4. Compile: the graph is frozen, and made runnable: as a plan (below) when it can be, else
//     as gorgonia's tape machine.
//  5. Per minibatch: write ObsData (and SetActions/SetBoxActions, the Input buffers), Run, then
//     Read outputs and Grads(flat) (gradients of this run, in the layout of Params.Data).
//  6. Close.
//
// Dense layers are not gorgonia's matrix product, broadcast add and activation but one fused
// op per layer, act(x·W + b), whose gradient ops (activation derivative, the two products, the
// bias's column sum) run the float32 kernels of internal/kernels (cgo, with SSE2, AVX2 and
// AVX-512 copies picked at start-up). The first layer makes no gradient for the observations.
// Where a hidden layer's output feeds only the next dense layer, that layer's input gradient is
// made with the hidden activation's derivative applied in the same kernel (no separate pass).
// These ops, and the categorical head's log softmax, keep their output memory between runs, and
// a parameter's gradient op that nothing else reads writes straight into the policy's flat
// gradient buffer, which Grads copies out.
//
// # Plans
//
// gorgonia's tape machine interprets a program whose bookkeeping (log-argument boxing, map
// lookups, value binding, a dozen allocations per run) costs more than the arithmetic of the
// 64×64 MLP at a PPO minibatch. Compile therefore runs a graph made only of this package's
// ops, ops of other packages that neither overwrite an input nor call external code (the
// engine's fused losses), inputs, constants and Watch's reads on a plan instead (exec.go): the
// same nodes in the same order, each op's Do called on its inputs' values, nothing allocated.
// A graph with any of gorgonia's own ops (the reference layers, LogProb and Entropy, a Gaussian
// head's broadcast log std, a convolution) takes the tape machine. Results are the same bits
// either way; a plan does not bind values to the nodes, so read them with Read and Grads.
//
// [Export] (or [ExportModel]) writes the current parameters as an ONNX model for the batchers:
// input "obs" [batch, obs_shape...], outputs "logits" and "value" (categorical) or "mean",
// "log_std" and "value" (Gaussian), all with a dynamic "batch" dimension, opset [Opset], and
// the towerrl.* metadata of the Spec with the given version. ONNX Runtime on it matches the
// gorgonia forward to 1e-5.
//
// # Threading and ownership
//
// A Policy (its graph, tape machine, input buffers and Read values) belongs to one goroutine
// at a time: give each tower its own. Policies built over one Params read its memory directly
// through their own tensor headers (no copies), so any number of them may Run concurrently
// while nobody writes the parameters, and every write to Params.Data (an optimiser step, Load)
// is seen by all of them on their next Run. Params does no locking: the learner must not
// update parameters while a tower runs. gorgonia shares some package-level nodes between graphs,
// so this package serialises its own graph construction (Build, Input, LogProb, Entropy, Watch,
// Backward, Compile) behind one lock; towers may be built from their own goroutines, and the
// caller's own loss ops on different graphs have shown no race in tests, but building all towers
// before starting them is the safest. gorgonia's tape machine reuses memory between nodes,
// so read node values only through Read on watched nodes. Run executes the plan, or the tape,
// on the calling goroutine (package internal/tape: gorgonia's own RunAll would hand every run
// to a new goroutine on another OS thread, two thread switches per run); Build, Compile and
// Run turn gorgonia panics into errors wrapping [ErrGraph]. Shapes are still checked when the graph is
// built, since a graph that takes RunAll's path (a CUDA build) cannot recover panics inside its
// run goroutine.
//
// # Checkpoints
//
// A [Checkpoint] holds named float32 tensors (the parameters under their own names, and
// optimiser slots by convention under "<optimiser>.<slot>/<param>", e.g. "adam.m/actor.0.weight"
// and "adam.v/actor.0.weight"), named int64s (e.g. "step", "iteration", "adam.step"), float64s
// and byte strings (e.g. "rng/<stream>" holding a math/rand/v2 PCG's MarshalBinary). Version 1
// of the file format is, all integers little-endian:
//
//	header   8 bytes  magic "TWRLCKPT"
//	         uint32   format version (1)
//	         uint32   flags (0)
//	         uint64   body length N
//	body     N bytes:
//	         uint32 count, then per tensor: string name, uint32 rank, rank × uint64 dims,
//	                 product(dims) × float32 (IEEE-754 bits, row-major), in insertion order
//	         uint32 count, then per int:    string name, int64
//	         uint32 count, then per float:  string name, float64 (IEEE-754 bits)
//	         uint32 count, then per bytes:  string name, uint64 length, the bytes
//	         (a string is a uint32 length and UTF-8 bytes; scalar sections sorted by name)
//	trailer  uint32   CRC-32C (Castagnoli) of header and body
//
// Values are stored bit for bit, so a save and load restores parameters and optimiser state
// exactly. [SaveCheckpoint] writes a temporary file in the target directory, syncs it and renames
// it over the target, so a crash leaves the old or the new checkpoint, never a torn one.
// [LoadCheckpoint] checks magic, version, length and checksum before decoding, then bounds-checks
// every record: a truncated or corrupt file is an error wrapping [ErrCheckpoint], never a panic.
package models

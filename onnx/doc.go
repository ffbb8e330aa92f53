// Package onnx runs ONNX models through ONNX Runtime (github.com/yalue/onnxruntime_go).
//
// # Library
//
// ONNX Runtime is a shared library loaded once per process by [Init] (which [Open] and [New]
// call): from the configured path, else the TOWERRL_ORT_LIB environment variable, else the
// per-user cache that `make setup` fills ([CacheDir]). Before handing the library to
// onnxruntime_go, Init checks that it is ONNX Runtime and serves C API version [APIVersion],
// so a wrong file or an old release is an error naming it, not a crash. Init is safe for
// concurrent use.
//
// # Sessions
//
// A [Session] owns one ONNX Runtime session and host buffers for every input and output,
// sized once for Config.MaxBatch rows. Callers write rows into the buffer from [Input], call
// Run(batch) for any batch up to MaxBatch, and read [Output]. Each batch size gets its own
// I/O binding over the same buffers the first time it is used, so Run allocates nothing
// after that. Output shapes are learned at creation by running the model on zero batches of
// 1 and 2. [Feed] is the checked way in: it validates element type, rank, row shape and batch;
// [FeedRepeat] fills a larger batch by repeating the rows it is given. Run refuses NaN in
// floating-point inputs unless Config.AllowNaN is set.
//
// # Fed weights
//
// Config.Weights names float32 initializers the session reads from caller-owned buffers
// instead of from the model: New lists each among the graph's inputs, which makes it an
// "overridable initializer" (an input with a default value; IR version 4 or later, to which
// an older model is raised), and every Run binds the buffers of the set chosen with
// [Session.UseWeights] through the same I/O binding as the inputs. [Session.NewWeights]
// wraps caller memory as a set, once; switching sets is a pointer swap, and each batch
// size's binding takes the new set at its next Run (one small allocation per weight in
// onnxruntime_go, so a switch per publish, not per step). The caller may write a set while
// the session runs another, which is how a batcher double-buffers published weights. On CPU
// the session reads the buffers at every Run; another provider may copy them to its device
// when the set is bound, so to change weights write the set not in use and switch to it.
// [WeightValues] reads an initializer's values from a model, to fill the first sets.
//
// ONNX Runtime neither constant-folds nor pre-packs an overridable initializer: a fed MLP
// runs within a few percent of the same model with constant weights, and a convolution loses
// the constant-weight NCHWc layout and runs several times slower. The alternatives were
// measured too: user-owned initializers (the C API's AddInitializer, which onnxruntime_go does
// not wrap) with pre-packing disabled cost about the same where they work, but ONNX Runtime
// still copies or folds them when it optimises the graph, so rewriting their memory is
// silently ignored in part (the Atari CNN's and SB3's Gaussian PPO's outputs were off by 0.25
// and 0.74) unless every optimisation is off, which costs as much as feeding; building a new
// session per publish costs milliseconds, against microseconds to write a set. The figures,
// with the benchmarks that measure them: docs/benchmarks.md.
//
// # Untrusted models
//
// Model bytes are parsed with the Go protobuf types (package onnxpb) before ONNX Runtime sees
// them, and a model without an IR version, a graph, an operator set or outputs, or with
// negative or overflowing declared dimensions, initializers whose raw data disagrees with
// their shape, or weights in external files, is refused with an [ErrModel] error. Every buffer
// size that follows from the model's shapes and Config.MaxBatch (or the model's fixed batch)
// is checked for overflow and against the memory available — MemAvailable in /proc/meminfo
// (16 GiB assumed when it cannot be read), lowered to the Go memory limit (GOMEMLIMIT) when
// one is set — before it is allocated, the zero batches that learn the output shapes
// included: an [ErrTooLarge] error names the tensor, its shape and the batch.
//
// [Parse] makes that check once and returns a [Model] (the bytes with their message) that the
// next readers take instead of the bytes: [NewSession] for each worker's session, onnx/edit's
// DynamicBatchModel, package bind's FromModel. New is Parse then NewSession.
//
// Ownership and threading: a Session's description methods (Inputs, Outputs, Weights,
// Metadata, MaxBatch, Provider, InputIndex, OutputIndex) are safe for concurrent use. Run,
// Feed, NewWeights, UseWeights and the buffers belong to one goroutine at a time; give each
// worker its own Session. Buffers stay valid until Close; output contents until the next Run.
// Fed weight sets are the caller's memory: write one only while no Run reads it. Close is
// idempotent.
//
// # Execution providers
//
// Config.Provider picks cpu (default), cuda or auto. cuda registers ONNX Runtime's CUDA
// provider plugin (a separate library, Config.CUDAProviderLibrary or the cache), finds a CUDA
// device with GetEpDevices and appends it with AppendExecutionProviderV2; when that cannot be
// done it is an error saying why. auto falls back to CPU with a log line. Config.CUDAOptions
// passes the provider's own options (use_tf32, cudnn_conv_algo_search, ...) by name;
// cudnn_conv_algo_search is HEURISTIC unless given (ONNX Runtime's EXHAUSTIVE search chose
// slower convolutions on the H200). A CUDA session page-locks its host buffers
// (cudaHostRegister) unless Config.PageableHost is set. The
// buffers stay in host memory: ONNX Runtime copies a host input to the GPU when it is bound
// to a run, so on CUDA every Run binds the inputs again (the input's copy is part of every
// Run's time), and copies the outputs back. Fed weights are copied when a set is selected. `make gpu-setup`
// puts the plugin (built for CUDA 13) in the cache; it needs the CUDA 13 user-space libraries on
// LD_LIBRARY_PATH. The plugin installs its own signal handlers when it loads and initialises,
// replacing Go's (onnxruntime_go issue 140: Ctrl-C would crash instead of reaching
// signal.Notify); New saves every handler before it touches a non-CPU provider and puts back
// any that changed once the session is created and has run, saying so in the log.
package onnx

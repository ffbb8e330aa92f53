package onnx

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/internal/bounded"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// DefaultMaxBatch is the largest batch a Session accepts when Config.MaxBatch is zero.
const DefaultMaxBatch = 1024

// Config configures a [Session]. The zero value is usable: CPU, batches up to
// [DefaultMaxBatch], one intra-op thread, NaN inputs refused.
type Config struct {
	// Library is the ONNX Runtime shared library to load if none is loaded yet.
	// Default: the LibraryEnv variable, then the per-user cache (see [LibraryPath]).
	Library string
	// MaxBatch is the largest batch Run accepts; buffers for it are allocated once, after
	// checking that they fit in the memory available. Default [DefaultMaxBatch]. Ignored
	// for models whose batch dimension is fixed.
	MaxBatch int
	// IntraOpThreads is the number of threads ONNX Runtime uses inside one operator:
	// 1 to runtime.NumCPU(), or -1 to let ONNX Runtime choose (one per physical core).
	// Default 1: batchers run one session per worker goroutine, each on its own core.
	IntraOpThreads int
	// InterOpThreads is the number of threads running independent operators in
	// parallel: 1 to runtime.NumCPU(), or -1 to let ONNX Runtime choose. Default 1.
	InterOpThreads int
	// Provider is the execution provider: ProviderCPU (default), ProviderCUDA or ProviderAuto.
	Provider Provider
	// CUDAProviderLibrary is the path of ONNX Runtime's CUDA execution provider plugin.
	// Default: libonnxruntime_providers_cuda.so in [CacheDir].
	CUDAProviderLibrary string
	// CUDAOptions are the CUDA execution provider's options, by their ONNX Runtime names
	// (for example "use_tf32": "0" for full float32 matrix products and convolutions),
	// passed to AppendExecutionProviderV2 when the session runs on CUDA; the provider
	// refuses a name it does not know, and the session with it. Ignored on CPU. Default:
	// the provider's own defaults, except cudnn_conv_algo_search, which is HEURISTIC unless
	// given here (ONNX Runtime's EXHAUSTIVE chose algorithms 2.5 times slower for the
	// Nature-CNN fixture at batch 4096 on the H200; docs/GPU.md).
	CUDAOptions map[string]string
	// PageableHost leaves a CUDA session's host buffers pageable. Default false: they are
	// page-locked (cudaHostRegister, from the libcudart.so.13 the plugin loads), so that each
	// Run's copies to and from the GPU go at the bus's speed, about 7 times faster on the H200
	// machine; when that cannot be done the log says why and they stay pageable.
	PageableHost bool
	// Shapes fixes dynamic dimensions other than the batch, by input name: the full shape
	// with the batch dimension given as -1. Naming an input the model lacks is an error.
	// Default: none (such inputs are an error).
	Shapes map[string][]int64
	// AllowNaN skips the NaN check Run does on floating-point inputs. Default false.
	AllowNaN bool
	// Weights names float32 initializers (rank 1 or more) that the session reads from
	// caller-owned buffers at every Run instead of from the model ([Session.NewWeights],
	// [Session.UseWeights]): new weights take effect at the next Run, with no new session.
	// ONNX Runtime sees them as graph inputs with default values ("overridable
	// initializers"), which it neither constant-folds nor pre-packs; until a set is used,
	// Run computes with the model's values. Run does not check fed weights for NaN.
	// Default: none.
	Weights []string
	// Logger receives set-up messages (provider fallback). Default: no logging.
	Logger *zap.Logger
	// SetupTimeout bounds each step of New that ONNX Runtime runs and Go cannot interrupt:
	// creating the session, and each run on a zero batch that learns the output shapes (a
	// Loop of 10^15 iterations, or a graph of 100,000 layers that takes minutes to optimise).
	// Past it, or when New's ctx ends, New returns an [ErrTimeout] error: a run is
	// terminated; a session being created is destroyed by a goroutine once ONNX Runtime
	// returns. Default [DefaultSetupTimeout].
	SetupTimeout time.Duration
}

// DefaultSetupTimeout is Config.SetupTimeout's default: a policy's session is made and
// probed in well under a second on a CPU (a few on CUDA, loading cuDNN).
const DefaultSetupTimeout = time.Minute

// ErrTimeout is wrapped by New's error when creating a session or probing its outputs takes
// longer than Config.SetupTimeout, or New's ctx ended meanwhile.
var ErrTimeout = errors.New("onnx: session set-up did not finish in time")

func (c Config) withDefaults() (Config, error) {
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.SetupTimeout == 0 {
		c.SetupTimeout = DefaultSetupTimeout
	}
	if c.SetupTimeout < 0 {
		return c, fmt.Errorf("%w: SetupTimeout is %v, must be positive", ErrConfig, c.SetupTimeout)
	}
	if c.MaxBatch < 0 {
		return c, fmt.Errorf("%w: MaxBatch is %d, must be positive", ErrConfig, c.MaxBatch)
	}
	if c.IntraOpThreads == 0 {
		c.IntraOpThreads = 1
	}
	if c.InterOpThreads == 0 {
		c.InterOpThreads = 1
	}
	for _, t := range []struct {
		field string
		n     int
	}{{"IntraOpThreads", c.IntraOpThreads}, {"InterOpThreads", c.InterOpThreads}} {
		if t.n != -1 && (t.n < 1 || t.n > goruntime.NumCPU()) {
			return c, fmt.Errorf("%w: %s is %d; want 1 to %d (this machine's CPUs), or -1 to let ONNX Runtime choose",
				ErrConfig, t.field, t.n, goruntime.NumCPU())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Shapes)) {
		for k, d := range c.Shapes[name] {
			if d < -1 {
				return c, fmt.Errorf("%w: Config.Shapes[%q] dimension %d is %d; want a size, or -1 for the batch", ErrConfig, name, k, d)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.CUDAOptions)) {
		if k == "" || strings.ContainsAny(k, "= \t") {
			return c, fmt.Errorf("%w: Config.CUDAOptions has the name %q; want an option name of the CUDA execution provider, e.g. use_tf32", ErrConfig, k)
		}
	}
	if c.Provider == "" {
		c.Provider = ProviderCPU
	}
	if err := c.Provider.validate(); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Validate checks the fields that do not depend on a model (MaxBatch, thread counts,
// Provider, the sizes in Shapes), as [New] does first: a command can check its flags
// before reading any file.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// TensorInfo describes one input or output of a model.
type TensorInfo struct {
	Name  string
	DType DType
	// Declared is the shape the model declares; -1 marks a dynamic dimension.
	Declared []int64
	// Batched reports whether dimension 0 is the batch dimension.
	Batched bool
	// Row is the concrete shape of one batch row (dimensions 1...) when Batched,
	// otherwise the whole concrete shape.
	Row []int64
}

// RowSize is the number of elements in one row (the whole tensor when not Batched).
func (t TensorInfo) RowSize() int { return int(product(t.Row)) }

// Shape is the concrete shape of the tensor for a batch of n rows.
func (t TensorInfo) Shape(n int) []int64 {
	if !t.Batched {
		return slices.Clone(t.Row)
	}
	return append([]int64{int64(n)}, t.Row...)
}

func (t TensorInfo) String() string {
	dims := make([]string, len(t.Declared))
	for i, d := range t.Declared {
		if d < 0 {
			dims[i] = "?"
		} else {
			dims[i] = fmt.Sprint(d)
		}
	}
	return fmt.Sprintf("%s %s[%s]", t.Name, t.DType, strings.Join(dims, ","))
}

// port is an input or output with its preallocated host memory.
type port struct {
	TensorInfo
	mem []uint64 // MaxBatch rows, 8-byte aligned for every DType
}

func (p *port) elems(batch int) int {
	if !p.Batched {
		return p.RowSize()
	}
	return batch * p.RowSize()
}

// binding holds the ONNX Runtime tensors and I/O binding for one batch size; they view the
// ports' memory, so binding them once makes Run allocation-free.
type binding struct {
	io      *ort.IoBinding
	values  []ort.Value
	weights *Weights // the fed weight set bound, nil while the model's own values are used
	use     uint64   // Session.uses when weights was bound
}

// Session runs one ONNX model over batches held in buffers it allocates once.
//
// Metadata methods (Inputs, Outputs, Metadata, MaxBatch, Provider, InputIndex, OutputIndex)
// are safe for concurrent use. Run, Feed and the buffers returned by [Input] and [Output]
// belong to one goroutine at a time: a batcher gives each worker its own Session. Close must
// not race with Run.
type Session struct {
	cfg      Config
	sess     *ort.DynamicAdvancedSession
	inputs   []port
	outputs  []port
	maxBatch int
	static   bool // the model's batch dimension is fixed at maxBatch
	provider Provider
	meta     map[string]string
	bindings map[int]*binding // by batch size, made on first use
	weights  []port           // fed weights (Config.Weights), without memory: the caller's
	sets     []*Weights       // every set NewWeights made, released by Close
	current  *Weights         // the set Run binds; nil: the model's own values
	uses     uint64           // UseWeights calls so far
	rebind   bool             // bind the inputs at every Run (a provider that copies them at binding)
	pinned   [][]uint64       // the page-locked buffers, unlocked by Close
	closed   bool
}

// Open reads the model at path and creates a Session for it.
func Open(ctx context.Context, path string, cfg Config) (*Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := bounded.ReadFile("onnx: loading model", path, bounded.ModelLimit)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, data, cfg)
	if err != nil {
		return nil, fmt.Errorf("loading model %q: %w", path, err)
	}
	return s, nil
}

// New creates a Session for the serialized model, loading ONNX Runtime first if needed.
//
// Before ONNX Runtime sees the bytes, New parses them as an ONNX ModelProto and refuses one
// without an IR version, a graph, an operator set or outputs, or with absurd declared
// dimensions (an [ErrModel] error). Before allocating any buffer it checks the buffer's size
// for overflow and against the memory available (MemAvailable in /proc/meminfo, lowered to
// GOMEMLIMIT when set): an [ErrTooLarge] error names the tensor, its shape and the batch.
func New(ctx context.Context, model []byte, cfg Config) (*Session, error) {
	cfg, err := ready(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m, err := Parse(model)
	if err != nil {
		return nil, err
	}
	return openSession(ctx, m, cfg)
}

// NewSession creates a Session for a model parsed and checked once by [Parse], as New does
// for its bytes: many sessions of one model (a worker's each) parse it once.
func NewSession(ctx context.Context, m *Model, cfg Config) (*Session, error) {
	cfg, err := ready(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return openSession(ctx, m, cfg)
}

// ready is what New and NewSession check before a session: the context is live, cfg takes its
// defaults and is valid, and ONNX Runtime is loaded.
func ready(ctx context.Context, cfg Config) (Config, error) {
	if err := ctx.Err(); err != nil {
		return cfg, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return cfg, err
	}
	return cfg, Init(cfg.Library)
}

// openSession is New after the config's defaults, ONNX Runtime's loading and the model's check.
func openSession(ctx context.Context, m *Model, cfg Config) (*Session, error) {
	model := m.data
	meta := metadata(m.pb)
	var weights []port
	var err error
	if len(cfg.Weights) > 0 {
		// feedWeights edits the message: this session's copy, not the shared one.
		if model, weights, err = feedWeights(proto.Clone(m.pb).(*onnxpb.ModelProto), cfg.Weights); err != nil {
			return nil, err
		}
	}
	ins, outs, err := ort.GetInputOutputInfoWithONNXData(model)
	if err != nil {
		return nil, fmt.Errorf("%w: not a readable ONNX model: %v", ErrModel, err)
	}
	s := &Session{cfg: cfg, maxBatch: cfg.MaxBatch, meta: meta, weights: weights}
	if s.inputs, err = ports(ins, "input"); err != nil {
		return nil, err
	}
	if s.outputs, err = ports(outs, "output"); err != nil {
		return nil, err
	}
	if err := s.resolveInputs(); err != nil {
		return nil, err
	}
	// The inputs' buffers, and a lower bound of each output's, must fit before ONNX Runtime
	// runs the model on zero batches (probe) and before they are allocated.
	mem := availableMemory()
	var total int64
	if err := s.checkSizes(s.inputs, "input", mem, &total); err != nil {
		return nil, err
	}
	if err := s.checkDeclaredOutputs(mem); err != nil {
		return nil, err
	}
	start := func() error {
		if err := s.open(ctx, model); err != nil {
			return err
		}
		if err := s.resolveOutputs(ctx); err != nil {
			return errors.Join(err, s.Close())
		}
		return nil
	}
	if cfg.Provider == ProviderCPU {
		err = start()
	} else {
		// Loading and first running the CUDA provider replaces Go's signal handlers.
		var restored int
		restored, err = keepGoSignals(start)
		if restored > 0 {
			cfg.Logger.Info("restored Go's signal handlers replaced by the CUDA execution provider", zap.Int("signals", restored))
		}
	}
	if err == nil {
		err = s.checkSizes(s.outputs, "output", mem, &total)
	}
	if err != nil {
		return nil, errors.Join(err, s.Close()) // Close is idempotent
	}
	pin := s.provider == ProviderCUDA && !cfg.PageableHost
	for _, ps := range [][]port{s.inputs, s.outputs} {
		for i := range ps {
			p := &ps[i]
			n := (p.elems(s.maxBatch)*p.DType.Size() + 7) / 8
			if !pin {
				p.mem = make([]uint64, n)
				continue
			}
			p.mem = pageAligned(n)
			if err := pinHost(p.mem); err != nil {
				cfg.Logger.Info("host buffers stay pageable", zap.Error(err))
				pin = false
				continue
			}
			s.pinned = append(s.pinned, p.mem)
		}
	}
	s.bindings = make(map[int]*binding)
	return s, nil
}

func ports(infos []ort.InputOutputInfo, kind string) ([]port, error) {
	ps := make([]port, len(infos))
	for i, info := range infos {
		if info.OrtValueType != ort.ONNXTypeTensor {
			return nil, fmt.Errorf("%w: %s %q is a %s; only tensors are supported", ErrModel, kind, info.Name, info.OrtValueType)
		}
		dt, name := fromORT(info.DataType)
		if dt == Unsupported {
			return nil, fmt.Errorf("%w: %s %q has element type %s; supported: float32, float64, int32, int64, uint8",
				ErrModel, kind, info.Name, name)
		}
		ps[i].TensorInfo = TensorInfo{Name: info.Name, DType: dt, Declared: slices.Clone([]int64(info.Dimensions))}
	}
	return ps, nil
}

// resolveInputs decides which inputs are batched and fixes their row shapes. An input whose
// first dimension is dynamic is batched; when no input is, the model has a static batch.
func (s *Session) resolveInputs() error {
	if err := s.checkShapes(); err != nil {
		return err
	}
	dynamic := false
	for i := range s.inputs {
		p := &s.inputs[i]
		shape := p.Declared
		if fixed, ok := s.cfg.Shapes[p.Name]; ok {
			if len(fixed) != len(shape) {
				return fmt.Errorf("%w: Config.Shapes[%q] has rank %d, the model's input has rank %d (%v)",
					ErrConfig, p.Name, len(fixed), len(shape), shape)
			}
			shape = fixed
		}
		p.Batched = len(shape) > 0 && shape[0] < 0
		dynamic = dynamic || p.Batched
		rest := shape
		if p.Batched {
			rest = shape[1:]
		}
		for d, n := range rest {
			if n < 0 {
				return fmt.Errorf("%w: input %q has a dynamic dimension %d besides the batch; fix it with Config.Shapes",
					ErrShape, p.Name, len(shape)-len(rest)+d)
			}
		}
		if _, ok := rowElems(rest); !ok {
			return fmt.Errorf("%w: input %q declares rows of shape %v, which hold more than 2^63 elements", ErrTooLarge, p.Name, rest)
		}
		p.Row = slices.Clone(rest)
	}
	if dynamic || len(s.inputs) == 0 {
		return nil
	}
	// Static batch: the first input's dimension 0 is the batch every call must have.
	first := &s.inputs[0]
	if len(first.Declared) == 0 {
		s.static, s.maxBatch = true, 1
		return nil
	}
	if first.Declared[0] == 0 {
		return fmt.Errorf("%w: input %q fixes the batch at 0 rows; re-export the model with a dynamic or positive batch", ErrShape, first.Name)
	}
	s.static, s.maxBatch = true, int(first.Declared[0])
	for i := range s.inputs {
		p := &s.inputs[i]
		if len(p.Row) > 0 && p.Row[0] == int64(s.maxBatch) {
			p.Batched, p.Row = true, p.Row[1:]
		}
	}
	return nil
}

func (s *Session) open(ctx context.Context, model []byte) error {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return fmt.Errorf("onnx: creating session options: %w", err)
	}
	destroy := true // opts, unless the creation still under way owns them
	defer func() {
		if destroy {
			opts.Destroy()
		}
	}()
	if s.cfg.IntraOpThreads > 0 {
		if err := opts.SetIntraOpNumThreads(s.cfg.IntraOpThreads); err != nil {
			return fmt.Errorf("onnx: setting IntraOpThreads=%d: %w", s.cfg.IntraOpThreads, err)
		}
	}
	if s.cfg.InterOpThreads > 0 {
		if err := opts.SetInterOpNumThreads(s.cfg.InterOpThreads); err != nil {
			return fmt.Errorf("onnx: setting InterOpThreads=%d: %w", s.cfg.InterOpThreads, err)
		}
	}
	if s.provider, err = appendProvider(opts, s.cfg); err != nil {
		return err
	}
	s.rebind = s.provider != ProviderCPU
	names := func(ps []port) []string {
		out := make([]string, len(ps))
		for i := range ps {
			out[i] = ps[i].Name
		}
		return out
	}
	type made struct {
		sess *ort.DynamicAdvancedSession
		err  error
	}
	done := make(chan made, 1)
	inNames, outNames := names(s.inputs), names(s.outputs)
	go func() {
		sess, err := ort.NewDynamicAdvancedSessionWithONNXData(model, inNames, outNames, opts)
		done <- made{sess, err}
	}()
	timer := time.NewTimer(s.cfg.SetupTimeout)
	defer timer.Stop()
	var m made
	select {
	case m = <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	if m.sess == nil && m.err == nil { // still being created: its goroutine cleans up
		destroy = false
		go func() {
			m := <-done
			if m.sess != nil {
				m.sess.Destroy()
			}
			opts.Destroy()
		}()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: creating the session: %w", ErrTimeout, err)
		}
		return fmt.Errorf("%w: ONNX Runtime was still creating the session after %v (a graph too large or too deep to optimise?); raise Config.SetupTimeout if the model is meant to be so",
			ErrTimeout, s.cfg.SetupTimeout)
	}
	if m.err != nil {
		return fmt.Errorf("%w: ONNX Runtime cannot create a session: %v", ErrModel, m.err)
	}
	s.sess = m.sess
	return nil
}

// resolveOutputs runs the model on zero inputs to learn each output's concrete shape: with a
// dynamic batch it runs batches of 1 and 2, and an output whose dimension 0 follows the batch
// is batched; one whose shape does not change is fixed.
func (s *Session) resolveOutputs(ctx context.Context) error {
	sizes := []int{1, 2}
	if s.static {
		sizes = []int{s.maxBatch}
	}
	shapes := make([][]ort.Shape, len(sizes))
	for k, n := range sizes {
		var err error
		if shapes[k], err = s.probe(ctx, n); err != nil {
			return err
		}
	}
	for i := range s.outputs {
		p := &s.outputs[i]
		a := shapes[0][i]
		switch {
		case s.static:
			p.Batched = len(a) > 0 && a[0] == int64(s.maxBatch)
		case slices.Equal(a, shapes[1][i]):
			p.Batched = false
		case len(a) > 0 && a[0] == 1 && shapes[1][i][0] == 2 && slices.Equal(a[1:], shapes[1][i][1:]):
			p.Batched = true
		default:
			return fmt.Errorf("%w: output %q has shape %v for a batch of 1 and %v for 2; only dimension 0 may follow the batch",
				ErrShape, p.Name, a, shapes[1][i])
		}
		p.Row = slices.Clone([]int64(a))
		if p.Batched {
			p.Row = p.Row[1:]
		}
	}
	return nil
}

func (s *Session) probe(ctx context.Context, batch int) ([]ort.Shape, error) {
	mem := availableMemory()
	var total int64
	for i := range s.inputs {
		if err := checkSize(&s.inputs[i], "input", batch, fmt.Sprintf("for a batch of %d that learns the output shapes", batch),
			"check the model's declared shape", mem, &total); err != nil {
			return nil, err
		}
	}
	ins := make([]ort.Value, len(s.inputs))
	outs := make([]ort.Value, len(s.outputs))
	defer func() {
		for _, v := range slices.Concat(ins, outs) {
			if !nilValue(v) {
				v.Destroy()
			}
		}
	}()
	for i := range s.inputs {
		p := &s.inputs[i]
		mem := make([]uint64, (p.elems(batch)*p.DType.Size()+7)/8)
		v, err := newValue(p.DType, p.Shape(batch), mem)
		if err != nil {
			return nil, fmt.Errorf("onnx: input %q: %w", p.Name, err)
		}
		ins[i] = v
	}
	ro, err := ort.NewRunOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: creating run options: %w", err)
	}
	defer ro.Destroy()
	// The run ends at the deadline or with ctx: ONNX Runtime checks the terminate flag
	// between kernels (a Loop between iterations).
	finished := make(chan struct{})
	var timedOut atomic.Bool
	var watch sync.WaitGroup // the watcher ends before ro is destroyed
	watch.Go(func() {
		timer := time.NewTimer(s.cfg.SetupTimeout)
		defer timer.Stop()
		select {
		case <-finished:
			return
		case <-timer.C:
		case <-ctx.Done():
		}
		timedOut.Store(true)
		_ = ro.Terminate()
	})
	err = s.sess.RunWithOptions(ins, outs, ro)
	close(finished)
	watch.Wait()
	if timedOut.Load() {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("%w: running the model on a zero batch of %d to learn its output shapes: %w", ErrTimeout, batch, cerr)
		}
		return nil, fmt.Errorf("%w: running the model on a zero batch of %d to learn its output shapes took longer than %v (a Loop with a huge or no trip count?); raise Config.SetupTimeout if the model is meant to be so",
			ErrTimeout, batch, s.cfg.SetupTimeout)
	}
	if err != nil {
		for i, v := range outs {
			if nilValue(v) && len(s.outputs[i].Declared) == 0 {
				err = fmt.Errorf("output %q is a scalar (rank 0); a policy's outputs need a batch dimension (export it as shape [1] or [batch])", s.outputs[i].Name)
				break
			}
		}
		return nil, fmt.Errorf("%w: running the model on a zero batch of %d to learn its output shapes: %v", ErrModel, batch, err)
	}
	shapes := make([]ort.Shape, len(outs))
	for i, v := range outs {
		if nilValue(v) {
			// onnxruntime_go cannot wrap an output it allocated without dimensions.
			return nil, fmt.Errorf("%w: output %q is a scalar (rank 0); a policy's outputs need a batch dimension (export it as shape [1] or [batch])",
				ErrModel, s.outputs[i].Name)
		}
		shapes[i] = v.GetShape().Clone()
	}
	return shapes, nil
}

// nilValue reports whether v is nil, or an interface holding a nil pointer (what
// onnxruntime_go leaves for an output it could not wrap).
func nilValue(v ort.Value) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

func newValue(d DType, shape []int64, mem []uint64) (ort.Value, error) {
	sh := ort.NewShape(shape...)
	switch d {
	case Float32:
		return ort.NewTensor(sh, view[float32](mem))
	case Float64:
		return ort.NewTensor(sh, view[float64](mem))
	case Int32:
		return ort.NewTensor(sh, view[int32](mem))
	case Int64:
		return ort.NewTensor(sh, view[int64](mem))
	case Uint8:
		return ort.NewTensor(sh, view[uint8](mem))
	}
	return nil, fmt.Errorf("%w: element type %s", ErrDType, d)
}

// view reinterprets the whole of mem as elements of T.
func view[T Element](mem []uint64) []T {
	var zero T
	n := len(mem) * 8 / int(unsafe.Sizeof(zero))
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem))), n)
}

// Inputs describes the model's inputs, in the model's order.
func (s *Session) Inputs() []TensorInfo { return infos(s.inputs) }

// Outputs describes the model's outputs, in the model's order.
func (s *Session) Outputs() []TensorInfo { return infos(s.outputs) }

func infos(ps []port) []TensorInfo {
	out := make([]TensorInfo, len(ps))
	for i := range ps {
		out[i] = ps[i].TensorInfo
		out[i].Declared = slices.Clone(out[i].Declared)
		out[i].Row = slices.Clone(out[i].Row)
	}
	return out
}

// InputIndex returns the index of the named input.
func (s *Session) InputIndex(name string) (int, error) { return index(s.inputs, name, "input") }

// OutputIndex returns the index of the named output.
func (s *Session) OutputIndex(name string) (int, error) { return index(s.outputs, name, "output") }

func index(ps []port, name, kind string) (int, error) {
	names := make([]string, len(ps))
	for i := range ps {
		if ps[i].Name == name {
			return i, nil
		}
		names[i] = fmt.Sprintf("%q", ps[i].Name)
	}
	return -1, fmt.Errorf("%w: the model has no %s %q; its %ss are %s", ErrInput, kind, name, kind, strings.Join(names, ", "))
}

// Metadata returns the model's metadata_props (the towerrl.* keys among them). The map is
// shared: do not modify it.
func (s *Session) Metadata() map[string]string { return s.meta }

// MaxBatch is the largest batch Run accepts (the only one, for a fixed-batch model).
func (s *Session) MaxBatch() int { return s.maxBatch }

// StaticBatch reports whether the model's batch dimension is fixed (Run then needs exactly MaxBatch rows).
func (s *Session) StaticBatch() bool { return s.static }

// Provider is the execution provider the session runs on.
func (s *Session) Provider() Provider { return s.provider }

// PinnedHost reports whether the session's host buffers are page-locked (a CUDA session,
// unless Config.PageableHost or the CUDA runtime refused).
func (s *Session) PinnedHost() bool { return len(s.pinned) > 0 }

func (s *Session) port(ps []port, i int, kind string) (*port, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if i < 0 || i >= len(ps) {
		return nil, fmt.Errorf("%w: %s index %d, the model has %d", ErrInput, kind, i, len(ps))
	}
	return &ps[i], nil
}

func buffer[T Element](s *Session, ps []port, i int, kind string) ([]T, error) {
	p, err := s.port(ps, i, kind)
	if err != nil {
		return nil, err
	}
	if want := DTypeOf[T](); p.DType != want {
		return nil, fmt.Errorf("%w: %s %q holds %s, not %s", ErrDType, kind, p.Name, p.DType, want)
	}
	return view[T](p.mem)[:p.elems(s.maxBatch)], nil
}

// Input returns the buffer of input i, sized for MaxBatch rows in row-major order. Write the
// first batch×RowSize elements, then call Run(batch). The buffer lives until Close.
func Input[T Element](s *Session, i int) ([]T, error) { return buffer[T](s, s.inputs, i, "input") }

// Output returns the buffer of output i, sized for MaxBatch rows; after Run(batch) its first
// batch×RowSize elements (RowSize for an unbatched output) hold the result, until the next Run.
func Output[T Element](s *Session, i int) ([]T, error) { return buffer[T](s, s.outputs, i, "output") }

// Feed copies data of the given shape into input i after checking its element type, rank,
// row shape and batch size against the model, and returns the batch size to pass to Run.
func Feed[T Element](s *Session, i int, shape []int64, data []T) (int, error) {
	return feed(s, i, shape, data, -1)
}

// FeedRepeat is [Feed] for a batch of batch rows made by repeating data's rows cyclically
// (row r of the batch is data's row r mod shape[0]; the first batch rows when data has more):
// a benchmark's way to fill a large batch from a few observations without copying them first.
// An input without a batch dimension is fed as Feed does.
func FeedRepeat[T Element](s *Session, i int, shape []int64, data []T, batch int) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("%w: batch of %d to repeat rows into, want 1 or more", ErrBatch, batch)
	}
	return feed(s, i, shape, data, batch)
}

// feed is Feed (batch -1: data's own rows) and FeedRepeat.
func feed[T Element](s *Session, i int, shape []int64, data []T, batch int) (int, error) {
	p, err := s.port(s.inputs, i, "input")
	if err != nil {
		return 0, err
	}
	if want := DTypeOf[T](); p.DType != want {
		return 0, fmt.Errorf("%w: input %q expects %s, got %s data", ErrDType, p.Name, p.DType, want)
	}
	want := p.Shape(s.maxBatch)
	if len(shape) != len(want) {
		return 0, fmt.Errorf("%w: input %q has rank %d (shape %v), got rank %d (shape %v)", ErrShape, p.Name, len(want), p.Declared, len(shape), shape)
	}
	row := shape
	if p.Batched {
		row = shape[1:]
	}
	if !slices.Equal(row, p.Row) {
		return 0, fmt.Errorf("%w: input %q needs rows of shape %v, got %v (model shape %v)", ErrShape, p.Name, p.Row, row, p.Declared)
	}
	if !p.Batched {
		if n := p.RowSize(); len(data) != n {
			return 0, fmt.Errorf("%w: input %q: shape %v holds %d elements, got %d", ErrShape, p.Name, shape, n, len(data))
		}
		copy(view[T](p.mem), data)
		return 1, nil
	}
	rows := shape[0]
	if batch < 0 {
		batch = int(min(rows, math.MaxInt))
	}
	if err := s.checkBatch(batch); err != nil {
		return 0, fmt.Errorf("input %q: %w", p.Name, err)
	}
	rowSize := p.RowSize()
	if n, ok := mulSize(rows, int64(rowSize)); !ok || rows < 1 || int64(len(data)) != n {
		return 0, fmt.Errorf("%w: input %q: shape %v holds %d elements, got %d", ErrShape, p.Name, shape, product(shape), len(data))
	}
	dst := view[T](p.mem)[:batch*rowSize]
	filled := copy(dst, data) // whole rows: at most batch of them
	for filled < len(dst) {   // then double the repeated rows
		filled += copy(dst[filled:], dst[:filled])
	}
	return batch, nil
}

func (s *Session) checkBatch(batch int) error {
	if s.static && batch != s.maxBatch {
		return fmt.Errorf("%w: the model's batch dimension is fixed at %d, got a batch of %d", ErrBatch, s.maxBatch, batch)
	}
	if batch < 1 || batch > s.maxBatch {
		return fmt.Errorf("%w: batch of %d, the session accepts 1 to %d (Config.MaxBatch)", ErrBatch, batch, s.maxBatch)
	}
	return nil
}

// Run runs the model on the first batch rows of every input buffer and writes the outputs'
// buffers. Floating-point inputs are checked for NaN first unless Config.AllowNaN is set.
// In steady state (a batch size seen before) Run allocates nothing on CPU; on CUDA it binds
// the inputs again, so that ONNX Runtime copies them to the device, and onnxruntime_go makes
// one small allocation per input doing so.
func (s *Session) Run(batch int) error {
	if s.closed {
		return ErrClosed
	}
	if err := s.checkBatch(batch); err != nil {
		return err
	}
	if !s.cfg.AllowNaN {
		if err := s.checkNaN(batch); err != nil {
			return err
		}
	}
	b, ok := s.bindings[batch]
	if !ok {
		var err error
		if b, err = s.bind(batch); err != nil {
			return err
		}
		s.bindings[batch] = b
	} else if s.rebind {
		if err := s.rebindInputs(b); err != nil {
			return err
		}
	}
	if s.current != nil {
		if err := s.bindWeights(b); err != nil {
			return err
		}
	}
	if err := s.sess.RunWithBinding(b.io); err != nil {
		return fmt.Errorf("onnx: running the model on a batch of %d: %w", batch, err)
	}
	return nil
}

// rebindInputs binds the inputs of b again. ONNX Runtime copies a host input to another
// provider's device when the input is bound (IOBinding::BindInput), not at each run: a
// binding kept from an earlier Run would run the model on the inputs of the Run that made it
// (seen on the H200: cmd/infer's CUDA runs at batch 256 took less time than copying their
// 29 MB input could). Binding again copies what Feed wrote since; on CPU the binding views
// the buffers and needs nothing. Fed weights are not bound again: a set is copied when it is selected
// ([Session.UseWeights] says to switch sets rather than write the one in use).
func (s *Session) rebindInputs(b *binding) error {
	for i := range s.inputs {
		if err := b.io.BindInput(s.inputs[i].Name, b.values[i]); err != nil {
			return fmt.Errorf("onnx: binding %q again for a batch: %w", s.inputs[i].Name, err)
		}
	}
	return nil
}

func (s *Session) checkNaN(batch int) error {
	for i := range s.inputs {
		p := &s.inputs[i]
		n := p.elems(batch)
		switch p.DType {
		case Float32:
			if j := firstNaN32(view[float32](p.mem)[:n]); j >= 0 {
				return nanError(p, j)
			}
		case Float64:
			for j, v := range view[float64](p.mem)[:n] {
				if math.IsNaN(v) {
					return nanError(p, j)
				}
			}
		}
	}
	return nil
}

// firstNaN32 is the index of x's first NaN, -1 when it has none. It looks for one without a
// branch per element, and for the index only when there is one: the check runs on every input
// of every Run (0.9% of a CartPole batcher's CPU with a comparison and branch per element, and
// about as much with a running maximum of the magnitudes' bits). A magnitude's bits plus
// 2²³ − 1 reach bit 31 only above +Inf's, that is for a NaN; four ORs of them side by side
// keep the loop from waiting on one (BenchmarkFirstNaN32: 1,024 rows of 4, 2.4 -> 1.3 us).
func firstNaN32(x []float32) int {
	const abs, up = 1<<31 - 1, 1<<23 - 1
	var a0, a1, a2, a3 uint32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		y := x[i : i+4 : i+4]
		a0 |= math.Float32bits(y[0])&abs + up
		a1 |= math.Float32bits(y[1])&abs + up
		a2 |= math.Float32bits(y[2])&abs + up
		a3 |= math.Float32bits(y[3])&abs + up
	}
	for _, v := range x[i:] {
		a0 |= math.Float32bits(v)&abs + up
	}
	if (a0|a1|a2|a3)>>31 == 0 {
		return -1
	}
	for j, v := range x {
		if v != v {
			return j
		}
	}
	return -1
}

func nanError(p *port, j int) error {
	row := p.RowSize()
	if !p.Batched || row == 0 {
		return fmt.Errorf("%w: input %q element %d is NaN", ErrNaN, p.Name, j)
	}
	return fmt.Errorf("%w: input %q row %d element %d is NaN", ErrNaN, p.Name, j/row, j%row)
}

func (s *Session) bind(batch int) (*binding, error) {
	io, err := s.sess.CreateIoBinding()
	if err != nil {
		return nil, fmt.Errorf("onnx: creating an I/O binding: %w", err)
	}
	b := &binding{io: io}
	for k, ps := range [][]port{s.inputs, s.outputs} {
		bindTo := io.BindInput
		if k == 1 {
			bindTo = io.BindOutput
		}
		for i := range ps {
			p := &ps[i]
			v, err := newValue(p.DType, p.Shape(batch), p.mem)
			if err == nil {
				b.values = append(b.values, v)
				err = bindTo(p.Name, v)
			}
			if err != nil {
				return nil, errors.Join(fmt.Errorf("onnx: binding %q for a batch of %d: %w", p.Name, batch, err), b.destroy())
			}
		}
	}
	return b, nil
}

func (b *binding) destroy() error {
	var errs []error
	if b.io != nil {
		errs = append(errs, b.io.Destroy())
	}
	for _, v := range b.values {
		errs = append(errs, v.Destroy())
	}
	return errors.Join(errs...)
}

// Close releases the session and its tensors. It is idempotent.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	for i, b := range s.bindings {
		if b != nil {
			errs = append(errs, b.destroy())
			s.bindings[i] = nil
		}
	}
	if s.sess != nil {
		errs = append(errs, s.sess.Destroy())
	}
	for _, mem := range s.pinned {
		errs = append(errs, unpinHost(mem))
	}
	s.pinned = nil
	for _, w := range s.sets {
		errs = append(errs, w.destroy())
	}
	s.current = nil
	return errors.Join(errs...)
}

func product(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// checkShapes refuses Config.Shapes entries naming an input the model lacks, or giving a
// dimension the model declares as another size.
func (s *Session) checkShapes() error {
	for _, name := range slices.Sorted(maps.Keys(s.cfg.Shapes)) {
		i, err := index(s.inputs, name, "input")
		if err != nil {
			return fmt.Errorf("%w: Config.Shapes: %w", ErrConfig, err)
		}
		declared := s.inputs[i].Declared
		for k, d := range s.cfg.Shapes[name] {
			if k < len(declared) && d >= 0 && declared[k] >= 0 && d != declared[k] {
				return fmt.Errorf("%w: Config.Shapes[%q] sets dimension %d to %d; the model declares %d (shape %v)",
					ErrConfig, name, k, d, declared[k], declared)
			}
		}
	}
	return nil
}

// rowElems is the number of elements in a row of the given shape; ok is false past int64.
func rowElems(row []int64) (int64, bool) {
	n, ok := int64(1), true
	for _, d := range row {
		if n, ok = mulSize(n, d); !ok {
			return 0, false
		}
	}
	return n, true
}

// bufferSize is the bytes p's buffer needs for batch rows; ok is false past int64.
func (p *port) bufferSize(batch int) (int64, bool) {
	n, ok := rowElems(p.Row)
	if ok && p.Batched {
		n, ok = mulSize(n, int64(batch))
	}
	if ok {
		n, ok = mulSize(n, int64(p.DType.Size()))
	}
	return n, ok
}

// checkSizes checks the buffers of ps for MaxBatch rows (see checkSize).
func (s *Session) checkSizes(ps []port, kind string, mem memory, total *int64) error {
	for i := range ps {
		p := &ps[i]
		batch := fmt.Sprintf("for a batch of %d (Config.MaxBatch)", s.maxBatch)
		advice := "lower Config.MaxBatch, or check the model's declared shape"
		switch {
		case s.static:
			batch = fmt.Sprintf("for the batch of %d the model fixes", s.maxBatch)
			advice = "re-export the model with a dynamic or smaller batch"
		case !p.Batched:
			batch, advice = "(it has no batch dimension)", "check the model's declared shape"
		}
		if err := checkSize(p, kind, s.maxBatch, batch, advice, mem, total); err != nil {
			return err
		}
	}
	return nil
}

// checkSize refuses p's buffer for batch rows when its size overflows or passes the memory
// available, alone or added to *total (the buffers already counted), which it updates.
// batchText says what the batch is, advice what to do.
func checkSize(p *port, kind string, batch int, batchText, advice string, mem memory, total *int64) error {
	n, ok := p.bufferSize(batch)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s %s needs more than 2^63 bytes %s: %s", ErrTooLarge, kind, p.describe(), batchText, advice)
	case n > mem.avail:
		return fmt.Errorf("%w: %s %s needs %s %s; %s of memory is available (%s): %s",
			ErrTooLarge, kind, p.describe(), formatBytes(n), batchText, formatBytes(mem.avail), mem.source, advice)
	case n > mem.avail-*total:
		return fmt.Errorf("%w: %s %s needs %s %s; with the %s the other buffers take, that passes the %s of memory available (%s): %s",
			ErrTooLarge, kind, p.describe(), formatBytes(n), batchText, formatBytes(*total), formatBytes(mem.avail), mem.source, advice)
	}
	*total += n
	return nil
}

// describe names p with its element type and concrete row shape.
func (p *port) describe() string {
	row := fmt.Sprint(p.Row)
	if p.Batched {
		row = fmt.Sprintf("batch × %v", p.Row)
	}
	return fmt.Sprintf("%q (%s, rows %s)", p.Name, p.DType, row)
}

// checkDeclaredOutputs refuses an output whose declared shape alone (dynamic dimensions
// counted as 1) cannot fit in memory, before ONNX Runtime is asked to compute it.
func (s *Session) checkDeclaredOutputs(mem memory) error {
	for i := range s.outputs {
		p := &s.outputs[i]
		n, ok := int64(p.DType.Size()), true
		for _, d := range p.Declared {
			if d > 0 && ok {
				n, ok = mulSize(n, d)
			}
		}
		if !ok || n > mem.avail {
			return fmt.Errorf("%w: output %q declares shape %v, at least %s; %s of memory is available (%s): check the model",
				ErrTooLarge, p.Name, p.Declared, sizeText(n, ok), formatBytes(mem.avail), mem.source)
		}
	}
	return nil
}

// sizeText formats a size that may have overflowed.
func sizeText(n int64, ok bool) string {
	if !ok {
		return "more than 2^63 bytes"
	}
	return formatBytes(n)
}

// Command infer runs an ONNX model on observations stored as .npy and writes one .npy per
// model output.
//
//	infer --model p.onnx --input obs.npy [--input-name NAME] --out DIR
//
// Each output is written to DIR/<output>.npy (characters other than letters, digits, '.', '_'
// and '-' in the output's name become '_'; when two outputs' names become the same file name,
// the later one in the model's order gets _2, _3, ...), first under a temporary name and then
// renamed. DIR is created (if missing) only once the model has loaded and the inputs fit it.
// Progress and errors go to stderr; one JSON object goes to stdout:
//
//	{"outputs": [{"name": ..., "shape": [...], "file": ...}], "provider": "cpu", "ms": 0.41, ...}
//
// --input may be repeated as NAME=PATH for models with several inputs. The first dimension of
// every input that has the model's batch dimension is the batch: those inputs must have the
// same number of rows, in whatever order they are given; an input without a batch dimension
// is fed whole. Each output is written with its shape: the batch's rows first when the
// model's output follows the batch, else its fixed shape. Every argument is a flag: a stray
// word is an error, since Go's flag parsing would otherwise stop there and ignore the flags
// after it. --threads takes 1 to the number of CPUs, or -1 to let ONNX Runtime choose.
//
// As a throughput benchmark: --batch B (at most 2147483647, and only when the session's
// buffers fit in the memory available) repeats the input rows cyclically up to B rows, and
// --repeat N runs the model N more times after the first (warm-up) run and adds ms_per_run and
// samples_per_sec (their mean), ms_per_run_median, and timed_start_unix and timed_end_unix
// (the timed runs' span, to compare processes timed at once over their union) to the summary:
//
//	infer --model testdata/nature_cnn.onnx --input testdata/nature_cnn.input.npy --out /tmp/o \
//	      --batch 1024 --repeat 100 --provider cuda [--cuda-option use_tf32=0]
//
// --sessions K (with --repeat; 1 to the number of CPUs) times K sessions of the model in this
// one process at once, each on its own goroutine with its own copy of the inputs, as K batcher
// workers run theirs: samples_per_sec is then all K sessions' rows over the wall time, and
// ms_per_run and ms_per_run_median are per session run. The outputs are the first session's.
//
// A recurrent state whose batch is on another axis than 0 (torch's [layers, batch, hidden],
// SB3-contrib RecurrentPPO's [1, batch, 256]: dimension 0 fixed, one other dynamic) is given
// and written in the model's layout; infer runs the graph with such inputs and outputs made
// batch-first (onnx/edit.BatchFirst) and transposes the arrays to match. Any other input with
// a dynamic dimension besides the batch (a sequence length) needs its shape: --input-shape NAME=DIMS (repeatable) gives it, the batch as
// -1, e.g. --input-shape state=-1x2x256 (onnx.Config.Shapes).
//
// --cuda-option KEY=VALUE (repeatable) passes an option to ONNX Runtime's CUDA execution
// provider by its name, e.g. use_tf32=0 for full float32 convolutions and matrix products
// (the provider's default lets them round their inputs to TF32); the summary echoes them as
// cuda_options, and ort_version names the ONNX Runtime library that ran. On CUDA the host
// buffers are page-locked (pinned_host in the summary) unless --pageable is given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/towerrl/towerrl/cmd/internal/cli"
	"github.com/towerrl/towerrl/internal/atomicfile"
	"github.com/towerrl/towerrl/internal/bounded"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"go.uber.org/zap"
)

type inputs []string

func (i *inputs) String() string     { return strings.Join(*i, ",") }
func (i *inputs) Set(v string) error { *i = append(*i, v); return nil }

// inputShapes collects --input-shape NAME=DIMS flags: onnx.Config.Shapes.
type inputShapes map[string][]int64

func (c inputShapes) String() string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		dims := make([]string, len(c[k]))
		for i, d := range c[k] {
			dims[i] = strconv.FormatInt(d, 10)
		}
		kv = append(kv, k+"="+strings.Join(dims, "x"))
	}
	return strings.Join(kv, ",")
}

// Set parses NAME=D0xD1x…, each dimension a size ≥ 1 or -1 (or "batch") for the batch.
func (c inputShapes) Set(v string) error {
	name, dims, ok := strings.Cut(v, "=")
	if !ok || name == "" || dims == "" {
		return fmt.Errorf("%q: want NAME=DIMS, e.g. state=-1x2x256 (the batch as -1)", v)
	}
	if _, dup := c[name]; dup {
		return fmt.Errorf("%q: %s is given twice", v, name)
	}
	var shape []int64
	for _, f := range strings.Split(dims, "x") {
		if f == "batch" {
			f = "-1"
		}
		d, err := strconv.ParseInt(f, 10, 64)
		if err != nil || d == 0 || d < -1 {
			return fmt.Errorf("%q: dimension %q: want a size of at least 1, or -1 (batch) for the batch", v, f)
		}
		shape = append(shape, d)
	}
	c[name] = shape
	return nil
}

// cudaOptions collects --cuda-option KEY=VALUE flags.
type cudaOptions map[string]string

func (c cudaOptions) String() string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		kv = append(kv, k+"="+c[k])
	}
	return strings.Join(kv, ",")
}

func (c cudaOptions) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE, e.g. use_tf32=0", v)
	}
	if _, dup := c[k]; dup {
		return fmt.Errorf("%q: %s is given twice", v, k)
	}
	c[k] = val
	return nil
}

type outputSummary struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
	File  string  `json:"file"`
}

type summary struct {
	Model       string            `json:"model"`
	Batch       int               `json:"batch"`
	Outputs     []outputSummary   `json:"outputs"`
	Provider    string            `json:"provider"`
	CUDAOptions map[string]string `json:"cuda_options,omitempty"`
	PinnedHost  bool              `json:"pinned_host"`
	ORTVersion  string            `json:"ort_version"`
	MS          float64           `json:"ms"`
	// With --repeat: the timed runs after the first, their mean time and throughput, and
	// the median run's time.
	Repeat   int `json:"repeat,omitempty"`
	Sessions int `json:"sessions,omitempty"` // --sessions, when more than 1
	// The timed runs' span as Unix times in seconds: several processes timed at once are
	// compared over the union of their spans, not by summing their own rates.
	TimedStart    float64 `json:"timed_start_unix,omitempty"`
	TimedEnd      float64 `json:"timed_end_unix,omitempty"`
	MSPerRun      float64 `json:"ms_per_run,omitempty"`
	SamplesPerSec float64 `json:"samples_per_sec,omitempty"`
	MSMedian      float64 `json:"ms_per_run_median,omitempty"`
}

// maxBatch is the largest --batch; past it, the number is a typo (the memory check would
// refuse most such batches anyway, with a longer message).
const maxBatch = math.MaxInt32

// maxThreads is the largest --threads: more threads than CPUs only slow ONNX Runtime down.
var maxThreads = runtime.NumCPU()

// options are the command's flags.
type options struct {
	model, inName, out string
	provider, library  string
	inputs             inputs
	cudaOptions        cudaOptions
	shapes             inputShapes // --input-shape
	threads            int
	cast, allowNaN     bool
	pageable           bool
	batch, repeat      int // --batch and --repeat: the benchmark
	sessions           int // --sessions: sessions timed at once
	log                cli.LogFlags
}

// parseFlags parses the command line (without the program name), writing errors and the
// usage to stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{cudaOptions: cudaOptions{}, shapes: inputShapes{}}
	fs := flag.NewFlagSet("infer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.Usage(fs, "infer", "run an ONNX model on .npy inputs and write each output as .npy (docs/tools.md)",
		"bin/infer --model testdata/mlp_tanh.onnx --input testdata/mlp_tanh.input.npy --out out/infer")
	fs.StringVar(&o.model, "model", "", "ONNX model to run (required)")
	fs.StringVar(&o.inName, "input-name", "", "model input that --input feeds (default: the model's only input)")
	fs.StringVar(&o.out, "out", "", "folder for the output .npy files (required; created if missing, once the model has loaded)")
	fs.StringVar(&o.provider, "provider", "cpu", "execution provider: cpu, cuda or auto")
	fs.IntVar(&o.threads, "threads", 1, fmt.Sprintf("ONNX Runtime intra-op threads: 1 to %d (the CPUs), or -1 to let ONNX Runtime choose", maxThreads))
	fs.StringVar(&o.library, "ort-lib", "", "ONNX Runtime library (default: $"+onnx.LibraryEnv+", then the per-user cache)")
	fs.BoolVar(&o.cast, "cast", false, "convert inputs whose element type differs from the model's instead of refusing them")
	fs.BoolVar(&o.allowNaN, "allow-nan", false, "pass NaN observations to the model instead of refusing them")
	fs.IntVar(&o.batch, "batch", 0, fmt.Sprintf("repeat the input rows cyclically up to this batch, at most %d (0: the input's own)", maxBatch))
	fs.IntVar(&o.repeat, "repeat", 0, "time this many more runs after the first and report their throughput")
	fs.IntVar(&o.sessions, "sessions", 1, fmt.Sprintf("with --repeat: time this many sessions at once in this process, one goroutine each (1 to %d, the CPUs)", maxThreads))
	fs.Var(&o.inputs, "input", "observations as .npy: PATH, or NAME=PATH (repeatable)")
	fs.Var(o.shapes, "input-shape", "fix an input's dynamic dimensions other than the batch: NAME=DIMS, e.g. state=-1x2x256 with the batch as -1 (repeatable)")
	fs.BoolVar(&o.pageable, "pageable", false, "with --provider cuda, keep the host buffers pageable instead of page-locking them")
	fs.Var(o.cudaOptions, "cuda-option", "CUDA execution provider option KEY=VALUE, e.g. use_tf32=0 (repeatable; only with --provider cuda or auto)")
	o.log.Register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err // fs printed it, with the usage
	}
	if err := cli.NoArgs(fs); err != nil {
		fmt.Fprintf(fs.Output(), "infer: %v\n", err)
		return o, err
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	cli.Main("infer", o.log, func(ctx context.Context, log *zap.Logger) error {
		return run(ctx, os.Stdout, log, o)
	})
}

// check validates the options that need no file, before any is read.
func (o options) check() (onnx.Config, error) {
	switch {
	case o.model == "":
		return onnx.Config{}, errors.New("--model is required")
	case len(o.inputs) == 0:
		return onnx.Config{}, errors.New("--input is required")
	case o.out == "":
		return onnx.Config{}, errors.New("--out is required")
	case o.batch < 0 || o.batch > maxBatch:
		return onnx.Config{}, fmt.Errorf("--batch %d: want 0 (the input's own) to %d", o.batch, maxBatch)
	case o.repeat < 0:
		return onnx.Config{}, fmt.Errorf("--repeat %d: want 0 or more", o.repeat)
	case o.sessions < 1 || o.sessions > maxThreads:
		return onnx.Config{}, fmt.Errorf("--sessions %d: want 1 to %d (this machine's CPUs)", o.sessions, maxThreads)
	case o.sessions > 1 && o.repeat == 0:
		return onnx.Config{}, fmt.Errorf("--sessions %d times runs: it needs --repeat N", o.sessions)
	case o.threads != -1 && (o.threads < 1 || o.threads > maxThreads):
		return onnx.Config{}, fmt.Errorf("--threads %d: want 1 to %d (this machine's CPUs), or -1 to let ONNX Runtime choose", o.threads, maxThreads)
	}
	p, err := onnx.ParseProvider(o.provider)
	if err != nil {
		return onnx.Config{}, fmt.Errorf("--provider: %w", err)
	}
	if len(o.cudaOptions) > 0 && p == onnx.ProviderCPU {
		return onnx.Config{}, errors.New("--cuda-option needs --provider cuda or auto")
	}
	cfg := onnx.Config{Library: o.library, Provider: p, IntraOpThreads: o.threads, AllowNaN: o.allowNaN, PageableHost: o.pageable}
	if len(o.cudaOptions) > 0 {
		cfg.CUDAOptions = o.cudaOptions
	}
	if len(o.shapes) > 0 {
		cfg.Shapes = o.shapes
	}
	return cfg, cfg.Validate()
}

func run(ctx context.Context, stdout io.Writer, log *zap.Logger, o options) (err error) {
	cfg, err := o.check()
	if err != nil {
		return err
	}
	cfg.Logger = log
	arrays, err := readInputs(o.inputs, o.inName)
	if err != nil {
		return err
	}
	data, err := bounded.ReadFile("onnx: loading model", o.model, bounded.ModelLimit)
	if err != nil {
		return err
	}
	model, err := onnx.Parse(data)
	if err != nil {
		return fmt.Errorf("loading model %q: %w", o.model, err)
	}
	model, moved, err := batchFirst(model, o.shapes, arrays, log)
	if err != nil {
		return err
	}
	batch := o.batch
	for _, a := range arrays {
		if len(a.Shape) == 0 {
			return fmt.Errorf("input %s is a scalar; the first dimension must be the batch", a.path)
		}
		if o.batch > 0 && a.Shape[0] == 0 {
			return fmt.Errorf("--batch %d: input %s has no rows to repeat", o.batch, a.path)
		}
		if o.batch == 0 {
			batch = max(batch, a.Shape[0])
		}
	}
	cfg.MaxBatch = max(batch, 1)
	s, err := onnx.NewSession(ctx, model, cfg)
	if err != nil {
		err = fmt.Errorf("loading model %q: %w", o.model, err)
	}
	if errors.Is(err, onnx.ErrTooLarge) && o.batch > 0 {
		return fmt.Errorf("--batch %d: %w", o.batch, err)
	}
	if errors.Is(err, onnx.ErrShape) && strings.Contains(err.Error(), "besides the batch") {
		return fmt.Errorf("%w; with infer: --input-shape NAME=DIMS, the batch as -1 (e.g. --input-shape state=-1x2x256)", err)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	infos := s.Inputs()
	if len(arrays) == 1 && arrays[0].name == "" {
		if len(infos) != 1 {
			names := make([]string, len(infos))
			for i, in := range infos {
				names[i] = in.Name
			}
			return fmt.Errorf("the model has %d inputs (%s): name the one to feed with --input-name, or pass --input NAME=PATH for each",
				len(infos), strings.Join(names, ", "))
		}
		arrays[0].name = infos[0].Name
	}
	n, err := feedAll(s, arrays, o.cast, o.batch)
	if err != nil {
		return err
	}
	// Only now that the model has loaded and taken the inputs: make the output folder (and
	// remove what was made if infer fails from here on).
	cleanup, err := makeDir(o.out)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	log.Info("running", zap.String("model", o.model), zap.Int("batch", n), zap.String("provider", string(s.Provider())))
	start := time.Now()
	if err := s.Run(n); err != nil {
		return err
	}
	ms := float64(time.Since(start).Microseconds()) / 1000

	_, version := onnx.Loaded()
	sum := summary{Model: o.model, Batch: n, Provider: string(s.Provider()), ORTVersion: version, MS: ms, PinnedHost: s.PinnedHost()}
	if s.Provider() == onnx.ProviderCUDA {
		sum.CUDAOptions = cfg.CUDAOptions
	}
	if o.repeat > 0 {
		if err := timeRuns(ctx, &sum, s, n, o, func() (*onnx.Session, error) {
			s, err := onnx.NewSession(ctx, model, cfg)
			if err != nil {
				return nil, err
			}
			if _, err := feedAll(s, arrays, o.cast, o.batch); err != nil {
				return nil, errors.Join(err, s.Close())
			}
			return s, nil
		}, log); err != nil {
			return err
		}
	}
	outs := s.Outputs()
	names := make([]string, len(outs))
	for i, info := range outs {
		names[i] = info.Name
		if m, ok := moved[info.Name]; ok {
			names[i] = m.name
		}
	}
	files := fileNames(names)
	for i, info := range outs {
		file := filepath.Join(o.out, files[i])
		shape := info.Shape(n)
		var err error
		if m, ok := moved[info.Name]; ok {
			shape, err = writeMoved(s, i, info, shape, m.axis, file)
		} else {
			err = writeOutput(s, i, info, shape, file)
		}
		if err != nil {
			return fmt.Errorf("writing output %q: %w", names[i], err)
		}
		log.Info("wrote", zap.String("output", names[i]), zap.Int64s("shape", shape), zap.String("file", file))
		sum.Outputs = append(sum.Outputs, outputSummary{Name: names[i], Shape: shape, DType: info.DType.String(), File: file})
	}
	return cli.Summary(stdout, sum)
}

// timeRuns times o.repeat runs of batch n in o.sessions sessions at once — s and o.sessions
// − 1 more that open makes — and writes the figures into sum.
func timeRuns(ctx context.Context, sum *summary, s *onnx.Session, n int, o options, open func() (*onnx.Session, error), log *zap.Logger) error {
	sessions := []*onnx.Session{s}
	defer func() {
		for _, x := range sessions[1:] {
			x.Close()
		}
	}()
	for len(sessions) < o.sessions {
		x, err := open()
		if err != nil {
			return fmt.Errorf("--sessions %d: session %d: %w", o.sessions, len(sessions)+1, err)
		}
		if err := x.Run(n); err != nil { // its warm-up run
			return errors.Join(err, x.Close())
		}
		sessions = append(sessions, x)
	}
	if o.sessions > 1 {
		sum.Sessions = o.sessions
	}
	runs := make([][]time.Duration, len(sessions))
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	start := time.Now()
	for i, x := range sessions {
		runs[i] = make([]time.Duration, o.repeat)
		wg.Go(func() {
			for k := range o.repeat {
				if err := ctx.Err(); err != nil {
					errs[i] = fmt.Errorf("after %d of %d timed runs: %w", k, o.repeat, err)
					return
				}
				t := time.Now()
				if err := x.Run(n); err != nil {
					errs[i] = err
					return
				}
				runs[i][k] = time.Since(t)
			}
		})
	}
	wg.Wait()
	end := time.Now()
	el := end.Sub(start)
	sum.TimedStart, sum.TimedEnd = unixSeconds(start), unixSeconds(end)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	all := slices.Concat(runs...)
	sum.Repeat, sum.MSPerRun = o.repeat, el.Seconds()*1000/float64(o.repeat) // each session's runs span el
	sum.SamplesPerSec = float64(n*len(all)) / el.Seconds()
	slices.Sort(all)
	sum.MSMedian = float64(all[len(all)/2].Nanoseconds()) / 1e6
	log.Info("timed", zap.Int("runs", o.repeat), zap.Int("sessions", len(sessions)), zap.Float64("ms_per_run", sum.MSPerRun),
		zap.Float64("ms_per_run_median", sum.MSMedian), zap.Float64("samples_per_sec", sum.SamplesPerSec))
	return nil
}

// unixSeconds is t as Unix time in seconds.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// feedAll feeds every model input its array and returns the batch to run: the rows of the
// inputs that follow the model's batch (--batch when given), which must all have the same
// number; inputs without a batch dimension are fed whole and do not count. A model none of
// whose inputs follows the batch runs a batch of 1.
func feedAll(s *onnx.Session, arrays []array, cast bool, batch int) (int, error) {
	infos := s.Inputs()
	fed := make(map[int]array)
	n := 0
	var first array // the batched input that set n
	for _, a := range arrays {
		i, err := s.InputIndex(a.name)
		if err != nil {
			return 0, err
		}
		if prev, ok := fed[i]; ok {
			return 0, fmt.Errorf("model input %q is given twice (%s and %s); pass one --input %s=PATH", a.name, prev.path, a.path, a.name)
		}
		rows, err := feed(s, i, infos[i], a, cast, batch)
		if err != nil {
			return 0, fmt.Errorf("input %s: %w", a.path, err)
		}
		fed[i] = a
		if !infos[i].Batched {
			continue
		}
		if n > 0 && rows != n {
			return 0, fmt.Errorf("inputs %q (%s) and %q (%s) have %d rows and %d: every input with a batch dimension needs the same number of rows; give them the same, or pass --batch N to repeat each input's rows up to N",
				first.name, first.path, a.name, a.path, n, rows)
		}
		n, first = rows, a
	}
	for i, in := range infos {
		if _, ok := fed[i]; !ok {
			return 0, fmt.Errorf("model input %q was not given; pass --input %s=PATH", in.Name, in.Name)
		}
	}
	return max(n, 1), nil
}

// makeDir makes dir and any missing parents, and checks that files can be created in it. The
// cleanup it returns removes the folders it made, deepest first, when they are still empty.
func makeDir(dir string) (cleanup func(), err error) {
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = append(made, d)
	}
	cleanup = func() {
		for _, d := range made {
			os.Remove(d) // only an empty folder goes
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		cleanup()
		return nil, fmt.Errorf("--out: %w", err)
	}
	probe, err := os.CreateTemp(dir, ".infer-check-*")
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("--out %s is not writable: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return cleanup, nil
}

type array struct {
	*npy.Array
	name, path string
}

func readInputs(ins []string, inName string) ([]array, error) {
	var out []array
	for _, spec := range ins {
		name, path := "", spec
		if k, v, ok := strings.Cut(spec, "="); ok && !strings.Contains(k, string(filepath.Separator)) {
			name, path = k, v
		}
		if name == "" && len(ins) == 1 {
			name = inName
		}
		if name == "" && len(ins) > 1 {
			return nil, fmt.Errorf("--input %s: with several inputs, write each as NAME=PATH", spec)
		}
		a, err := npy.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--input: %w", err)
		}
		out = append(out, array{Array: a, name: name, path: path})
	}
	return out, nil
}

// fileTypes names the element types of the .npy files infer reads, as the model's are named.
var fileTypes = map[string]string{"<f4": "float32", "<f8": "float64", "<i4": "int32", "<i8": "int64", "|u1": "uint8", "<u1": "uint8", "|b1": "bool"}

// feed copies a into input i, converting its element type only when cast is set; with batch
// > 0, its rows are repeated cyclically (or cut) to batch rows.
func feed(s *onnx.Session, i int, info onnx.TensorInfo, a array, cast bool, batch int) (int, error) {
	shape := make([]int64, len(a.Shape))
	for k, d := range a.Shape {
		shape[k] = int64(d)
	}
	have := fileTypes[a.Descr]
	if have != info.DType.String() && !cast {
		return 0, fmt.Errorf("%w: the file holds %s (%s), model input %q expects %s; convert it (numpy: np.save(path, arr.astype(np.%s))) or pass --cast",
			onnx.ErrDType, have, a.Descr, info.Name, info.DType, info.DType)
	}
	switch info.DType {
	case onnx.Float32:
		return feedAs(s, i, shape, a.F32, a.Array, batch)
	case onnx.Float64:
		return feedAs(s, i, shape, a.F64, a.Array, batch)
	case onnx.Int32:
		return feedAs(s, i, shape, a.I32, a.Array, batch)
	case onnx.Int64:
		return feedAs(s, i, shape, a.I64, a.Array, batch)
	case onnx.Uint8:
		return feedAs(s, i, shape, a.U8, a.Array, batch) // bool data is 0 and 1 in U8
	}
	return 0, fmt.Errorf("%w: model input %q has element type %s", onnx.ErrDType, info.Name, info.DType)
}

// feedAs feeds same, the file's data when it already has the model's element type, or else
// the file's data converted.
func feedAs[T onnx.Element](s *onnx.Session, i int, shape []int64, same []T, a *npy.Array, batch int) (int, error) {
	data := same
	if data == nil {
		data = convert[T](asFloat64(a))
	}
	if batch > 0 {
		return onnx.FeedRepeat(s, i, shape, data, batch)
	}
	return onnx.Feed(s, i, shape, data)
}

func asFloat64(a *npy.Array) []float64 {
	out := make([]float64, a.Len())
	for i := range out {
		switch {
		case a.F32 != nil:
			out[i] = float64(a.F32[i])
		case a.F64 != nil:
			out[i] = a.F64[i]
		case a.I32 != nil:
			out[i] = float64(a.I32[i])
		case a.I64 != nil:
			out[i] = float64(a.I64[i])
		case a.U8 != nil:
			out[i] = float64(a.U8[i])
		}
	}
	return out
}

func convert[T onnx.Element](v []float64) []T {
	out := make([]T, len(v))
	for i, x := range v {
		out[i] = T(x)
	}
	return out
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func fileName(output string) string {
	name := unsafeChars.ReplaceAllString(output, "_")
	if name == "" || name == "." || name == ".." {
		name = "output"
	}
	return name
}

// fileNames gives each output its own .npy file name: fileName(output).npy, with _2, _3, ...
// added to the later of the outputs whose names become the same (compared without case, for
// case-insensitive file systems).
func fileNames(outputs []string) []string {
	used := map[string]bool{}
	files := make([]string, len(outputs))
	for i, o := range outputs {
		base := fileName(o)
		name := base
		for k := 2; used[strings.ToLower(name)]; k++ {
			name = fmt.Sprintf("%s_%d", base, k)
		}
		used[strings.ToLower(name)] = true
		files[i] = name + ".npy"
	}
	return files
}

// writeOutput writes output i to file atomically (internal/atomicfile): a failed write leaves
// no file and no temporary file behind.
func writeOutput(s *onnx.Session, i int, o onnx.TensorInfo, shape []int64, file string) error {
	dims := make([]int, len(shape))
	n := 1
	for k, d := range shape {
		dims[k] = int(d)
		n *= int(d)
	}
	return atomicfile.Write(file, 0o644, func(w io.Writer) error {
		switch o.DType {
		case onnx.Float32:
			return write[float32](s, i, w, dims, n)
		case onnx.Float64:
			return write[float64](s, i, w, dims, n)
		case onnx.Int32:
			return write[int32](s, i, w, dims, n)
		case onnx.Int64:
			return write[int64](s, i, w, dims, n)
		case onnx.Uint8:
			return write[uint8](s, i, w, dims, n)
		}
		return fmt.Errorf("its element type %s cannot be written as .npy", o.DType)
	})
}

func write[T onnx.Element](s *onnx.Session, i int, w io.Writer, dims []int, n int) error {
	buf, err := onnx.Output[T](s, i)
	if err != nil {
		return err
	}
	return npy.Write(w, dims, buf[:n])
}

// movedTensor is a graph output batchFirst made batch-first: its name in the model, and the
// axis its batch is on there.
type movedTensor struct {
	name string
	axis int
}

// batchFirst lets infer run a model whose inputs have their batch on another axis than 0 (a
// recurrent state exported as torch lays it out, [layers, batch, hidden]; edit.OffAxisBatch),
// which a session refuses: the graph is fed and returns those tensors batch-first
// (edit.BatchFirst), the arrays fed to them are transposed to match, and the outputs it moved
// are named by the model's names, for writeMoved to transpose back. An input fixed with
// --input-shape is left as it is. It returns model itself when there is nothing to move.
func batchFirst(model *onnx.Model, fixed inputShapes, arrays []array, log *zap.Logger) (*onnx.Model, map[string]movedTensor, error) {
	axes := edit.OffAxisBatch(model)
	for name := range fixed {
		delete(axes, name)
	}
	if len(axes) == 0 {
		return model, nil, nil
	}
	edited, renamed, err := edit.BatchFirst(model, axes)
	if err != nil {
		return nil, nil, err
	}
	log.Info("the model's recurrent states have their batch on another axis than 0; fed and written in the model's layout, run batch-first",
		zap.Any("batch_axes", axes))
	moved := map[string]movedTensor{}
	for name, to := range renamed {
		moved[to] = movedTensor{name: name, axis: axes[name]}
	}
	for k := range arrays {
		a := &arrays[k]
		ax, ok := axes[a.name]
		if !ok {
			continue
		}
		if a.F32 == nil || len(a.Shape) <= ax {
			return nil, nil, fmt.Errorf("input %s: %q has its batch on axis %d; give it as float32 .npy in the model's layout (it holds %s of shape %v), or fix its shape with --input-shape",
				a.path, a.name, ax, a.Descr, a.Shape)
		}
		a.F32, a.Shape = moveAxis(a.F32, a.Shape, ax, 0)
		a.name = renamed[a.name]
	}
	return edited, moved, nil
}

// moveAxis returns x, of the given shape, with axis from moved to position to (the others in
// their order), and its new shape.
func moveAxis[T any](x []T, shape []int, from, to int) ([]T, []int) {
	order := slices.Delete(upTo(len(shape)), from, from+1)
	order = slices.Insert(order, to, from)
	out := make([]T, len(x))
	newShape := make([]int, len(shape))
	for j, a := range order {
		newShape[j] = shape[a]
	}
	// strides of the source, in the new order
	stride := make([]int, len(shape))
	st := 1
	for a := len(shape) - 1; a >= 0; a-- {
		stride[a], st = st, st*shape[a]
	}
	idx := make([]int, len(shape))
	for k := range out {
		src := 0
		for j, a := range order {
			src += idx[j] * stride[a]
		}
		out[k] = x[src]
		for j := len(idx) - 1; j >= 0; j-- {
			if idx[j]++; idx[j] < newShape[j] {
				break
			}
			idx[j] = 0
		}
	}
	return out, newShape
}

// upTo is 0, 1, …, n−1.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// writeMoved writes output i, which the session returns batch-first (shape), in the model's
// own layout: its batch back on axis axis. It returns the shape written.
func writeMoved(s *onnx.Session, i int, o onnx.TensorInfo, shape []int64, axis int, file string) ([]int64, error) {
	if o.DType != onnx.Float32 {
		return nil, fmt.Errorf("its element type %s cannot be moved back to its batch axis; only float32 states are", o.DType)
	}
	buf, err := onnx.Output[float32](s, i)
	if err != nil {
		return nil, err
	}
	dims := make([]int, len(shape))
	n := 1
	for k, d := range shape {
		dims[k], n = int(d), n*int(d)
	}
	x, back := moveAxis(buf[:n], dims, 0, axis)
	out := make([]int64, len(back))
	for k, d := range back {
		out[k] = int64(d)
	}
	return out, atomicfile.Write(file, 0o644, func(w io.Writer) error { return npy.Write(w, back, x) })
}

// Command infer runs an ONNX model on observations stored as .npy and writes one .npy per
// model output.
//
//	infer --model p.onnx --input obs.npy [--input-name NAME] --out DIR
//
// Each output is written to DIR/<output>.npy (characters other than letters, digits, '.', '_'
// and '-' in the output's name become '_'), first under a temporary name and then renamed.
// Progress and errors go to stderr; one JSON object goes to stdout:
//
//	{"outputs": [{"name": ..., "shape": [...], "file": ...}], "provider": "cpu", "ms": 0.41, ...}
//
// --input may be repeated as NAME=PATH for models with several inputs. The first dimension of
// every input is the batch.
//
// As a throughput benchmark: --batch B repeats the input rows cyclically up to B rows, and
// --repeat N runs the model N more times after the first (warm-up) run and adds ms_per_run and
// samples_per_sec (their mean) to the summary:
//
//	infer --model testdata/nature_cnn.onnx --input testdata/nature_cnn.input.npy --out /tmp/o \
//	      --batch 1024 --repeat 100 --provider cuda
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/towerrl/towerrl/internal/cli"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"go.uber.org/zap"
)

type inputs []string

func (i *inputs) String() string     { return strings.Join(*i, ",") }
func (i *inputs) Set(v string) error { *i = append(*i, v); return nil }

type outputSummary struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
	File  string  `json:"file"`
}

type summary struct {
	Model    string          `json:"model"`
	Batch    int             `json:"batch"`
	Outputs  []outputSummary `json:"outputs"`
	Provider string          `json:"provider"`
	MS       float64         `json:"ms"`
	// With --repeat: the timed runs after the first, their mean time and throughput.
	Repeat        int     `json:"repeat,omitempty"`
	MSPerRun      float64 `json:"ms_per_run,omitempty"`
	SamplesPerSec float64 `json:"samples_per_sec,omitempty"`
}

// bench is --batch and --repeat.
type bench struct{ batch, repeat int }

func main() {
	var (
		model     = flag.String("model", "", "ONNX model to run (required)")
		inName    = flag.String("input-name", "", "model input that --input feeds (default: the model's only input)")
		out       = flag.String("out", "", "folder for the output .npy files (required; created if missing)")
		provider  = flag.String("provider", "cpu", "execution provider: cpu, cuda or auto")
		threads   = flag.Int("threads", 1, "ONNX Runtime intra-op threads (-1: one per core)")
		library   = flag.String("ort-lib", "", "ONNX Runtime library (default: $"+onnx.LibraryEnv+", then the per-user cache)")
		cast      = flag.Bool("cast", false, "convert inputs whose element type differs from the model's instead of refusing them")
		allowNaN  = flag.Bool("allow-nan", false, "pass NaN observations to the model instead of refusing them")
		batch     = flag.Int("batch", 0, "repeat the input rows cyclically up to this batch (0: the input's own)")
		repeat    = flag.Int("repeat", 0, "time this many more runs after the first and report their throughput")
		inputList inputs
		lf        cli.LogFlags
	)
	flag.Var(&inputList, "input", "observations as .npy: PATH, or NAME=PATH (repeatable)")
	lf.Register(flag.CommandLine)
	flag.Parse()
	cli.Main("infer", lf, func(ctx context.Context, log *zap.Logger) error {
		p, err := onnx.ParseProvider(*provider)
		if err != nil {
			return err
		}
		return run(ctx, os.Stdout, log, *model, inputList, *inName, *out, onnx.Config{
			Library: *library, Provider: p, IntraOpThreads: *threads, AllowNaN: *allowNaN, Logger: log,
		}, *cast, bench{*batch, *repeat})
	})
}

func run(ctx context.Context, stdout io.Writer, log *zap.Logger, model string, ins []string, inName, out string, cfg onnx.Config, cast bool, b bench) error {
	switch {
	case model == "":
		return errors.New("--model is required")
	case len(ins) == 0:
		return errors.New("--input is required")
	case out == "":
		return errors.New("--out is required")
	case b.batch < 0:
		return fmt.Errorf("--batch %d: want 0 (the input's own) or more", b.batch)
	case b.repeat < 0:
		return fmt.Errorf("--repeat %d: want 0 or more", b.repeat)
	}
	// Fail on an unwritable output folder before any work.
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	probe, err := os.CreateTemp(out, ".infer-check-*")
	if err != nil {
		return fmt.Errorf("--out %s is not writable: %w", out, err)
	}
	probe.Close()
	os.Remove(probe.Name())

	arrays, err := readInputs(ins, inName)
	if err != nil {
		return err
	}
	if b.batch > 0 {
		for i := range arrays {
			if err := tile(arrays[i].Array, b.batch); err != nil {
				return fmt.Errorf("--batch %d: input %s: %w", b.batch, arrays[i].path, err)
			}
		}
	}
	batch := 0
	for _, a := range arrays {
		if len(a.Shape) == 0 {
			return fmt.Errorf("input %s is a scalar; the first dimension must be the batch", a.path)
		}
		batch = max(batch, a.Shape[0])
	}
	cfg.MaxBatch = max(batch, 1)
	s, err := onnx.Open(ctx, model, cfg)
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
	fed := make(map[int]bool)
	n := 0
	for _, a := range arrays {
		i, err := s.InputIndex(a.name)
		if err != nil {
			return err
		}
		if n, err = feed(s, i, infos[i], a, cast); err != nil {
			return fmt.Errorf("input %s: %w", a.path, err)
		}
		fed[i] = true
	}
	for i, in := range infos {
		if !fed[i] {
			return fmt.Errorf("model input %q was not given; pass --input %s=PATH", in.Name, in.Name)
		}
	}
	log.Info("running", zap.String("model", model), zap.Int("batch", n), zap.String("provider", string(s.Provider())))
	start := time.Now()
	if err := s.Run(n); err != nil {
		return err
	}
	ms := float64(time.Since(start).Microseconds()) / 1000

	sum := summary{Model: model, Batch: n, Provider: string(s.Provider()), MS: ms}
	if b.repeat > 0 {
		start := time.Now()
		for k := range b.repeat {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("after %d of %d timed runs: %w", k, b.repeat, err)
			}
			if err := s.Run(n); err != nil {
				return err
			}
		}
		el := time.Since(start)
		sum.Repeat, sum.MSPerRun = b.repeat, el.Seconds()*1000/float64(b.repeat)
		sum.SamplesPerSec = float64(n*b.repeat) / el.Seconds()
		log.Info("timed", zap.Int("runs", b.repeat), zap.Float64("ms_per_run", sum.MSPerRun), zap.Float64("samples_per_sec", sum.SamplesPerSec))
	}
	for i, o := range s.Outputs() {
		file := filepath.Join(out, fileName(o.Name)+".npy")
		shape := o.Shape(n)
		if err := writeOutput(s, i, o, shape, file); err != nil {
			return fmt.Errorf("writing output %q: %w", o.Name, err)
		}
		log.Info("wrote", zap.String("output", o.Name), zap.Int64s("shape", shape), zap.String("file", file))
		sum.Outputs = append(sum.Outputs, outputSummary{Name: o.Name, Shape: shape, DType: o.DType.String(), File: file})
	}
	return cli.Summary(stdout, sum)
}

// tile repeats a's rows (its first dimension) cyclically until it has batch rows, or keeps
// its first batch rows.
func tile(a *npy.Array, batch int) error {
	if len(a.Shape) == 0 || a.Shape[0] == 0 {
		return errors.New("no rows to repeat")
	}
	rows, row := a.Shape[0], a.Len()/a.Shape[0]
	switch {
	case a.F32 != nil:
		a.F32 = tileRows(a.F32, rows, row, batch)
	case a.F64 != nil:
		a.F64 = tileRows(a.F64, rows, row, batch)
	case a.I32 != nil:
		a.I32 = tileRows(a.I32, rows, row, batch)
	case a.I64 != nil:
		a.I64 = tileRows(a.I64, rows, row, batch)
	case a.U8 != nil:
		a.U8 = tileRows(a.U8, rows, row, batch)
	default:
		return fmt.Errorf("element type %s", a.Descr)
	}
	a.Shape = append([]int{batch}, a.Shape[1:]...)
	return nil
}

// tileRows is batch rows of row values, row r being src's row r mod rows.
func tileRows[T any](src []T, rows, row, batch int) []T {
	d := make([]T, batch*row)
	for r := range batch {
		copy(d[r*row:(r+1)*row], src[(r%rows)*row:])
	}
	return d
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

// feed copies a into input i, converting its element type only when cast is set.
func feed(s *onnx.Session, i int, info onnx.TensorInfo, a array, cast bool) (int, error) {
	shape := make([]int64, len(a.Shape))
	for k, d := range a.Shape {
		shape[k] = int64(d)
	}
	have := map[string]onnx.DType{"<f4": onnx.Float32, "<f8": onnx.Float64, "<i4": onnx.Int32, "<i8": onnx.Int64, "|u1": onnx.Uint8, "<u1": onnx.Uint8}[a.Descr]
	if have != info.DType && !cast {
		return 0, fmt.Errorf("%w: the file holds %s (%s), model input %q expects %s; convert it (numpy: arr.astype(...)) or pass --cast",
			onnx.ErrDType, have, a.Descr, info.Name, info.DType)
	}
	vals := asFloat64(a.Array)
	switch info.DType {
	case onnx.Float32:
		if have == onnx.Float32 {
			return onnx.Feed(s, i, shape, a.F32)
		}
		return onnx.Feed(s, i, shape, convert[float32](vals))
	case onnx.Float64:
		return onnx.Feed(s, i, shape, vals)
	case onnx.Int32:
		return onnx.Feed(s, i, shape, convert[int32](vals))
	case onnx.Int64:
		if have == onnx.Int64 {
			return onnx.Feed(s, i, shape, a.I64)
		}
		return onnx.Feed(s, i, shape, convert[int64](vals))
	case onnx.Uint8:
		return onnx.Feed(s, i, shape, convert[uint8](vals))
	}
	return 0, fmt.Errorf("%w: model input %q has element type %s", onnx.ErrDType, info.Name, info.DType)
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

func writeOutput(s *onnx.Session, i int, o onnx.TensorInfo, shape []int64, file string) error {
	dims := make([]int, len(shape))
	n := 1
	for k, d := range shape {
		dims[k] = int(d)
		n *= int(d)
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".tmp-"+filepath.Base(file)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	switch o.DType {
	case onnx.Float32:
		err = write[float32](s, i, tmp, dims, n)
	case onnx.Float64:
		err = write[float64](s, i, tmp, dims, n)
	case onnx.Int32:
		err = write[int32](s, i, tmp, dims, n)
	case onnx.Int64:
		err = write[int64](s, i, tmp, dims, n)
	case onnx.Uint8:
		err = write[uint8](s, i, tmp, dims, n)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

func write[T onnx.Element](s *onnx.Session, i int, f *os.File, dims []int, n int) error {
	buf, err := onnx.Output[T](s, i)
	if err != nil {
		return err
	}
	return npy.Write(f, dims, buf[:n])
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/onnxpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

const fixtures = "../../testdata"

// opts are the options for running model on inputs into out, as the flags' defaults give.
func opts(model string, inputs []string, out string) options {
	return options{model: model, inputs: inputs, out: out, provider: "cpu", threads: 1, sessions: 1}
}

func readNPY(t *testing.T, path string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestInferMatchesPyTorch runs the command's logic on each fixture and compares the .npy files
// it writes with PyTorch's outputs.
func TestInferMatchesPyTorch(t *testing.T) {
	for _, fx := range []struct {
		name    string
		outputs []string
	}{
		{"mlp_tanh", []string{"logits", "value"}},
		{"gaussian_relu", []string{"mu", "log_std"}},
		{"nature_cnn", []string{"action_logits", "state_value"}},
	} {
		t.Run(fx.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var stdout bytes.Buffer
			err := run(context.Background(), &stdout, zap.NewNop(), opts(filepath.Join(fixtures, fx.name+".onnx"),
				[]string{filepath.Join(fixtures, fx.name+".input.npy")}, out))
			if err != nil {
				t.Fatal(err)
			}
			var sum struct {
				Outputs []struct {
					Name  string  `json:"name"`
					Shape []int64 `json:"shape"`
				} `json:"outputs"`
				Provider string   `json:"provider"`
				MS       *float64 `json:"ms"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
			}
			if sum.Provider != "cpu" || sum.MS == nil || len(sum.Outputs) != len(fx.outputs) {
				t.Fatalf("summary %s", stdout.String())
			}
			for k, o := range fx.outputs {
				want := readNPY(t, filepath.Join(fixtures, fx.name+"."+o+".npy"))
				got := readNPY(t, filepath.Join(out, o+".npy"))
				if sum.Outputs[k].Name != o || len(got.Shape) != len(want.Shape) || got.Shape[0] != want.Shape[0] {
					t.Fatalf("output %s: summary %+v, shape %v want %v", o, sum.Outputs[k], got.Shape, want.Shape)
				}
				for j := range want.F32 {
					if d := math.Abs(float64(got.F32[j] - want.F32[j])); d > 1e-5 {
						t.Fatalf("output %s element %d: %v vs PyTorch %v", o, j, got.F32[j], want.F32[j])
					}
				}
			}
		})
	}
}

func TestInferErrors(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(fixtures, "mlp_tanh.onnx")
	input := filepath.Join(fixtures, "mlp_tanh.input.npy")
	f64 := filepath.Join(dir, "f64.npy")
	f, _ := os.Create(f64)
	npy.Write(f, []int{2, 4}, make([]float64, 8))
	f.Close()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	for _, tc := range []struct {
		name   string
		model  string
		inputs []string
		inName string
		out    string
		want   string
	}{
		{"no model", "", []string{input}, "", dir, "--model is required"},
		{"no input", model, nil, "", dir, "--input is required"},
		{"missing input file", model, []string{filepath.Join(dir, "none.npy")}, "", dir, "none.npy"},
		{"wrong input name", model, []string{input}, "observation", dir, `no input "observation"`},
		{"wrong dtype", model, []string{f64}, "", dir, `holds float64 (<f8), model input "obs" expects float32`},
		{"wrong shape", filepath.Join(fixtures, "gaussian_relu.onnx"), []string{input}, "", dir, "needs rows of shape [3], got [4]"},
		{"not npy", model, []string{model}, "", dir, "magic"},
		{"unwritable out", model, []string{input}, "", filepath.Join(blocker, "sub"), "--out"},
		{"missing model", filepath.Join(dir, "no.onnx"), []string{input}, "", dir, "no.onnx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			o := opts(tc.model, tc.inputs, tc.out)
			o.inName = tc.inName
			err := run(context.Background(), &stdout, zap.NewNop(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if stdout.Len() != 0 {
				t.Fatalf("printed a summary on failure: %s", stdout.String())
			}
		})
	}
	// With --cast, a float64 file feeds a float32 input.
	var stdout bytes.Buffer
	o := opts(model, []string{f64}, filepath.Join(dir, "cast"))
	o.cast = true
	if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
		t.Fatalf("--cast: %v", err)
	}
}

func TestFileName(t *testing.T) {
	for in, want := range map[string]string{"logits": "logits", "onnx::Gemm_5": "onnx__Gemm_5", "a/b": "a_b", "..": "output"} {
		if got := fileName(in); got != want {
			t.Errorf("fileName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestInferBench: --batch repeats the input rows cyclically (each output row is PyTorch's for
// the input row it repeats) and --repeat reports the timed runs' throughput.
func TestInferBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	o := opts(filepath.Join(fixtures, "mlp_tanh.onnx"), []string{filepath.Join(fixtures, "mlp_tanh.input.npy")}, out)
	o.batch, o.repeat = 40, 3
	err := run(context.Background(), &stdout, zap.NewNop(), o)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Batch         int     `json:"batch"`
		Repeat        int     `json:"repeat"`
		MSPerRun      float64 `json:"ms_per_run"`
		SamplesPerSec float64 `json:"samples_per_sec"`
		MSMedian      float64 `json:"ms_per_run_median"`
		ORTVersion    string  `json:"ort_version"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Batch != 40 || sum.Repeat != 3 || sum.MSPerRun <= 0 || sum.SamplesPerSec <= 0 || sum.MSMedian <= 0 || sum.ORTVersion != onnx.Version {
		t.Fatalf("summary %s", stdout.String())
	}
	want := readNPY(t, filepath.Join(fixtures, "mlp_tanh.logits.npy")) // 16 rows of 2
	got := readNPY(t, filepath.Join(out, "logits.npy"))
	if got.Shape[0] != 40 {
		t.Fatalf("logits shape %v", got.Shape)
	}
	for r := range 40 {
		for k := range 2 {
			if d := math.Abs(float64(got.F32[r*2+k] - want.F32[(r%16)*2+k])); d > 1e-5 {
				t.Fatalf("row %d: %v, PyTorch's row %d: %v", r, got.F32[r*2:r*2+2], r%16, want.F32[(r%16)*2:(r%16)*2+2])
			}
		}
	}
	for _, b := range [][2]int{{-1, 0}, {0, -2}} {
		o.batch, o.repeat = b[0], b[1]
		err := run(context.Background(), io.Discard, zap.NewNop(), o)
		if err == nil || !strings.Contains(err.Error(), "want 0") {
			t.Errorf("--batch %d --repeat %d: %v", b[0], b[1], err)
		}
	}
}

// TestInferSessions: --sessions 2 times two sessions at once (their runs all counted), writes
// the first session's outputs as one session does, and is refused without --repeat or past
// the CPUs.
func TestInferSessions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	o := opts(filepath.Join(fixtures, "mlp_tanh.onnx"), []string{filepath.Join(fixtures, "mlp_tanh.input.npy")}, out)
	o.repeat, o.sessions = 5, 2
	if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Batch         int     `json:"batch"`
		Repeat        int     `json:"repeat"`
		Sessions      int     `json:"sessions"`
		MSPerRun      float64 `json:"ms_per_run"`
		SamplesPerSec float64 `json:"samples_per_sec"`
		MSMedian      float64 `json:"ms_per_run_median"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Batch != 16 || sum.Repeat != 5 || sum.Sessions != 2 || sum.MSPerRun <= 0 || sum.MSMedian <= 0 ||
		sum.SamplesPerSec <= 0 || sum.SamplesPerSec*sum.MSPerRun/1000 < 1.5*16 { // two sessions' rows in each run's time
		t.Fatalf("summary %s", stdout.String())
	}
	want := readNPY(t, filepath.Join(fixtures, "mlp_tanh.logits.npy"))
	got := readNPY(t, filepath.Join(out, "logits.npy"))
	for i := range want.F32 {
		if d := math.Abs(float64(got.F32[i] - want.F32[i])); d > 1e-5 {
			t.Fatalf("logits[%d] = %v, PyTorch's %v", i, got.F32[i], want.F32[i])
		}
	}
	for _, c := range []struct {
		sessions, repeat int
		want             string
	}{
		{2, 0, "needs --repeat"},
		{0, 5, "want 1 to"},
		{runtime.NumCPU() + 1, 5, "want 1 to"},
	} {
		o.sessions, o.repeat = c.sessions, c.repeat
		if err := run(context.Background(), io.Discard, zap.NewNop(), o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--sessions %d --repeat %d: %v, want an error saying %q", c.sessions, c.repeat, err, c.want)
		}
	}
}

// writeNPY writes data of the given shape to dir/name and returns the path.
func writeNPY[T npy.Element](t *testing.T, dir, name string, shape []int, data []T) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := npy.Write(f, shape, data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// floatInfo declares a float32 tensor of the given dimensions: sizes (int64) or symbols (string).
func floatInfo(name string, dims ...any) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch d := d.(type) {
		case int64:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}
		case string:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}}
}

// writeModel writes g as an opset 13 model to dir/file and returns the path.
func writeModel(t *testing.T, dir, file string, g *onnxpb.GraphProto) string {
	t.Helper()
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(13)}},
		Graph:       g,
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoOutputModel writes a model whose outputs, named as given, are obs and -obs (float32
// [batch, 2]).
func twoOutputModel(t *testing.T, dir string, first, second string) string {
	t.Helper()
	return writeModel(t, dir, "two.onnx", &onnxpb.GraphProto{
		Name:   proto.String("two"),
		Input:  []*onnxpb.ValueInfoProto{floatInfo("obs", "batch", int64(2))},
		Output: []*onnxpb.ValueInfoProto{floatInfo(first, "batch", int64(2)), floatInfo(second, "batch", int64(2))},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Identity"), Input: []string{"obs"}, Output: []string{first}},
			{OpType: proto.String("Neg"), Input: []string{"obs"}, Output: []string{second}},
		},
	})
}

// TestOutputNamesCollide: outputs "a/b" and "a:b" both become a_b; each gets its own file
// (a_b.npy, a_b_2.npy in the model's order) holding its own values, and the summary names
// both. Before, the second overwrote the first.
func TestOutputNamesCollide(t *testing.T) {
	dir := t.TempDir()
	model := twoOutputModel(t, dir, "a/b", "a:b")
	in := writeNPY(t, dir, "in.npy", []int{3, 2}, []float32{1, 2, 3, 4, 5, 6})
	out := filepath.Join(dir, "out")
	var stdout bytes.Buffer
	if err := run(context.Background(), &stdout, zap.NewNop(), opts(model, []string{in}, out)); err != nil {
		t.Fatal(err)
	}
	var sum summary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	want := []outputSummary{
		{Name: "a/b", Shape: []int64{3, 2}, DType: "float32", File: filepath.Join(out, "a_b.npy")},
		{Name: "a:b", Shape: []int64{3, 2}, DType: "float32", File: filepath.Join(out, "a_b_2.npy")},
	}
	if d := cmp.Diff(want, sum.Outputs); d != "" {
		t.Fatalf("summary outputs (-want +got):\n%s", d)
	}
	for k, sign := range []float32{1, -1} {
		got := readNPY(t, want[k].File)
		for j, v := range got.F32 {
			if v != sign*float32(j+1) {
				t.Fatalf("%s element %d: %v, want %v", want[k].File, j, v, sign*float32(j+1))
			}
		}
	}
	for _, tc := range []struct{ in, want []string }{
		{[]string{"a/b", "a:b", "a_b"}, []string{"a_b.npy", "a_b_2.npy", "a_b_3.npy"}},
		{[]string{"x", "x_2", "x?2"}, []string{"x.npy", "x_2.npy", "x_2_2.npy"}},
		{[]string{"Value", "value"}, []string{"Value.npy", "value_2.npy"}},
		{[]string{"", "..", "output"}, []string{"output.npy", "output_2.npy", "output_3.npy"}},
	} {
		if got := fileNames(tc.in); !cmp.Equal(got, tc.want) {
			t.Errorf("fileNames(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestOutFolderOnlyOnSuccess: when infer refuses the model or the inputs, the --out folder
// (and the parents it would have made) does not exist afterwards; before, an empty one was
// left behind.
func TestOutFolderOnlyOnSuccess(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.onnx")
	os.WriteFile(garbage, []byte("not a model"), 0o644)
	input := filepath.Join(fixtures, "mlp_tanh.input.npy")
	f64 := writeNPY(t, dir, "f64.npy", []int{2, 4}, make([]float64, 8))
	for _, tc := range []struct {
		name   string
		model  string
		inputs []string
	}{
		{"refused model", garbage, []string{input}},
		{"missing model", filepath.Join(dir, "none.onnx"), []string{input}},
		{"input of the wrong type", filepath.Join(fixtures, "mlp_tanh.onnx"), []string{f64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "new", "out")
			if err := run(context.Background(), io.Discard, zap.NewNop(), opts(tc.model, tc.inputs, out)); err == nil {
				t.Fatal("no error")
			}
			if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
				t.Fatalf("%s exists after a failure (%v)", filepath.Join(dir, "new"), err)
			}
		})
	}
	// makeDir's cleanup removes exactly the empty folders it made.
	keep := filepath.Join(dir, "keep")
	os.Mkdir(keep, 0o755)
	cleanup, err := makeDir(filepath.Join(keep, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(filepath.Join(keep, "a")); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s", filepath.Join(keep, "a"))
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("cleanup removed the existing %s: %v", keep, err)
	}
}

// TestOutputWriteFails: an output file that cannot be written (a folder is in its place) is
// an error naming the output and the file; the folder keeps what it held (the previous
// value.npy folder, the outputs written before) and no temporary file.
func TestOutputWriteFails(t *testing.T) {
	out := t.TempDir()
	blocker := filepath.Join(out, "value.npy")
	if err := os.MkdirAll(filepath.Join(blocker, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := opts(filepath.Join(fixtures, "mlp_tanh.onnx"), []string{filepath.Join(fixtures, "mlp_tanh.input.npy")}, out)
	err := run(context.Background(), io.Discard, zap.NewNop(), o)
	if err == nil || !strings.Contains(err.Error(), `output "value"`) || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("run: %v; want an error naming output \"value\" and %s", err, blocker)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if diff := cmp.Diff([]string{"logits.npy", "value.npy"}, got); diff != "" {
		t.Errorf("--out holds (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(blocker, "inside")); err != nil {
		t.Errorf("the folder in the way changed: %v", err)
	}
}

// TestFlagChecks: a stray positional argument (which made Go's flag parsing skip every flag
// after it), --batch past its range or past memory (a crash before), and --threads outside
// -1 or 1..NumCPU are errors naming the value.
func TestFlagChecks(t *testing.T) {
	model := filepath.Join(fixtures, "mlp_tanh.onnx")
	input := filepath.Join(fixtures, "mlp_tanh.input.npy")
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"--model", model, "oops", "--input", input}, &stderr)
	if err == nil || !strings.Contains(err.Error(), `unexpected argument "oops"`) || !strings.Contains(err.Error(), `["--input" "`+input+`"]`) {
		t.Fatalf("stray argument: %v", err)
	}
	if !strings.Contains(stderr.String(), `infer: unexpected argument "oops"`) {
		t.Errorf("stderr lacks the error:\n%s", stderr.String())
	}
	if _, err := parseFlags([]string{"--model", model, "--out", "o", "x"}, io.Discard); err == nil || !strings.Contains(err.Error(), `unexpected argument "x"`) {
		t.Errorf("trailing argument: %v", err)
	}
	o, err := parseFlags([]string{"--model", model, "--input", input, "--out", "o"}, io.Discard)
	if err != nil || o.threads != 1 || o.provider != "cpu" || o.batch != 0 || len(o.cudaOptions) != 0 {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"--cuda-option", "use_tf32"}, {"--cuda-option", "=0"}, {"--cuda-option", "a=1", "--cuda-option", "a=2"}} {
		if _, err := parseFlags(append([]string{"--model", model, "--input", input, "--out", "o"}, bad...), io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	o, err = parseFlags([]string{"--model", model, "--input", input, "--out", "o", "--provider", "cuda",
		"--cuda-option", "use_tf32=0", "--cuda-option", "cudnn_conv_algo_search=HEURISTIC"}, io.Discard)
	if err != nil || o.cudaOptions.String() != "cudnn_conv_algo_search=HEURISTIC,use_tf32=0" {
		t.Fatalf("--cuda-option: %v, %v", o.cudaOptions, err)
	}

	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 30))
	out := filepath.Join(t.TempDir(), "out")
	for _, tc := range []struct {
		args []string
		is   error
		want string
	}{
		{[]string{"--batch", "4611686018427387904"}, nil, "--batch 4611686018427387904: want 0 (the input's own) to 2147483647"},
		{[]string{"--batch", "2147483648"}, nil, "--batch 2147483648: want 0"},
		{[]string{"--batch", "1000000000"}, onnx.ErrTooLarge, `--batch 1000000000: loading model`},
		{[]string{"--threads", "-7"}, nil, "--threads -7: want 1 to"},
		{[]string{"--threads", "1000"}, nil, "--threads 1000: want 1 to"},
		{[]string{"--provider", "gpu"}, onnx.ErrConfig, `--provider: onnx: invalid config: Provider "gpu"`},
		{[]string{"--cuda-option", "use_tf32=0"}, nil, "--cuda-option needs --provider cuda or auto"},
		{[]string{"--provider", "auto", "--cuda-option", "use tf32=0"}, onnx.ErrConfig, `Config.CUDAOptions has the name "use tf32"`},
	} {
		o, err := parseFlags(append([]string{"--model", model, "--input", input, "--out", out}, tc.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		err = run(context.Background(), io.Discard, zap.NewNop(), o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out %s made by refused runs", out)
	}
}

// TestBoolInput: a bool .npy is refused with a message saying what to do, and with --cast it
// feeds the model 0 and 1, as the same values stored as float32 do.
func TestBoolInput(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(fixtures, "mlp_tanh.onnx")
	bits := []bool{true, false, false, true, true, true, false, false}
	b1 := writeNPY(t, dir, "b1.npy", []int{2, 4}, bits)
	f32 := make([]float32, len(bits))
	for i, b := range bits {
		if b {
			f32[i] = 1
		}
	}
	f4 := writeNPY(t, dir, "f4.npy", []int{2, 4}, f32)
	err := run(context.Background(), io.Discard, zap.NewNop(), opts(model, []string{b1}, filepath.Join(dir, "refused")))
	if !errors.Is(err, onnx.ErrDType) || !strings.Contains(err.Error(), `holds bool (|b1), model input "obs" expects float32`) ||
		!strings.Contains(err.Error(), "arr.astype(np.float32)") || !strings.Contains(err.Error(), "--cast") {
		t.Fatalf("bool without --cast: %v", err)
	}
	o := opts(model, []string{b1}, filepath.Join(dir, "bool"))
	o.cast = true
	if err := run(context.Background(), io.Discard, zap.NewNop(), o); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), io.Discard, zap.NewNop(), opts(model, []string{f4}, filepath.Join(dir, "float"))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"logits.npy", "value.npy"} {
		got, want := readNPY(t, filepath.Join(dir, "bool", name)), readNPY(t, filepath.Join(dir, "float", name))
		if !cmp.Equal(got.F32, want.F32) {
			t.Errorf("%s: bool input gave %v, float32 0/1 input %v", name, got.F32, want.F32)
		}
	}
}

// TestBatchFromInputs: the batch is the rows of the inputs that follow the model's batch,
// whatever order the --input flags come in; those inputs must agree on it, and an input
// without a batch dimension neither sets it nor counts against it. RLlib's export
// (rllib_cartpole_mlp: obs [batch, 4] and state_ins [batch]; outputs output [batch, 2] and
// state_outs = state_ins) fed 16 observations gives PyTorch's 16 rows of logits, with 16
// states of zeros or one state row repeated by --batch 16; 16 observations and one state row
// are refused naming both inputs. Before, the last --input set the batch: state_ins last gave
// one row of logits, first 16 states of which 15 were never given.
func TestBatchFromInputs(t *testing.T) {
	dir := t.TempDir()
	const fx = fixtures + "/foreign/rllib_cartpole_mlp"
	model, obs := fx+".onnx", "obs="+fx+".input.npy"
	logits := readNPY(t, fx+".output.npy") // PyTorch's, for the 16 rows of obs
	one := "state_ins=" + writeNPY(t, dir, "one.npy", []int{1}, []float32{0})
	sixteen := "state_ins=" + writeNPY(t, dir, "sixteen.npy", []int{16}, make([]float32, 16))
	for _, tc := range []struct {
		name   string
		inputs []string
		batch  int
		err    string
	}{
		{name: "obs first", inputs: []string{obs, sixteen}},
		{name: "obs last", inputs: []string{sixteen, obs}},
		{name: "one state row repeated by --batch", inputs: []string{obs, one}, batch: 16},
		{name: "one state row last", inputs: []string{obs, one}, err: `inputs "obs" (` + fx + `.input.npy) and "state_ins" (` + filepath.Join(dir, "one.npy") + `) have 16 rows and 1`},
		{name: "one state row first", inputs: []string{one, obs}, err: `inputs "state_ins" (` + filepath.Join(dir, "one.npy") + `) and "obs" (` + fx + `.input.npy) have 1 rows and 16`},
		{name: "an input twice", inputs: []string{obs, sixteen, sixteen}, err: `model input "state_ins" is given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out", strings.ReplaceAll(tc.name, " ", "_"))
			o := opts(model, tc.inputs, out)
			o.batch = tc.batch
			var stdout bytes.Buffer
			err := run(context.Background(), &stdout, zap.NewNop(), o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if _, err := os.Stat(out); !os.IsNotExist(err) {
					t.Errorf("--out %s made by a refused run", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sum summary
			if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
				t.Fatal(err)
			}
			want := []outputSummary{
				{Name: "output", Shape: []int64{16, 2}, DType: "float32", File: filepath.Join(out, "output.npy")},
				{Name: "state_outs", Shape: []int64{16}, DType: "float32", File: filepath.Join(out, "state_outs.npy")},
			}
			if d := cmp.Diff(want, sum.Outputs); d != "" || sum.Batch != 16 {
				t.Fatalf("batch %d, outputs (-want +got):\n%s", sum.Batch, d)
			}
			got := readNPY(t, want[0].File)
			if !cmp.Equal(got.Shape, []int{16, 2}) {
				t.Fatalf("output.npy has shape %v", got.Shape)
			}
			for j, v := range logits.F32 {
				if d := math.Abs(float64(got.F32[j] - v)); d > 1e-5 {
					t.Fatalf("output element %d: %v, PyTorch's %v", j, got.F32[j], v)
				}
			}
			if st := readNPY(t, want[1].File); !cmp.Equal(st.Shape, []int{16}) || !cmp.Equal(st.F32, make([]float32, 16)) {
				t.Errorf("state_outs.npy: shape %v, %v; want the 16 zeros fed", st.Shape, st.F32)
			}
		})
	}
}

// negModel writes a model of two inputs, x [batch, 3] and k [2] (no batch dimension), whose
// outputs are y = −x [batch, 3] and z = −k [2].
func negModel(t *testing.T, dir string) string {
	t.Helper()
	return writeModel(t, dir, "neg.onnx", &onnxpb.GraphProto{
		Name:   proto.String("neg"),
		Input:  []*onnxpb.ValueInfoProto{floatInfo("x", "batch", int64(3)), floatInfo("k", int64(2))},
		Output: []*onnxpb.ValueInfoProto{floatInfo("y", "batch", int64(3)), floatInfo("z", int64(2))},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Neg"), Input: []string{"x"}, Output: []string{"y"}},
			{OpType: proto.String("Neg"), Input: []string{"k"}, Output: []string{"z"}},
		},
	})
}

// TestUnbatchedInput: an input without a batch dimension, given last, does not set the batch
// (before, its one "row" cut y to [1, 3]), and an output without one is written whole: y is
// −x with x's 4 rows (or --batch 6 rows, x's repeated), z is −k.
func TestUnbatchedInput(t *testing.T) {
	dir := t.TempDir()
	model := negModel(t, dir)
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	in := []string{"x=" + writeNPY(t, dir, "x.npy", []int{4, 3}, x), "k=" + writeNPY(t, dir, "k.npy", []int{2}, []float32{0.5, -2})}
	for _, batch := range []int{0, 6} {
		out := filepath.Join(dir, fmt.Sprint("out", batch))
		o := opts(model, in, out)
		o.batch = batch
		var stdout bytes.Buffer
		if err := run(context.Background(), &stdout, zap.NewNop(), o); err != nil {
			t.Fatal(err)
		}
		rows := batch
		if rows == 0 {
			rows = 4
		}
		y := make([]float32, rows*3)
		for j := range y {
			y[j] = -x[j%len(x)]
		}
		if got := readNPY(t, filepath.Join(out, "y.npy")); !cmp.Equal(got.Shape, []int{rows, 3}) || !cmp.Equal(got.F32, y) {
			t.Errorf("--batch %d: y.npy has shape %v and %v, want [%d 3] and %v", batch, got.Shape, got.F32, rows, y)
		}
		if got := readNPY(t, filepath.Join(out, "z.npy")); !cmp.Equal(got.Shape, []int{2}) || !cmp.Equal(got.F32, []float32{-0.5, 2}) {
			t.Errorf("--batch %d: z.npy has shape %v and %v, want [2] and [-0.5 2]", batch, got.Shape, got.F32)
		}
		var sum summary
		if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
			t.Fatal(err)
		}
		if sum.Batch != rows || len(sum.Outputs) != 2 || !cmp.Equal(sum.Outputs[0].Shape, []int64{int64(rows), 3}) || !cmp.Equal(sum.Outputs[1].Shape, []int64{2}) {
			t.Errorf("--batch %d: summary %s", batch, stdout.String())
		}
	}
}

// TestInputShape: an input with a dynamic dimension besides the batch is refused with advice
// naming --input-shape, and runs once --input-shape fixes it (the batch as -1 or "batch");
// malformed values are refused at parsing.
func TestInputShape(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "seq.onnx", &onnxpb.GraphProto{
		Name:   proto.String("seq"),
		Input:  []*onnxpb.ValueInfoProto{floatInfo("x", "batch", "n")},
		Output: []*onnxpb.ValueInfoProto{floatInfo("y", "batch", "n")},
		Node:   []*onnxpb.NodeProto{{OpType: proto.String("Neg"), Input: []string{"x"}, Output: []string{"y"}}},
	})
	x := []float32{1, 2, 3, 4, 5, 6}
	in := []string{writeNPY(t, dir, "x.npy", []int{2, 3}, x)}
	err := run(context.Background(), io.Discard, zap.NewNop(), opts(model, in, filepath.Join(dir, "refused")))
	if !errors.Is(err, onnx.ErrShape) || !strings.Contains(err.Error(), "--input-shape NAME=DIMS") {
		t.Fatalf("a dynamic dimension besides the batch: %v", err)
	}
	for _, shape := range []string{"x=-1x3", "x=batchx3"} {
		o, err := parseFlags([]string{"--model", model, "--input", in[0], "--out", filepath.Join(dir, shape), "--input-shape", shape}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if err := run(context.Background(), io.Discard, zap.NewNop(), o); err != nil {
			t.Fatalf("--input-shape %s: %v", shape, err)
		}
		got := readNPY(t, filepath.Join(dir, shape, "y.npy"))
		if want := []float32{-1, -2, -3, -4, -5, -6}; !cmp.Equal(got.Shape, []int{2, 3}) || !cmp.Equal(got.F32, want) {
			t.Errorf("--input-shape %s: y.npy %v %v, want [2 3] %v", shape, got.Shape, got.F32, want)
		}
	}
	for _, bad := range []string{"x", "x=", "=3", "x=0x3", "x=-2x3", "x=ax3"} {
		if _, err := parseFlags([]string{"--model", model, "--input", in[0], "--out", dir, "--input-shape", bad}, io.Discard); err == nil {
			t.Errorf("--input-shape %q accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"--model", model, "--input", in[0], "--out", dir, "--input-shape", "x=-1x3", "--input-shape", "x=-1x4"}, io.Discard); err == nil {
		t.Error("--input-shape given twice for x accepted")
	}
}

// TestStateBatchOnAxis1: a recurrent export whose state input and output are [1, batch, 3]
// (torch's [layers, batch, hidden], as SB3-contrib RecurrentPPO's [1, batch, 256]) runs
// without flags: the state is fed and written in the model's own layout, each row where it
// belongs (the output is the state negated), and the observations follow the same batch.
func TestStateBatchOnAxis1(t *testing.T) {
	dir := t.TempDir()
	model := writeModel(t, dir, "rnn.onnx", &onnxpb.GraphProto{
		Name:   proto.String("rnn"),
		Input:  []*onnxpb.ValueInfoProto{floatInfo("obs", "batch", int64(2)), floatInfo("h", int64(1), "batch", int64(3))},
		Output: []*onnxpb.ValueInfoProto{floatInfo("y", "batch", int64(2)), floatInfo("h_out", int64(1), "batch", int64(3))},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Neg"), Input: []string{"obs"}, Output: []string{"y"}},
			{OpType: proto.String("Neg"), Input: []string{"h"}, Output: []string{"h_out"}},
		},
	})
	const batch = 4
	obs := make([]float32, batch*2)
	h := make([]float32, batch*3)
	for i := range obs {
		obs[i] = float32(i + 1)
	}
	for i := range h {
		h[i] = float32(100 + i)
	}
	in := []string{"obs=" + writeNPY(t, dir, "obs.npy", []int{batch, 2}, obs), "h=" + writeNPY(t, dir, "h.npy", []int{1, batch, 3}, h)}
	out := filepath.Join(dir, "out")
	var stdout bytes.Buffer
	if err := run(context.Background(), &stdout, zap.NewNop(), opts(model, in, out)); err != nil {
		t.Fatal(err)
	}
	neg := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = -v
		}
		return y
	}
	if got := readNPY(t, filepath.Join(out, "h_out.npy")); !cmp.Equal(got.Shape, []int{1, batch, 3}) || !cmp.Equal(got.F32, neg(h)) {
		t.Errorf("h_out.npy: shape %v %v, want [1 %d 3] %v", got.Shape, got.F32, batch, neg(h))
	}
	if got := readNPY(t, filepath.Join(out, "y.npy")); !cmp.Equal(got.Shape, []int{batch, 2}) || !cmp.Equal(got.F32, neg(obs)) {
		t.Errorf("y.npy: shape %v %v", got.Shape, got.F32)
	}
	var sum summary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Batch != batch || len(sum.Outputs) != 2 || sum.Outputs[1].Name != "h_out" || !cmp.Equal(sum.Outputs[1].Shape, []int64{1, batch, 3}) {
		t.Errorf("summary %s", stdout.String())
	}
	// A state of rows that are not the observations' is refused, naming both.
	bad := []string{in[0], "h=" + writeNPY(t, dir, "h3.npy", []int{1, 3, 3}, h[:9])}
	if err := run(context.Background(), io.Discard, zap.NewNop(), opts(model, bad, filepath.Join(dir, "bad"))); err == nil || !strings.Contains(err.Error(), "rows") {
		t.Errorf("3 state rows for 4 observations: %v", err)
	}
}

// TestRecurrentPPOStates: SB3-contrib RecurrentPPO's export with a dynamic batch (the fixture's
// fixed batch freed by edit.DynamicBatch) takes its LSTM states as [1, batch, 64]; infer runs
// it without flags on 16 rows with zero states, and its values and next states match
// PyTorch's.
func TestRecurrentPPOStates(t *testing.T) {
	const name = fixtures + "/foreign/sb3c_recurrentppo_cartpole"
	fixed, err := os.ReadFile(name + ".onnx")
	if err != nil {
		t.Fatal(err)
	}
	freed, _, err := edit.DynamicBatch(context.Background(), fixed, edit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "rppo.onnx")
	if err := os.WriteFile(model, freed, 0o644); err != nil {
		t.Fatal(err)
	}
	obs := readNPY(t, name+".input.npy")
	n := obs.Shape[0]
	in := []string{"input=" + name + ".input.npy", "episode_starts=" + writeNPY(t, dir, "starts.npy", []int{n}, slices.Repeat([]float32{1}, n))}
	for _, s := range []string{"pi_h", "pi_c", "vf_h", "vf_c"} {
		in = append(in, s+"="+writeNPY(t, dir, s+".npy", []int{1, n, 64}, make([]float32, n*64)))
	}
	out := filepath.Join(dir, "out")
	if err := run(context.Background(), io.Discard, zap.NewNop(), opts(model, in, out)); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"values", "pi_h_out", "vf_c_out"} {
		got, want := readNPY(t, filepath.Join(out, o+".npy")), readNPY(t, name+"."+o+".npy")
		if !cmp.Equal(got.Shape, want.Shape) {
			t.Fatalf("%s: shape %v, PyTorch's %v", o, got.Shape, want.Shape)
		}
		for i := range want.F32 {
			if d := math.Abs(float64(got.F32[i] - want.F32[i])); d > 1e-4*math.Max(1, math.Abs(float64(want.F32[i]))) {
				t.Fatalf("%s element %d: %v, PyTorch %v", o, i, got.F32[i], want.F32[i])
			}
		}
	}
}

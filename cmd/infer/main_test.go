package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"go.uber.org/zap"
)

const fixtures = "../../testdata"

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
			err := run(context.Background(), &stdout, zap.NewNop(), filepath.Join(fixtures, fx.name+".onnx"),
				[]string{filepath.Join(fixtures, fx.name+".input.npy")}, "", out, onnx.Config{}, false, bench{})
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
			err := run(context.Background(), &stdout, zap.NewNop(), tc.model, tc.inputs, tc.inName, tc.out, onnx.Config{}, false, bench{})
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
	if err := run(context.Background(), &stdout, zap.NewNop(), model, []string{f64}, "", filepath.Join(dir, "cast"), onnx.Config{}, true, bench{}); err != nil {
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
	err := run(context.Background(), &stdout, zap.NewNop(), filepath.Join(fixtures, "mlp_tanh.onnx"),
		[]string{filepath.Join(fixtures, "mlp_tanh.input.npy")}, "", out, onnx.Config{}, false, bench{batch: 40, repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Batch         int     `json:"batch"`
		Repeat        int     `json:"repeat"`
		MSPerRun      float64 `json:"ms_per_run"`
		SamplesPerSec float64 `json:"samples_per_sec"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Batch != 40 || sum.Repeat != 3 || sum.MSPerRun <= 0 || sum.SamplesPerSec <= 0 {
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
	for _, b := range []bench{{batch: -1}, {repeat: -2}} {
		err := run(context.Background(), io.Discard, zap.NewNop(), filepath.Join(fixtures, "mlp_tanh.onnx"),
			[]string{filepath.Join(fixtures, "mlp_tanh.input.npy")}, "", out, onnx.Config{}, false, b)
		if err == nil || !strings.Contains(err.Error(), "want 0") {
			t.Errorf("bench %+v: %v", b, err)
		}
	}
}

package onnx

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/internal/npy"
)

const fixtures = "../testdata"

// fixture describes a PyTorch export from scripts/gen_fixtures.py.
type fixture struct {
	name    string
	input   string
	outputs []string
	rows    [][]int64 // row shape of each output
}

var allFixtures = []fixture{
	{"mlp_tanh", "obs", []string{"logits", "value"}, [][]int64{{2}, {1}}},
	{"gaussian_relu", "observation", []string{"mu", "log_std"}, [][]int64{{1}, {1}}},
	{"nature_cnn", "pixels", []string{"action_logits", "state_value"}, [][]int64{{6}, {1}}},
}

func readNPY(t testing.TB, path string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func open(t testing.TB, name string, cfg Config) *Session {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(fixtures, name+".onnx"), cfg)
	return closedAtEnd(t, s, err)
}

// closedAtEnd fails t on err, else closes s when t ends (a Close error fails t) and returns it.
func closedAtEnd(t testing.TB, s *Session, err error) *Session {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func shape64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

// TestParityWithPyTorch runs every fixture on ONNX Runtime through Session and compares with
// the outputs PyTorch computed for the same inputs, for a batch of 1 and the whole fixture batch.
func TestParityWithPyTorch(t *testing.T) {
	const tol = 1e-5
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			s := open(t, fx.name, Config{MaxBatch: 64})
			in := readNPY(t, filepath.Join(fixtures, fx.name+".input.npy"))
			want := make([]*npy.Array, len(fx.outputs))
			for k, o := range fx.outputs {
				want[k] = readNPY(t, filepath.Join(fixtures, fx.name+"."+o+".npy"))
			}
			if got := s.Inputs(); len(got) != 1 || got[0].Name != fx.input || !got[0].Batched {
				t.Fatalf("inputs %v, want one batched input %q", got, fx.input)
			}
			for k, info := range s.Outputs() {
				if info.Name != fx.outputs[k] || !info.Batched || !slices.Equal(info.Row, fx.rows[k]) {
					t.Fatalf("output %d is %+v, want %q rows %v", k, info, fx.outputs[k], fx.rows[k])
				}
			}
			rowIn := in.Len() / in.Shape[0]
			for _, batch := range []int{1, in.Shape[0]} {
				shape := shape64(in.Shape)
				shape[0] = int64(batch)
				n, err := Feed(s, 0, shape, in.F32[:batch*rowIn])
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Run(n); err != nil {
					t.Fatal(err)
				}
				for k := range fx.outputs {
					out, err := Output[float32](s, k)
					if err != nil {
						t.Fatal(err)
					}
					row := want[k].Len() / want[k].Shape[0]
					worst := 0.0
					for j := 0; j < batch*row; j++ {
						worst = math.Max(worst, math.Abs(float64(out[j]-want[k].F32[j])))
					}
					if worst > tol {
						t.Errorf("batch %d output %q: max abs error %.3g > %g", batch, fx.outputs[k], worst, tol)
					}
				}
			}
		})
	}
}

func TestMetadata(t *testing.T) {
	s := open(t, "mlp_tanh", Config{})
	want := map[string]string{
		"towerrl.env_id": "CartPole-v1", "towerrl.obs_shape": "4", "towerrl.action_space": "discrete:2",
		"towerrl.head": "categorical", "towerrl.version": "0",
	}
	for k, v := range want {
		if got := s.Metadata()[k]; got != v {
			t.Errorf("metadata %s = %q, want %q", k, got, v)
		}
	}
	if len(open(t, "gaussian_relu", Config{}).Metadata()) != 0 {
		t.Error("foreign model has towerrl metadata")
	}
	if s.Provider() != ProviderCPU || s.MaxBatch() != DefaultMaxBatch || s.StaticBatch() {
		t.Errorf("provider %s max batch %d static %v", s.Provider(), s.MaxBatch(), s.StaticBatch())
	}
}

// TestRunAllocatesNothing: after the first call at a batch size, Run allocates nothing.
func TestRunAllocatesNothing(t *testing.T) {
	s := open(t, "mlp_tanh", Config{})
	in, err := Input[float32](s, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = float32(i%7) * 0.1
	}
	for _, batch := range []int{1, 64, 1024} {
		if err := s.Run(batch); err != nil {
			t.Fatal(err)
		}
		if a := testing.AllocsPerRun(50, func() {
			if err := s.Run(batch); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("batch %d: %v allocations per Run, want 0", batch, a)
		}
	}
}

// TestBatchesAreIndependent: rows do not leak between batch sizes that share buffers.
func TestBatchesAreIndependent(t *testing.T) {
	s := open(t, "mlp_tanh", Config{MaxBatch: 8})
	in, _ := Input[float32](s, 0)
	for i := range in {
		in[i] = float32(i) * 0.01
	}
	if err := s.Run(8); err != nil {
		t.Fatal(err)
	}
	out, _ := Output[float32](s, 0)
	all := slices.Clone(out[:16])
	for b := 1; b <= 8; b++ {
		clear(out)
		if err := s.Run(b); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out[:2*b], all[:2*b]) {
			t.Fatalf("batch %d: %v, want %v", b, out[:2*b], all[:2*b])
		}
	}
}

func TestBadModels(t *testing.T) {
	ctx := context.Background()
	good, err := os.ReadFile(filepath.Join(fixtures, "mlp_tanh.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path string
		is         error
		want       string
	}{
		{"missing file", filepath.Join(dir, "nope.onnx"), os.ErrNotExist, "nope.onnx"},
		{"empty file", write("empty.onnx", nil), ErrModel, "empty"},
		{"not onnx", write("text.onnx", []byte("this is a text file, not a protobuf\n")), ErrModel, "not a readable ONNX model"},
		{"truncated", write("trunc.onnx", good[:len(good)/2]), ErrModel, "not a readable ONNX model"},
		{"numpy file", filepath.Join(fixtures, "mlp_tanh.input.npy"), ErrModel, "not a readable ONNX model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, tc.path, Config{})
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), filepath.Base(tc.path)) {
				t.Fatalf("error %q: want errors.Is %v, mentioning %q and the file", err, tc.is, tc.want)
			}
		})
	}
}

func TestBadInputs(t *testing.T) {
	s := open(t, "mlp_tanh", Config{MaxBatch: 32})
	for _, tc := range []struct {
		name string
		err  error
		is   error
		want []string
	}{
		{"unknown input name", func() error { _, err := s.InputIndex("observations"); return err }(),
			ErrInput, []string{`"observations"`, `"obs"`}},
		{"input index", func() error { _, err := Input[float32](s, 3); return err }(), ErrInput, []string{"index 3"}},
		{"wrong dtype", func() error { _, err := Feed(s, 0, []int64{2, 4}, make([]float64, 8)); return err }(),
			ErrDType, []string{`"obs"`, "float32", "float64"}},
		{"wrong buffer dtype", func() error { _, err := Input[int64](s, 0); return err }(), ErrDType, []string{"int64"}},
		{"wrong rank", func() error { _, err := Feed(s, 0, []int64{8}, make([]float32, 8)); return err }(),
			ErrShape, []string{"rank 2", "rank 1"}},
		{"wrong row shape", func() error { _, err := Feed(s, 0, []int64{2, 3}, make([]float32, 6)); return err }(),
			ErrShape, []string{"[4]", "[3]"}},
		{"data length", func() error { _, err := Feed(s, 0, []int64{2, 4}, make([]float32, 7)); return err }(),
			ErrShape, []string{"8 elements", "got 7"}},
		{"batch over max (feed)", func() error { _, err := Feed(s, 0, []int64{33, 4}, make([]float32, 132)); return err }(),
			ErrBatch, []string{"33", "1 to 32"}},
		{"batch over max (run)", s.Run(33), ErrBatch, []string{"33", "1 to 32"}},
		{"batch zero", s.Run(0), ErrBatch, []string{"batch of 0"}},
	} {
		if !errors.Is(tc.err, tc.is) {
			t.Errorf("%s: error %v, want errors.Is %v", tc.name, tc.err, tc.is)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: error %q does not mention %s", tc.name, tc.err, w)
			}
		}
	}
}

func TestNaNReported(t *testing.T) {
	s := open(t, "mlp_tanh", Config{MaxBatch: 8})
	in, _ := Input[float32](s, 0)
	clear(in)
	in[2*4+3] = float32(math.NaN())
	err := s.Run(4)
	if !errors.Is(err, ErrNaN) || !strings.Contains(err.Error(), "row 2 element 3") {
		t.Fatalf("error %v, want ErrNaN at row 2 element 3", err)
	}
	if err := s.Run(2); err != nil { // the NaN row is outside a batch of 2
		t.Fatalf("batch 2: %v", err)
	}
	allow := open(t, "mlp_tanh", Config{MaxBatch: 8, AllowNaN: true})
	in2, _ := Input[float32](allow, 0)
	in2[0] = float32(math.NaN())
	if err := allow.Run(1); err != nil {
		t.Fatalf("AllowNaN: %v", err)
	}
	if out, _ := Output[float32](allow, 0); !math.IsNaN(float64(out[0])) {
		t.Fatalf("AllowNaN: NaN input gave %v", out[0])
	}
}

func TestClosed(t *testing.T) {
	s := open(t, "mlp_tanh", Config{MaxBatch: 2})
	if err := s.Run(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Run(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := Input[float32](s, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Input after Close: %v", err)
	}
}

func TestProviders(t *testing.T) {
	plugin := filepath.Join(t.TempDir(), "libonnxruntime_providers_cuda.so")
	_, err := Open(context.Background(), filepath.Join(fixtures, "mlp_tanh.onnx"),
		Config{Provider: ProviderCUDA, CUDAProviderLibrary: plugin})
	if !errors.Is(err, ErrProvider) || !strings.Contains(err.Error(), plugin) || !strings.Contains(err.Error(), "make gpu-setup") {
		t.Fatalf("cuda without the plugin: %v", err)
	}
	s := open(t, "mlp_tanh", Config{Provider: ProviderAuto, CUDAProviderLibrary: plugin})
	if s.Provider() != ProviderCPU {
		t.Fatalf("auto without CUDA runs on %s", s.Provider())
	}
	if p, err := ParseProvider("gpu"); err == nil {
		t.Fatalf("ParseProvider(gpu) = %s", p)
	}
}

func TestConcurrentInit(t *testing.T) {
	done := make(chan error, 8)
	for range 8 {
		go func() { done <- Init("") }()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	path, version := Loaded()
	if path == "" || !strings.HasPrefix(version, "1.") {
		t.Fatalf("Loaded() = %q, %q", path, version)
	}
	if err := Init(filepath.Join(t.TempDir(), "other.so")); !errors.Is(err, ErrLibrary) || !strings.Contains(err.Error(), "already loaded") {
		t.Fatalf("second library: %v", err)
	}
}

// TestScalarOutput: a model with a rank-0 output is refused with an error naming it, not a
// nil-pointer panic in the shape probe (onnxruntime_go cannot wrap such an output).
// testdata/scalar_output.onnx: y = ReduceSum(x, keepdims=0), z = Relu(x).
func TestScalarOutput(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join("testdata", "scalar_output.onnx"), Config{MaxBatch: 4})
	if !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), `output "y" is a scalar`) {
		t.Fatalf("Open: %v", err)
	}
}

// firstNaN32 finds the first NaN, whatever its sign and payload, and takes no ±Inf or
// largest finite value for one; checked against a loop comparing each value with itself.
func TestFirstNaN32(t *testing.T) {
	specials := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32, 0,
		float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, float32(math.NaN()),
		math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001), math.Float32frombits(0xff800001)}
	rng := rand.New(rand.NewPCG(5, 5))
	for range 2000 {
		x := make([]float32, rng.IntN(40))
		for i := range x {
			if rng.IntN(8) == 0 {
				x[i] = specials[rng.IntN(len(specials))]
			} else {
				x[i] = float32(rng.NormFloat64())
			}
		}
		want := -1
		for i, v := range x {
			if v != v {
				want = i
				break
			}
		}
		if got := firstNaN32(x); got != want {
			t.Fatalf("firstNaN32(%v) = %d, want %d", x, got, want)
		}
	}
}
